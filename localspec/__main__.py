"""Lets `python -m localspec` behave exactly like the `localspec` command."""

from localspec.cli.main import main

raise SystemExit(main())
