"""Lets `python -m localspec` behave exactly like the `localspec` command."""

from localspec.cli import main

raise SystemExit(main())
