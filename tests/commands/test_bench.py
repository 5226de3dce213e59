"""`kvlab bench` on the command line: bad sizes refused before a model loads, a saved result rendered again."""

import errno
import json
import os
from pathlib import Path

import pytest

from kvlab.cli import main


def _saved_result(tmp_path, rows: list[dict]):
    """A bench result as `kvlab bench --json --output` writes it, with `rows` and a small fixed meta."""
    meta = {
        "model": "m",
        "dtype": "float32",
        "device": "cpu",
        "prompt_tokens": 8,
        "new_tokens": 4,
        "repeats": 1,
        "threads": 1,
        "quality_windows": 1,
        "torch": "t",
        "transformers": "x",
        "tokens_in_cache": 11,
    }
    saved = tmp_path / "r.json"
    saved.write_text(
        json.dumps({"meta": meta, "rows": rows, "roofline": {"bandwidth_bytes_per_s": 1e9, "weight_bytes": 10}})
    )
    return saved


def test_bench_refuses_bad_sizes_before_loading_a_model(capsys):
    assert main(["bench", "--model", "smollm2", "--new-tokens", "1"]) == 2
    assert "new_tokens" in capsys.readouterr().err


def test_bench_only_must_match_a_configuration(capsys):
    assert main(["bench", "--model", "smollm2", "--only", "nothing-like-this"]) == 2
    assert "matches no configuration" in capsys.readouterr().err


def test_bench_renders_a_saved_result_without_measuring(tmp_path):
    rows = [
        {
            "label": "dynamic",
            "cache": "dynamic",
            "options": {},
            "status": "measured",
            "peak_cache_bytes": 1024,
            "ratio_vs_dynamic": 1.0,
            "perplexity_delta_pct": 0.0,
            "greedy_agreement": 1.0,
            "greedy_identical_prefix": 4,
        },
        {
            "label": "quantized x",
            "cache": "quantized",
            "options": {},
            "status": "unsupported",
            "unsupported": "transformers: no sliding layers",
        },
    ]
    saved = _saved_result(tmp_path, rows)
    md = tmp_path / "r.md"
    assert main(["bench", "--from-json", str(saved), "--markdown", str(md), "--plots", str(tmp_path)]) == 0
    text = md.read_text()
    assert "4/4 identical" in text and "unsupported: transformers: no sliding layers" in text
    assert (tmp_path / "frontier_m.png").stat().st_size > 0
    bad = tmp_path / "bad.json"
    bad.write_text("{}")
    assert main(["bench", "--from-json", str(bad)]) == 2


def test_json_prints_and_output_writes_for_bench(tmp_path, capsys):
    rows = [
        {
            "label": "dynamic",
            "cache": "dynamic",
            "options": {},
            "status": "measured",
            "peak_cache_bytes": 1024,
            "ratio_vs_dynamic": 1.0,
            "perplexity_delta_pct": 0.0,
            "greedy_agreement": 1.0,
            "greedy_identical_prefix": 4,
        }
    ]
    saved = _saved_result(tmp_path, rows)
    assert main(["bench", "--from-json", str(saved), "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["rows"] == rows
    assert main(["bench", "--from-json", str(saved), "--output", str(tmp_path / "table.md")]) == 0
    assert capsys.readouterr().out == "" and "| dynamic" in (tmp_path / "table.md").read_text()


def test_a_full_disk_keeps_the_earlier_markdown_and_plot_and_names_the_file(tmp_path, capsys, monkeypatch):
    rows = [{"label": "dynamic", "cache": "dynamic", "options": {}, "status": "measured", "peak_cache_bytes": 1024}]
    saved, md = _saved_result(tmp_path, rows), tmp_path / "table.md"
    plots = tmp_path / "plots"
    assert main(["bench", "--from-json", str(saved), "--markdown", str(md), "--plots", str(plots)]) == 0
    png = plots / "frontier_m.png"
    earlier_md, earlier_png = md.read_bytes(), png.read_bytes()
    assert earlier_png[:8] == b"\x89PNG\r\n\x1a\n"
    capsys.readouterr()

    def no_space(fd):
        raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))

    monkeypatch.setattr(os, "fsync", no_space)
    for option, value, named in (("--markdown", md, md), ("--plots", plots, png)):
        assert main(["bench", "--from-json", str(saved), option, str(value)]) == 1
        err = capsys.readouterr().err
        assert err == (
            f"kvlab bench: error: cannot write {named}: No space left on device; the file that was there is unchanged\n"
        )
    monkeypatch.undo()
    assert md.read_bytes() == earlier_md and png.read_bytes() == earlier_png
    assert sorted(p.name for p in plots.iterdir()) == ["frontier_m.png"]  # no temporary file left


