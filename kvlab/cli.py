"""The `kvlab` command line. Each subcommand lives in `kvlab/commands/<name>.py` with `add_parser(subparsers)`.

Invalid input exits with status 2 and one line that names what is valid; no traceback. Ctrl-C exits with
status 130 and one line (an interrupted `kvlab models prepare` leaves no partial directory: see
`kvlab.models.convert`).
"""

from __future__ import annotations

import argparse
import importlib
import sys

COMMANDS = ("models", "run", "size", "bench", "explore")
INTERRUPTED = 130  # 128 + SIGINT, what a shell reports for Ctrl-C


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


def user_errors() -> tuple[type[BaseException], ...]:
    """Every exception a user's input or environment can cause: printed as one line, never a traceback."""
    from kvlab.caches import CacheCropError, CacheOptionError
    from kvlab.models import ModelIntegrityError, ModelLoadError, UnknownModelError
    from kvlab.models.sources import ModelSourceError
    from kvlab.paths import KvlabHomeError
    from kvlab.trace import TraceFormatError

    return (UsageError, CacheOptionError, CacheCropError, UnknownModelError, ModelLoadError, ModelIntegrityError,
            ModelSourceError, KvlabHomeError, TraceFormatError, ValueError)  # fmt: skip


def one_line(err: BaseException) -> str:
    return " ".join(str(err).split()) or type(err).__name__


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    try:
        return args.handler(args) or 0
    except KeyboardInterrupt:
        print(f"kvlab {args.command}: interrupted", file=sys.stderr)
        return INTERRUPTED
    except user_errors() as err:
        print(f"kvlab {args.command}: error: {one_line(err)}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
