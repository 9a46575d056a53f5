import sys

from htgrid.cli import main

sys.exit(main())
