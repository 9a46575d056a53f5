"""A grid manager with the ARC grid type, run until SIGTERM (the kill -9 tests' child).

python arc_gm.py <home>
"""

from __future__ import annotations

import asyncio
import logging
import signal
import sys

from htgrid.grid import GridManager, GridManagerConfig

CONFIG = GridManagerConfig(
    poll_interval=1.0,
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
    await GridManager(home, config=CONFIG).run(stop)


if __name__ == "__main__":
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(message)s")
    asyncio.run(main(sys.argv[1]))
