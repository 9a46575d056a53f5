"""`python -m htgrid` runs the `htgrid` command."""

from htgrid.cli import main

raise SystemExit(main())
