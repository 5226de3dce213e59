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


def test_an_encoder_only_config_is_refused_with_the_reason(tmp_path, capsys):
    path = tmp_path / "config.json"
    bert = {"architectures": ["BertForMaskedLM"], "model_type": "bert", "max_position_embeddings": 512}
    path.write_text(json.dumps(bert))
    assert main(["size", "--config", str(path), "--tokens", "4096"]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "is an encoder-only model (model_type 'bert'" in err and "no KV cache" in err


def test_sizes_past_the_models_positions_carry_a_note(capsys):
    note = "10,000 tokens is past smollm2's 8,192 positions (max_position_embeddings)"
    assert main(["size", "--model", "smollm2", "--tokens", "10000"]) == 0
    assert f"note: {note}" in capsys.readouterr().out
    assert main(["size", "--model", "smollm2", "--tokens", "10000", "--json"]) == 0
    data = json.loads(capsys.readouterr().out)
    assert (
        len(data["notes"]) == 1 and data["notes"][0].startswith(note) and data["architecture"]["max_positions"] == 8192
    )
    assert main(["size", "--model", "smollm2", "--tokens", "8192", "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["notes"] == []
    assert main(["size", "--model", "smollm2", "--tokens", "16", "--page-size", "16", "--lengths", "8,9000"]) == 0
    assert "9,000 tokens is past smollm2's 8,192 positions" in capsys.readouterr().out
    assert main(["size", "--model", "bart-large", "--tokens", "16", "--source-tokens", "2000", "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["notes"] == [
        "2,000 source tokens is past bart-large's 1,024 encoder positions"
    ]


@pytest.mark.parametrize(
    ("model", "dtype", "per_token"), [("smollm2", "float32", 46080), ("llama-2-7b", "float16", None)]
)
def test_size_defaults_to_the_dtype_the_model_runs_in(model, dtype, per_token, capsys):
    """A bundled model is sized as kvlab loads it (float32, not its published bfloat16); others as published."""
    assert main(["size", "--model", model, "--tokens", "10", "--json"]) == 0
    data = json.loads(capsys.readouterr().out)
    assert data["dtype"] == dtype
    if per_token is not None:
        dynamic = next(row for row in data["rows"] if row["cache_kind"] == "dynamic")
        assert dynamic["bytes"] == 10 * per_token  # 30 layers x 2 x 3 heads x 64 x 4 bytes per token


def test_size_answers_a_flagship_by_name_without_a_meta_run(capsys):
    assert main(["size", "--model", "deepseek-v3", "--tokens", "1000", "--dtype", "bfloat16", "--json"]) == 0
    data = json.loads(capsys.readouterr().out)
    dynamic = next(r for r in data["rows"] if r["cache_kind"] == "dynamic")
    assert dynamic["bytes"] == 1000 * 61 * (512 + 64) * 2  # MLA: latent + rope key per layer, bfloat16
    assert data["architecture"]["source"] == "deepseek-ai/DeepSeek-V3"


def test_size_of_any_model_type_is_measured_on_meta(capsys):
    import transformers

    from kvlab.size.meta import meta_cache_bytes

    assert main(["size", "--model-type", "gpt_bigcode", "--tokens", "10", "--json"]) == 0
    data = json.loads(capsys.readouterr().out)
    dynamic = next(r for r in data["rows"] if r["cache_kind"] == "dynamic")
    config = transformers.AutoConfig.for_model("gpt_bigcode")  # multi-query: one K and V head per layer
    assert (
        dynamic["bytes"]
        == meta_cache_bytes(config, 10).bytes
        == 10 * config.n_layer * 2 * config.n_embd // config.n_head * 4
    )
    assert main(["size", "--model-type", "no_such_type", "--tokens", "3"]) == 2
    assert "no model_type 'no_such_type'" in capsys.readouterr().err
