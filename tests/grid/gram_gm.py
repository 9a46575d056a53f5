"""A grid manager with the gt2 grid type's GAHP in the GRAM network namespace, run until
SIGTERM (the kill -9 test's child).

python gram_gm.py <home>
"""

from __future__ import annotations

import asyncio
import logging
import signal
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))

from gram_env import GRAM_GAHP

from htgrid.grid import GRID_TYPES, GridManager, GridManagerConfig
from htgrid.grid.gram import gram_grid_type

CONFIG = GridManagerConfig(
    poll_interval=0.5,
    feed_interval=0.1,
    down_ping_interval=0.5,
    min_ping_interval=0.2,
    retry_initial=0.2,
    retry_max=1.0,
    lost_submit_grace=1.0,
)


async def main(home: str) -> None:
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for signum in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(signum, stop.set)
    types = {**GRID_TYPES, "gt2": gram_grid_type(GRAM_GAHP)}
    await GridManager(home, config=CONFIG, grid_types=types).run(stop)


if __name__ == "__main__":
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(message)s")
    asyncio.run(main(sys.argv[1]))
