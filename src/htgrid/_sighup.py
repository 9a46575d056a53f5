"""`python -m htgrid._sighup MODULE ARG...`: `python -m MODULE ARG...` with SIGHUP ignored
from the process's first moment.

The master passes condor_reconfig on as SIGHUP to the children that take it (the
collector, the job router); one that is still importing (seconds, on a loaded host) has
no handler yet, and SIGHUP's default would end it. Ignored until the child's own handler
replaces it (`htgrid._aio.take_sighup`): it reads its configuration after that anyway.
"""

from __future__ import annotations

import runpy
import signal
import sys


def main() -> None:
    signal.signal(signal.SIGHUP, signal.SIG_IGN)
    if len(sys.argv) < 2:
        sys.exit("usage: python -m htgrid._sighup MODULE [ARG...]")
    module = sys.argv[1]
    sys.argv = [module, *sys.argv[2:]]
    runpy.run_module(module, run_name="__main__", alter_sys=True)


if __name__ == "__main__":
    main()
