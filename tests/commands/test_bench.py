"""`kvlab bench` on the command line: bad sizes refused before a model loads, a saved result rendered again."""

import json

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
