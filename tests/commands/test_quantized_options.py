"""kvlab.commands.quantized_options: `kvlab run`, `kvlab size` and `kvlab bench` take the same quantized options,
their help written from the backends' rows, and the tables refuse an impossible choice before any work."""

from __future__ import annotations

import argparse
import json

import pytest

from kvlab.cli import build_parser, main
from kvlab.quantized_backends import BACKENDS

OPTIONS = ["--backend", "--nbits", "--axis-key", "--axis-value", "--q-group-size", "--residual-length"]
GIVEN = ["--backend", "hqq", "--nbits", "4", "--axis-key", "1", "--axis-value", "1", "--q-group-size", "32"]
REQUIRED = {"run": ["--model", "m", "--cache", "quantized", "--max-new-tokens", "1"], "size": ["--model", "m"]}


def _parsers() -> dict[str, argparse.ArgumentParser]:
    (sub,) = [a for a in build_parser()._actions if isinstance(a, argparse._SubParsersAction)]
    return {name: sub.choices[name] for name in ("run", "size", "bench")}


def _quantized(parser: argparse.ArgumentParser) -> dict[str, argparse.Action]:
    (group,) = [g for g in parser._action_groups if g.title == "quantized cache options"]
    return {a.option_strings[0]: a for a in group._group_actions}


def test_run_size_and_bench_take_the_same_quantized_options():
    parsed = {}
    for name, parser in _parsers().items():
        assert list(_quantized(parser)) == OPTIONS, name
        args = parser.parse_args(REQUIRED.get(name, []) + GIVEN + ["--residual-length", "16"])
        parsed[name] = {a.dest: getattr(args, a.dest) for a in _quantized(parser).values()}
    assert parsed["run"] == parsed["size"] == parsed["bench"]
    assert parsed["run"] == {
        "backend": "hqq",
        "nbits": 4,
        "axis_key": 1,
        "axis_value": 1,
        "q_group_size": 32,
        "residual_length": 16,
    }


@pytest.mark.parametrize("command", ["run", "size", "bench"])
def test_the_help_names_every_rows_values(command):
    actions = _quantized(_parsers()[command])
    for row in BACKENDS:
        assert row.name in actions["--backend"].help and row.help in actions["--backend"].help
        if row.group_wise:
            assert f"{row.name} {', '.join(map(str, row.nbits))}" in actions["--nbits"].help
            assert f"{row.name} {', '.join(map(str, row.axes))}" in actions["--axis-key"].help


def _size(capsys, *argv) -> dict:
    assert main(["size", "--model", "smollm2", "--tokens", "64", "--json", *argv]) == 0
    return {r["label"]: r for r in json.loads(capsys.readouterr().out)["rows"] if r["cache_kind"] == "quantized"}


def test_size_shows_the_rows_chosen_and_keeps_its_deprecated_axis(capsys):
    hqq = _size(capsys, "--backend", "hqq", "--q-group-size", "32")
    assert list(hqq) == [f"quantized hqq int{n}" for n in next(r for r in BACKENDS if r.name == "hqq").nbits]
    assert all(row["options"]["q_group_size"] == 32 for row in hqq.values())
    assert _size(capsys, "--axis", "1") == _size(capsys, "--axis-key", "1", "--axis-value", "1")
    quanto = _size(capsys, "--axis", "1")["quantized quanto int4"]
    assert quanto["options"]["axis_key"] == quanto["options"]["axis_value"] == -1  # quanto's spelling


@pytest.mark.parametrize(
    "argv,message",
    [
        (["--backend", "fp8", "--nbits", "4"], "the fp8 backend quantizes per tensor and takes none of"),
        (["--backend", "quanto", "--nbits", "3"], "quanto nbits must be one of 2, 4; got 3"),
        (["--backend", "int4"], "unknown quantization backend 'int4'; valid: hqq, quanto, fp8"),
        (["--backend", "hqq", "--q-group-size", "7"], "q_group_size must be a multiple of 2; got 7"),
    ],
)
@pytest.mark.parametrize("command", [["size", "--tokens", "64"], ["bench"]])
def test_the_tables_refuse_an_impossible_backend_before_any_work(command, argv, message, capsys):
    assert main([*command, "--model", "smollm2", *argv]) == 2  # bench: before its model loads
    assert message in capsys.readouterr().err


def test_bench_overhead_takes_no_quantized_option(capsys):
    assert main(["bench", "--overhead", "--backend", "hqq", "--q-group-size", "32"]) == 2
    assert "it does not take --backend, --q-group-size" in capsys.readouterr().err
