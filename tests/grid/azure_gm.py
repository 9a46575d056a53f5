"""A grid manager with the test Azure GAHP, run until SIGTERM (the kill -9 tests' child).

python azure_gm.py <home> -- <azure gahp argv...>
"""

from __future__ import annotations

import asyncio
import logging
import signal
import sys

from htgrid.grid import GRID_TYPES, GridManager, GridManagerConfig
from htgrid.grid.azure._job import azure_grid_type

CONFIG = GridManagerConfig(
    poll_interval=0.3,
    feed_interval=0.1,
    down_ping_interval=0.3,
    min_ping_interval=0.2,
    retry_initial=0.2,
    retry_max=1.0,
    # A create the killed manager's GAHP left on its way must land before the lookup:
    # 1 s was once too short at the whole suite's load (the same VM PUT twice).
    lost_submit_grace=3.0,
)


async def main(home: str, gahp: list[str]) -> None:
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for signum in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(signum, stop.set)
    types = {**GRID_TYPES, "azure": azure_grid_type(gahp)}
    await GridManager(home, config=CONFIG, grid_types=types).run(stop)


if __name__ == "__main__":
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(message)s")
    split = sys.argv.index("--")
    asyncio.run(main(sys.argv[1], sys.argv[split + 1 :]))
