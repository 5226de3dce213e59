import json

import pytest

from kvlab.cli import main


def test_size_prints_every_kind_for_the_guide_example(capsys):
    assert main(["size", "--model", "llama-2-7b", "--tokens", "4096", "--dtype", "float16"]) == 0
    out = capsys.readouterr().out
    assert "2,147,483,648" in out  # 32 layers x 2 x 32 heads x 128 x 2 bytes x 4096 tokens
    for label in ("dynamic", "static", "offloaded", "quantized quanto int2", "quantized hqq int8", "quantized fp8"):
        assert label in out


def test_size_json_from_a_config_file(tmp_path, capsys):
    path = tmp_path / "config.json"
    path.write_text(
        json.dumps(
            {
                "model_type": "gemma3_text",
                "num_hidden_layers": 6,
                "num_attention_heads": 2,
                "num_key_value_heads": 1,
                "head_dim": 8,
                "hidden_size": 16,
                "sliding_window": 4,
                "sliding_window_pattern": 3,
            }
        )
    )
    assert main(["size", "--config", str(path), "--tokens", "10", "--prefill", "5", "--json"]) == 0
    data = json.loads(capsys.readouterr().out)
    dynamic = next(r for r in data["rows"] if r["cache_kind"] == "dynamic")
    assert dynamic["by_layer_kind"]["sliding"] == 4 * 2 * 4 * 8 * 4  # 4 layers x K,V x window 4 x head_dim 8 x fp32
    assert all("unsupported" in r for r in data["rows"] if r["cache_kind"] == "quantized")


@pytest.mark.parametrize(
    "argv,message",
    [
        (["size", "--model", "nope", "--tokens", "3"], "known:"),
        (["size", "--model", "smollm2"], "--tokens"),
        (["size", "--model", "smollm2", "--tokens", "3", "--batch", "0"], "--batch"),
        (["size", "--config", "/no/such/config.json", "--tokens", "3"], "does not exist"),
    ],
)
def test_bad_input_exits_2_with_one_line(argv, message, capsys):
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert message in err and err.count("\n") == 1


def test_bench_refuses_bad_sizes_before_loading_a_model(capsys):
    assert main(["bench", "--model", "smollm2", "--new-tokens", "1"]) == 2
    assert "new_tokens" in capsys.readouterr().err


def test_bench_only_must_match_a_configuration(capsys):
    assert main(["bench", "--model", "smollm2", "--only", "nothing-like-this"]) == 2
    assert "matches no configuration" in capsys.readouterr().err


def test_bench_renders_a_saved_result_without_measuring(tmp_path):
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
    saved = tmp_path / "r.json"
    saved.write_text(
        json.dumps({"meta": meta, "rows": rows, "roofline": {"bandwidth_bytes_per_s": 1e9, "weight_bytes": 10}})
    )
    md = tmp_path / "r.md"
    assert main(["bench", "--from-json", str(saved), "--markdown", str(md), "--plots", str(tmp_path)]) == 0
    text = md.read_text()
    assert "4/4 identical" in text and "unsupported: transformers: no sliding layers" in text
    assert (tmp_path / "frontier_m.png").stat().st_size > 0
    bad = tmp_path / "bad.json"
    bad.write_text("{}")
    assert main(["bench", "--from-json", str(bad)]) == 2


def test_size_paged_layout_for_a_length_distribution(capsys):
    assert (
        main(
            [
                "size",
                "--model",
                "llama-2-7b",
                "--tokens",
                "4096",
                "--dtype",
                "float16",
                "--page-size",
                "256",
                "--lengths",
                "100,900,4096",
                "--json",
            ]
        )
        == 0
    )
    (paged,) = [row for row in json.loads(capsys.readouterr().out)["rows"] if row["cache_kind"] == "paged"]
    assert paged["blocks"] == 1 + 4 + 16 and paged["slots_live"] == 5096 and paged["slots_stored"] == 21 * 256
    with pytest.raises(SystemExit) as refused:  # argparse: one line, status 2
        main(["size", "--model", "llama-2-7b", "--tokens", "8", "--lengths", "3,0"])
    assert refused.value.code == 2 and "every length must be at least 1" in capsys.readouterr().err