def test_an_unwritable_markdown_or_output_is_refused_before_a_model_loads(tmp_path, capsys, monkeypatch):
    import kvlab.models

    def never(*args, **kwargs):
        raise AssertionError("the model was loaded before the output paths were checked")

    monkeypatch.setattr(kvlab.models, "load", never)
    missing = tmp_path / "missing" / "table.md"
    assert main(["bench", "--model", "smollm2", "--markdown", str(missing)]) == 1
    assert f"cannot write {missing}: the directory {missing.parent} does not exist" in capsys.readouterr().err
    assert main(["bench", "--model", "smollm2", "--output", str(tmp_path)]) == 1
    assert f"cannot write {tmp_path}: it is a directory" in capsys.readouterr().err
    (tmp_path / "file").write_text("")
    assert main(["bench", "--model", "smollm2", "--plots", str(tmp_path / "file")]) == 2
    assert "--plots" in capsys.readouterr().err


STRATEGY = str(Path(__file__).parent.parent / "strategies" / "keep_ends.py")


def test_a_strategy_is_a_row_beside_the_kinds_in_the_table_and_on_the_frontier(tiny_llama_dir, tmp_path, capsys):
    argv = ["bench", "--model", str(tiny_llama_dir), "--device", "cpu", "--only", "static", "--no-progress"]
    argv += ["--prompt-tokens", "12", "--new-tokens", "3", "--repeats", "1", "--quality-windows", "1"]
    argv += ["--cache", f"{STRATEGY}:KeepEnds", "--json", "--output", str(tmp_path / "r.json")]
    assert main([*argv, "--plots", str(tmp_path)]) == 0
    rows = {row["label"]: row for row in json.loads((tmp_path / "r.json").read_text())["rows"]}
    assert list(rows) == ["dynamic", "static", "offloaded_static", "KeepEnds"]  # --only: dynamic always runs
    mine, dynamic = rows["KeepEnds"], rows["dynamic"]
    assert mine["status"] == "measured" and mine["cache"] == f"{STRATEGY}:KeepEnds"
    layers = 3  # tiny-llama's, each holding 6 tokens of 2 KV heads x 16 dims, keys and values, float32 at the peak
    assert mine["final_cache_bytes"] == layers * 6 * 2 * 2 * 16 * 4 < dynamic["final_cache_bytes"]
    assert mine["perplexity"] is not None and mine["ratio_vs_dynamic"] < 1
    assert (tmp_path / "frontier_tiny-llama.png").stat().st_size > 0
    assert main(["bench", "--from-json", str(tmp_path / "r.json")]) == 0
    assert "| KeepEnds" in capsys.readouterr().out


def test_a_strategy_that_cannot_be_loaded_is_refused_before_a_model_loads(capsys, monkeypatch):
    import kvlab.models

    monkeypatch.setattr(kvlab.models, "load", lambda *a, **k: pytest.fail("the model was loaded"))
    assert main(["bench", "--model", "smollm2", "--cache", f"{STRATEGY}:Missing"]) == 2
    err = capsys.readouterr().err
    assert "keep_ends.py has no class 'Missing'" in err and err.count("\n") == 1
    with pytest.raises(SystemExit):
        main(["bench", "--model", "smollm2", "--cache", "static"])
    assert "--cache takes a strategy, FILE.py:ClassName" in capsys.readouterr().err
