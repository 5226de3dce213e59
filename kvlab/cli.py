"""The `kvlab` command line; each subcommand lives in `kvlab/commands/<name>.py` with `add_parser(subparsers)`.

Building the parser imports no torch; each handler imports what it needs. Every error a user or the machine causes
is one line (exit 2 for input, 1 for the environment, 130 for Ctrl-C): only genuine bugs show a traceback.
"""

from __future__ import annotations

import argparse
import importlib
import os
import sys

from kvlab.errors import KvlabEnvironmentError, KvlabUserError, one_line
from kvlab.log import progress_shown

COMMANDS = ("models", "run", "size", "bench", "explore")
INTERRUPTED = 130  # 128 + SIGINT, what a shell reports for Ctrl-C
USAGE = 2  # bad input, as argparse itself reports it
ENVIRONMENT = 1  # the machine failed the command: network, disk, permissions


def build_parser() -> argparse.ArgumentParser:
    from kvlab._version import __version__

    parser = argparse.ArgumentParser(prog="kvlab", description="See and measure what a transformer's KV cache does.")
    parser.add_argument("--version", action="version", version=f"kvlab {__version__}")
    subparsers = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    for name in COMMANDS:
        importlib.import_module(f"kvlab.commands.{name}").add_parser(subparsers)
    return parser


def main(argv: list[str] | None = None) -> int:
    try:
        parser = build_parser()
        args = parser.parse_args(argv)
    except KeyboardInterrupt:
        print("kvlab: interrupted", file=sys.stderr)
        return INTERRUPTED
    try:
        with progress_shown():  # the library's progress lines (info), as `kvlab: ...` on stderr: kvlab/log.py
            return args.handler(args) or 0
    except KeyboardInterrupt:
        print(f"kvlab {args.command}: interrupted", file=sys.stderr)
        return INTERRUPTED
    except BrokenPipeError:  # `kvlab size --list | head`: the reader left; nothing to say
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return ENVIRONMENT
    # kvlab's input errors (kvlab/errors.py), then a failed download, a full disk, a missing extra
    except (KvlabUserError, ValueError, KvlabEnvironmentError, OSError) as err:
        print(f"kvlab {args.command}: error: {one_line(err)}", file=sys.stderr)
        return USAGE if isinstance(err, (KvlabUserError, ValueError)) else ENVIRONMENT


if __name__ == "__main__":
    sys.exit(main())
