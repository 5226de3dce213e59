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
    path.write_text(json.dumps({"model_type": "gemma3_text", "num_hidden_layers": 6, "num_attention_heads": 2,
                                "num_key_value_heads": 1, "head_dim": 8, "hidden_size": 16, "sliding_window": 4,
                                "sliding_window_pattern": 3}))  # fmt: skip
    assert main(["size", "--config", str(path), "--tokens", "10", "--prefill", "5", "--json"]) == 0
    data = json.loads(capsys.readouterr().out)
    dynamic = next(r for r in data["rows"] if r["kind"] == "dynamic")
    assert dynamic["by_layer_kind"]["sliding"] == 4 * 2 * 4 * 8 * 4  # 4 layers x K,V x window 4 x head_dim 8 x fp32
    assert all("unsupported" in r for r in data["rows"] if r["kind"] == "quantized")


@pytest.mark.parametrize("argv,message", [
    (["size", "--model", "nope", "--tokens", "3"], "known:"),
    (["size", "--model", "smollm2"], "--tokens"),
    (["size", "--model", "smollm2", "--tokens", "3", "--batch", "0"], "--batch"),
    (["size", "--config", "/no/such/config.json", "--tokens", "3"], "does not exist"),
])  # fmt: skip
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
