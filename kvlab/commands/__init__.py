"""Subcommands of the `kvlab` command line, one module each."""
