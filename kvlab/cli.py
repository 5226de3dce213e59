"""The `kvlab` command line. Each subcommand lives in `kvlab/commands/<name>.py` with `add_parser(subparsers)`.

Building the parser imports no torch: `kvlab --help`, `kvlab --version` and `kvlab size` start in a fraction of a
second; each handler imports what it needs. Invalid input exits with status 2 and one line that names what is
valid; an environment failure (a failed download, a full or read-only disk) exits with status 1 and one line;
Ctrl-C exits with status 130 and one line (an interrupted `kvlab models prepare` leaves no partial directory: see
`kvlab.models.convert`). Only genuine bugs show a traceback.
"""

from __future__ import annotations

import argparse
import importlib
import os
import sys

from kvlab.commands import UsageError

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


# Exceptions a user's input or environment can cause, by module: a module that was never imported cannot have
# raised one, so matching them imports nothing (a `kvlab size` mistake stays torch-free).
USER_ERRORS = {
    "kvlab.caches.options": ("CacheOptionError",),
    "kvlab.caches.crop_rules": ("CacheCropError",),
    "kvlab.models": ("UnknownModelError", "ModelLoadError"),
    "kvlab.models.manifest": ("ModelIntegrityError",),
    "kvlab.paths": ("KvlabHomeError",),
    "kvlab.recording.trace": ("TraceFormatError",),
}
# A file kvlab could not write (a full disk, a missing directory: `kvlab.atomic`) is the machine's failure, like
# any OSError: status 1; its message already names the file and says the one that was there is unchanged.
ENVIRONMENT_ERRORS = {
    "kvlab.models.sources": ("ModelSourceError",),
    "kvlab.extras": ("MissingExtraError",),
    "kvlab.atomic": ("AtomicWriteError",),
}


def _loaded(table: dict) -> tuple[type[BaseException], ...]:
    return tuple(
        getattr(sys.modules[module], name) for module, names in table.items() if module in sys.modules for name in names
    )


def user_errors() -> tuple[type[BaseException], ...]:
    """Every exception a user's input can cause: printed as one line, exit status 2, never a traceback."""
    return (UsageError, ValueError, *_loaded(USER_ERRORS))


def environment_errors() -> tuple[type[BaseException], ...]:
    """A failed download, a disk that is full or read-only, a file that cannot be written: one line, status 1."""
    return (OSError, *_loaded(ENVIRONMENT_ERRORS))


def one_line(err: BaseException) -> str:
    if isinstance(err, OSError) and err.strerror:  # "No space left on device: /path", not "[Errno 28] ..."
        named = err.filename is None or str(err.filename) in err.strerror  # AtomicWriteError names it already
        return " ".join((err.strerror if named else f"{err.strerror}: {err.filename}").split())
    return " ".join(str(err).split()) or type(err).__name__


def main(argv: list[str] | None = None) -> int:
    try:
        parser = build_parser()
        args = parser.parse_args(argv)
    except KeyboardInterrupt:
        print("kvlab: interrupted", file=sys.stderr)
        return INTERRUPTED
    try:
        return args.handler(args) or 0
    except KeyboardInterrupt:
        print(f"kvlab {args.command}: interrupted", file=sys.stderr)
        return INTERRUPTED
    except BrokenPipeError:  # `kvlab size --list | head`: the reader left; nothing to say
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return ENVIRONMENT
    except user_errors() as err:
        print(f"kvlab {args.command}: error: {one_line(err)}", file=sys.stderr)
        return USAGE
    except environment_errors() as err:
        print(f"kvlab {args.command}: error: {one_line(err)}", file=sys.stderr)
        return ENVIRONMENT


if __name__ == "__main__":
    sys.exit(main())
