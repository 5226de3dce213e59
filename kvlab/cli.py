"""The `kvlab` command line. Each subcommand lives in `kvlab/commands/<name>.py` with `add_parser(subparsers)`.

Invalid input exits with status 2 and one line that names what is valid; no traceback.
"""

from __future__ import annotations

import argparse
import importlib
import sys

COMMANDS = ("models", "run", "size", "bench", "explore")


class UsageError(Exception):
    """Raised by a subcommand for bad input: printed as one line, exit status 2."""


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="kvlab", description="See and measure what a transformer's KV cache does.")
    subparsers = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    for name in COMMANDS:
        try:
            module = importlib.import_module(f"kvlab.commands.{name}")
        except ModuleNotFoundError as err:
            if err.name != f"kvlab.commands.{name}":
                raise
            continue  # a command not built yet
        module.add_parser(subparsers)
    return parser


def main(argv: list[str] | None = None) -> int:
    from kvlab.caches import CacheCropError, CacheOptionError
    from kvlab.models import UnknownModelError
    from kvlab.trace import TraceFormatError

    parser = build_parser()
    args = parser.parse_args(argv)
    try:
        return args.handler(args) or 0
    except (UsageError, CacheOptionError, CacheCropError, UnknownModelError, TraceFormatError, ValueError) as err:
        print(f"kvlab {args.command}: error: {err}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
