"""Subcommands of the `kvlab` command line, one module each, and what they share.

`UsageError` lives here, not in `kvlab.cli`: the commands raise it and `kvlab.cli` (which imports the commands)
catches it, so both import it from this module and neither imports the other's module for it.
Every command that reports a result takes the same two options: `--json` prints one JSON object instead of the
human report, and `--output FILE` writes what would be printed (JSON or report) to FILE instead of stdout,
atomically (`kvlab.atomic`): a failed write leaves the FILE that was there as it was and names it in one line.
Nothing here imports torch: building the parser must stay light (`kvlab --help`).
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from kvlab.atomic import check_writable, write_text
from kvlab.errors import KvlabUserError


class UsageError(KvlabUserError):
    """Raised by a subcommand for bad input: printed as one line, exit status 2."""


class HelpFormatter(argparse.RawDescriptionHelpFormatter):
    """Keeps an example's line breaks and shows an option's default where it has one and its help does not say it.

    argparse's own ArgumentDefaultsHelpFormatter would also print "(default: None)" for every unset option."""

    def _get_help_string(self, action):
        text = action.help or ""
        unset = action.default is None or action.default is False or action.default == argparse.SUPPRESS
        shown = not unset and "default" not in text
        return f"{text} (default: %(default)s)" if shown and action.option_strings else text


def add_command(subparsers, name: str, summary: str, *examples: str) -> argparse.ArgumentParser:
    """A subcommand whose `--help` opens with what it does and ends with how to call it: the first hour of a new
    user is spent in `--help`, so every subcommand has a one-line summary, examples and its defaults."""
    lines = "\n".join(f"  {example}" for example in examples)
    return subparsers.add_parser(
        name,
        help=summary,
        description=summary[0].upper() + summary[1:] + ".",
        epilog=f"example{'s' if len(examples) > 1 else ''}:\n{lines}",
        formatter_class=HelpFormatter,
    )


def add_output_options(parser, what: str = "the result") -> None:
    parser.add_argument("--json", action="store_true", help=f"print {what} as one JSON object")
    parser.add_argument("--output", metavar="FILE", help="write what would be printed (JSON or report) to FILE")


class Output:
    """Collects a command's report and writes it to stdout or to `--output FILE` (also on the error path: nothing)."""

    def __init__(self, args):
        self.path = getattr(args, "output", None)
        self.lines: list[str] = []
        check_output_paths(self.path)

    def print(self, text: str = "") -> None:
        if self.path is None:
            print(text)
        else:
            self.lines.append(text)

    def json(self, data, **kwargs) -> None:
        self.print(json.dumps(data, **kwargs))

    def close(self) -> None:
        if self.path is not None:
            write_text(self.path, "\n".join(self.lines) + "\n")
            print(f"wrote {self.path}", file=sys.stderr)


def check_output_paths(*paths: str | None) -> None:
    """Refuse, before a command does its work, a file it could not write afterwards (AtomicWriteError, one line:
    a missing directory, a directory named as a file); None (the option not given) passes."""
    for path in paths:
        if path is not None:
            check_writable(path)


def read_text_argument(path: str, what: str = "prompt file") -> str:
    """A file's text, or stdin's for `-`; a missing or unreadable file is a UsageError."""
    if path == "-":
        try:
            return sys.stdin.read()
        except UnicodeDecodeError:
            raise UsageError(f"{what} on stdin is not UTF-8 text") from None
    file = Path(path)
    if not file.is_file():
        raise UsageError(f"{what} {file} does not exist")
    try:
        return file.read_text(encoding="utf-8")
    except UnicodeDecodeError:
        raise UsageError(f"{what} {file} is not UTF-8 text") from None
    except OSError as err:
        raise UsageError(f"{what} {file} cannot be read ({err.strerror})") from None
