"""The `localspec` command line."""
