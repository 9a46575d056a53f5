"""htgrid's EC2 GAHP with spot requests scripted (moto fulfils every one at once).

    python ec2_spot_gahp.py --control DIR [anything the real GAHP takes, ignored]

Every command but the spot ones goes to the real EC2 GAHP (and so to moto). Spot requests
are kept here instead: EC2_VM_START_SPOT makes `sir-fake<N>` (or returns the live request
of its launch group, as the real server does), EC2_VM_STOP_SPOT cancels one, and
EC2_VM_STATUS_ALL_SPOT reports each request that is not cancelled with the state and status
code written in `DIR/spot` (`open pending-evaluation` if there is no such file), e.g.
`failed bad-parameters` or `open price-too-low`. A cancelled request is reported
`cancelled canceled-before-fulfillment`. `DIR/requests.log` gets one line per spot command.
"""

from __future__ import annotations

import argparse
import asyncio
import sys
from collections.abc import Sequence
from pathlib import Path

from htgrid.backends.ec2.server import Ec2Gahp, Ec2Options
from htgrid.gahp import Call


class ScriptedSpot(Ec2Gahp):
    def __init__(self, control: Path) -> None:
        super().__init__(Ec2Options())
        self.control = control
        self.requests: dict[str, tuple[str, bool]] = {}  # id -> (launch group, cancelled)

    def _log(self, line: str) -> None:
        with open(self.control / "requests.log", "a", encoding="ascii") as out:
            out.write(line + "\n")

    async def spot_start(self, call: Call) -> Sequence[str]:
        token = call.args[12]
        self._log(f"EC2_VM_START_SPOT {token}")
        for request_id, (group, cancelled) in self.requests.items():
            if group == token and not cancelled:
                return ("0", request_id)
        request_id = f"sir-fake{len(self.requests) + 1}"
        self.requests[request_id] = (token, False)
        return ("0", request_id)

    async def spot_stop(self, call: Call) -> Sequence[str]:
        request_id = call.args[3]
        self._log(f"EC2_VM_STOP_SPOT {request_id}")
        if request_id not in self.requests:
            return ("1", "E_UNKNOWN", f"InvalidSpotInstanceRequestID.NotFound: {request_id}")
        self.requests[request_id] = (self.requests[request_id][0], True)
        return ("0",)

    async def spot_status_all(self, call: Call) -> Sequence[str]:
        self._log("EC2_VM_STATUS_ALL_SPOT")
        script = self.control / "spot"
        state, code = (
            script.read_text().split() if script.exists() else ["open", "pending-evaluation"]
        )
        fields = ["0"]
        for request_id, (group, cancelled) in self.requests.items():
            if cancelled:
                fields += [request_id, "cancelled", group, "NULL", "canceled-before-fulfillment"]
            else:
                fields += [request_id, state, group, "NULL", code]
        return fields


def main(argv: Sequence[str]) -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--control", type=Path, required=True)
    args, _ = parser.parse_known_args(argv)
    gahp = ScriptedSpot(args.control)
    try:
        asyncio.run(gahp.server().serve_stdio())
    finally:
        gahp.close()
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
