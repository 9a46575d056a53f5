"""`python -m htgrid.backends.ec2`: the EC2 GAHP on stdin and stdout (see `cli`)."""

from __future__ import annotations

import sys

from htgrid.backends.ec2.cli import main

if __name__ == "__main__":
    sys.exit(main())
