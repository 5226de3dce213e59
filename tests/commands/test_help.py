"""`kvlab <command> --help` is where a new user starts: each subcommand says what it does, shows how to call it
and documents every option with its default, and the examples it shows run as written."""

from __future__ import annotations

import argparse
import shlex

import pytest

from kvlab.cli import build_parser, main


def _commands(parser: argparse.ArgumentParser, prefix: str = "kvlab"):
    """(command line, parser) for every subcommand at any depth, e.g. ("kvlab models prepare", ...)."""
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for name, sub in action.choices.items():
                yield f"{prefix} {name}", sub
                yield from _commands(sub, f"{prefix} {name}")


COMMANDS = dict(_commands(build_parser()))


def test_every_command_is_listed():
    assert {"kvlab run", "kvlab size", "kvlab bench", "kvlab explore", "kvlab models", "kvlab models prepare"} <= set(
        COMMANDS
    )


@pytest.mark.parametrize("command", sorted(COMMANDS))
def test_help_has_summary_example_and_option_help(command):
    parser = COMMANDS[command]
    assert parser.description and parser.description.endswith("."), f"{command}: no one-line description"
    assert parser.epilog and parser.epilog.startswith("example"), f"{command}: no example"
    assert all(line.strip().startswith(command) for line in parser.epilog.splitlines()[1:]), parser.epilog
    undocumented = [a.dest for a in parser._actions if not a.help and not isinstance(a, argparse._SubParsersAction)]
    assert not undocumented, f"{command}: options without help: {undocumented}"


def test_defaults_are_shown_once():
    text = " ".join(COMMANDS["kvlab bench"].format_help().split())  # argparse wraps lines
    assert "(default: 128)" in text and "(default: 3)" in text
    assert "(default: None)" not in text
    size = " ".join(COMMANDS["kvlab size"].format_help().split())
    assert "(default: 0)" in size  # --axis: a falsy default is still a default
    assert size.count("(default: float32 for kvlab") == 1


@pytest.mark.parametrize("example", [e.strip() for e in COMMANDS["kvlab size"].epilog.splitlines()[1:]])
def test_size_examples_run_as_written(example, capsys):
    """`kvlab size` needs no model or torch, so its examples run here exactly as `--help` prints them."""
    assert main(shlex.split(example)[1:]) == 0
    assert capsys.readouterr().out.strip()
