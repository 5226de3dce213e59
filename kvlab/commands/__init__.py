"""Subcommands of the `kvlab` command line, one module each, and what they share: `--json`, `--output FILE`
(written atomically), `UsageError`. Nothing here imports torch: `kvlab --help` stays light.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from kvlab.atomic import check_writable, write_text
from kvlab.errors import KvlabUserError
from kvlab.i18n import _


class UsageError(KvlabUserError):
    """Raised by a subcommand for bad input: printed as one line, exit status 2."""


class HelpFormatter(argparse.RawDescriptionHelpFormatter):
    """Keeps an example's line breaks and shows an option's default where it has one and its help does not say it
    (argparse's ArgumentDefaultsHelpFormatter would print "(default: None)" for every unset option)."""

    def _get_help_string(self, action):
        text = action.help or ""
        unset = action.default is None or action.default is False or action.default == argparse.SUPPRESS
        shown = not unset and "default" not in text
        return f"{text} (default: %(default)s)" if shown and action.option_strings else text


def add_command(subparsers, name: str, summary: str, *examples: str) -> argparse.ArgumentParser:
    """A subcommand whose `--help` opens with what it does and ends with examples of how to call it."""
    lines = "\n".join(f"  {example}" for example in examples)
    return subparsers.add_parser(
        name,
        help=summary,
        description=summary[0].upper() + summary[1:] + ".",
        epilog=f"example{'s' if len(examples) > 1 else ''}:\n{lines}",
        formatter_class=HelpFormatter,
    )


def add_model_options(parser, **model) -> None:
    """`--model` (its `required` or `default` in `model`), `--dtype` and `--device` of `kvlab run` and `kvlab bench`."""
    parser.add_argument("--model", help="smollm2, gemma3, or a local model directory", **model)
    parser.add_argument("--dtype", default="float32", choices=("float32", "bfloat16"), help="weights and cache dtype")
    parser.add_argument("--device", help="cpu, cuda, cuda:1, mps... (default: cuda when available, else cpu)")


def add_output_options(parser, what: str = "the result") -> None:
    parser.add_argument("--json", action="store_true", help=f"print {what} as one JSON object")
    parser.add_argument("--output", metavar="FILE", help="write what would be printed (JSON or report) to FILE")


class Output:
    """Collects a command's report and writes it to stdout or to `--output FILE` (also on the error path: nothing)."""

    def __init__(self, args):
        self.path = getattr(args, "output", None)
        self.lines: list[str] = []
        if self.path is not None:  # refused before the command does its work, not after
            check_writable(self.path)

    def print(self, text: str = "") -> None:
        if self.path is None:
            print(text)
        else:
            self.lines.append(text)

    def close(self) -> None:
        if self.path is not None:
            write_text(self.path, "\n".join(self.lines) + "\n")
            print(f"wrote {self.path}", file=sys.stderr)


def read_text_argument(path: str) -> str:
    """A prompt file's text, or stdin's for `-`; a missing or unreadable file is a UsageError."""
    what = _("prompt file")
    if path == "-":
        try:
            return sys.stdin.read()
        except UnicodeDecodeError:
            raise UsageError(_("{what} on stdin is not UTF-8 text").format(what=what)) from None
    file = Path(path)
    if not file.is_file():
        raise UsageError(_("{what} {file} does not exist").format(what=what, file=file))
    try:
        return file.read_text(encoding="utf-8")
    except UnicodeDecodeError:
        raise UsageError(_("{what} {file} is not UTF-8 text").format(what=what, file=file)) from None
    except OSError as err:
        raise UsageError(
            _("{what} {file} cannot be read ({reason})").format(what=what, file=file, reason=err.strerror)
        ) from None
