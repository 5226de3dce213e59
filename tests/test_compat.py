"""What kvlab assumes about the installed transformers, checked in one place (see kvlab/_compat.py). The same
file runs against the oldest supported release too (.ci/oldest-transformers), so nothing here assumes 5.25."""

import inspect
import re
from pathlib import Path

import pytest
import torch
import transformers
from packaging.specifiers import SpecifierSet

from kvlab import _compat
from kvlab.cli import main
from kvlab.errors import KvlabEnvironmentError, one_line
from kvlab.quantized_backends import BACKENDS, GROUP_WISE_DEFAULTS


def test_installed_transformers_is_the_tested_range():
    assert transformers.__version__ in SpecifierSet(_compat.SUPPORTED_TRANSFORMERS)


def test_the_attributes_kvlab_reads_exist():
    assert _compat.CACHE_KWARG in inspect.signature(transformers.LlamaForCausalLM.forward).parameters
    layer = _compat.StaticSlidingWindowLayer(max_cache_len=8, sliding_window=4)
    assert _compat.static_sliding_length(layer) == 0
    quantized = _compat.QuantoQuantizedLayer()
    assert _compat.quantized_payload(quantized) == (None, None)
    assert set(inspect.signature(_compat.QuantizedLayer.__init__).parameters) >= set(GROUP_WISE_DEFAULTS)
    assert inspect.signature(_compat.QuantizedLayer.__init__).parameters["nbits"].default == 4


def test_crop_takes_negative_counts_upstream():
    layer = _compat.DynamicLayer()
    layer.update(torch.zeros(1, 1, 3, 2), torch.zeros(1, 1, 3, 2))
    layer.crop(-1)
    assert layer.get_seq_length() == 2


def test_upstream_offloading_still_needs_cuda_on_update():
    """If this starts passing, transformers fixed CPU offloading and `offloaded_update` can go."""
    config = transformers.LlamaConfig(
        num_hidden_layers=2,
        num_key_value_heads=1,
        num_attention_heads=1,
        hidden_size=8,
        intermediate_size=8,
        vocab_size=16,
        head_dim=8,
    )
    cache = transformers.DynamicCache(config=config, offloading=True)
    try:
        cache.update(torch.zeros(1, 1, 2, 8), torch.zeros(1, 1, 2, 8), 0)
    except (AssertionError, RuntimeError) as err:
        assert "CUDA" in str(err)
    else:
        assert torch.cuda.is_available()


def test_what_the_option_and_crop_rules_read_from_layers_and_configs():
    """The readers `kvlab.caches.options` and the caches' crop guards use (`kvlab.caches.crop_rules`)."""
    config = transformers.Gemma3TextConfig(
        num_hidden_layers=2,
        sliding_window=4,
        num_key_value_heads=1,
        num_attention_heads=1,
        head_dim=2,
        hidden_size=8,
        intermediate_size=8,
        vocab_size=16,
        layer_types=["sliding_attention", "full_attention"],
    )
    assert _compat.layer_flags(config) == [(True, True), (True, False)]
    dynamic = transformers.DynamicCache(config=config)
    static = transformers.StaticCache(config=config, max_cache_len=8)
    for cache in (dynamic, static):
        for layer in (0, 1):
            cache.update(torch.zeros(1, 1, 5, 2), torch.zeros(1, 1, 5, 2), layer)
    assert _compat.dynamic_sliding_state(dynamic.layers[0]) == (5, 4, False)
    assert _compat.dynamic_sliding_state(dynamic.layers[1]) is None
    assert _compat.static_sliding_state(static.layers[0]) == (5, 4)
    assert _compat.static_sliding_state(static.layers[1]) is None
    _compat.set_offload_only_non_sliding(static, False)
    assert static.only_non_sliding is False


def test_quantized_cache_refusal_is_transformers_own_words(sliding_config):
    """What the bench and the guide table quote: QuantizedCache refuses a sliding layer, and a backend's options,
    as it is built; a full-attention config builds with every backend."""
    refusal = _compat.quantized_cache_refusal(sliding_config)
    assert refusal is not None and "only full attention layers" in refusal and "sliding_attention" in refusal
    sliding_config.layer_types = ["full_attention", "full_attention"]
    assert [_compat.quantized_cache_refusal(sliding_config, row.name) for row in BACKENDS] == [None] * len(BACKENDS)
    assert "nbits" in (_compat.quantized_cache_refusal(sliding_config, "fp8", nbits=4) or "")  # per-tensor: no groups
    assert "int4" in (_compat.quantized_cache_refusal(sliding_config, "int4") or "")


def test_the_default_page_size_is_continuous_batchings():
    assert _compat.default_page_size() == transformers.ContinuousBatchingConfig().page_size


def test_dropping_the_quantizer_lets_a_dequantized_model_save(tmp_path):
    model = transformers.LlamaForCausalLM(
        transformers.LlamaConfig(
            num_hidden_layers=1, num_key_value_heads=1, num_attention_heads=1, hidden_size=8, intermediate_size=8
        )
    )
    model.hf_quantizer, model.config.quantization_config = object(), {"quant_method": "gguf"}
    _compat.drop_quantizer(model)
    assert model.hf_quantizer is None and not hasattr(model.config, "quantization_config")
    model.save_pretrained(tmp_path)


def test_the_oldest_release_ci_tests_is_the_floor_of_the_range():
    script = (Path(__file__).parents[1] / ".ci" / "oldest-transformers").read_text()
    oldest = re.search(r"^OLDEST=(\S+)", script, re.MULTILINE).group(1)
    floor = re.match(r">=([\d.]+),", _compat.SUPPORTED_TRANSFORMERS).group(1)
    assert _compat.transformers_release(oldest) == _compat.transformers_release(floor)
    assert oldest in SpecifierSet(_compat.SUPPORTED_TRANSFORMERS)


@pytest.mark.parametrize("name", ["tiny-llama", "tiny-mamba"])
def test_a_cache_passed_under_the_release_keyword_is_the_one_the_model_fills_and_returns(tiny, prompt_ids, name):
    """`cache_kwarg` names the keyword this release's forward takes (before 5.24, Mamba's is `cache_params`), and
    `forward_cache` / `output_cache` find the cache on the way in and out."""
    model = tiny(name)
    cache = _compat.DynamicCache(config=model.config)
    kwargs = {_compat.cache_kwarg(model): cache}
    assert _compat.forward_cache(kwargs) is cache
    with torch.no_grad():
        out = model(prompt_ids(4), use_cache=True, **kwargs)
    assert _compat.output_cache(out) is cache
    if name == "tiny-llama":
        assert cache.get_seq_length() == 4


def test_static_layers_crop_by_rewinding_their_count():
    """5.24's StaticLayer.crop, or kvlab's copy of it where the release has none: the count goes back, the next
    update overwrites the slots past it."""
    full = _compat.StaticLayer(max_cache_len=8)
    sliding = _compat.StaticSlidingWindowLayer(max_cache_len=4, sliding_window=4)
    for layer in (full, sliding):
        layer.update(torch.zeros(1, 1, 3, 2), torch.zeros(1, 1, 3, 2))  # (batch, heads, tokens, head_dim)
        _compat.crop_static_layer(layer, -2)
        assert int(layer.get_seq_length()) == 1
        layer.update(torch.ones(1, 1, 1, 2), torch.ones(1, 1, 1, 2))
        assert int(layer.get_seq_length()) == 2 and layer.keys[0, 0, 1].eq(1).all()  # slot 1 overwritten
    assert _compat.static_sliding_length(sliding) == 2


@pytest.mark.parametrize("version", ["5.21.0", "5.22.2", "5.24.0", "5.25.0", "5.25.1rc1"])
def test_releases_in_the_range_pass_the_check(version):
    _compat.check_transformers(version)


@pytest.mark.parametrize("version", ["5.20.2", "5.26.0", "6.0.0", "4.57.6"])
def test_a_release_outside_the_range_is_named_in_one_line(version):
    with pytest.raises(_compat.UnsupportedTransformersError) as err:
        _compat.check_transformers(version)
    message = one_line(err.value)
    assert message == str(err.value) and "\n" not in message
    assert message.startswith(
        f"kvlab supports transformers {_compat.SUPPORTED_TRANSFORMERS}, but {version} is installed"
    )
    assert isinstance(err.value, KvlabEnvironmentError)  # the CLI prints it in one line, status 1


def test_a_newer_release_runs_with_one_warning_where_the_user_opts_in(monkeypatch, capsys):
    """`KVLAB_UNTESTED_TRANSFORMERS=1` lets a release newer than the range run (CI's newest-release step uses it),
    said once per release; an older one is still refused, since it lacks classes kvlab instruments."""
    monkeypatch.setenv(_compat.UNTESTED_OPT_IN, "1")
    monkeypatch.setattr(_compat, "_WARNED_UNTESTED", set())
    _compat.check_transformers("5.99.0")
    _compat.check_transformers("5.99.0")
    said = [line for line in capsys.readouterr().err.splitlines() if "untested" in line]
    assert said == [
        f"kvlab: untested on transformers 5.99.0 (kvlab supports {_compat.SUPPORTED_TRANSFORMERS}): trying it, "
        "as KVLAB_UNTESTED_TRANSFORMERS=1 asks"
    ]
    with pytest.raises(_compat.UnsupportedTransformersError):
        _compat.check_transformers("5.20.2")
    monkeypatch.setenv(_compat.UNTESTED_OPT_IN, "0")
    with pytest.raises(_compat.UnsupportedTransformersError):
        _compat.check_transformers("5.99.1")


def test_kvlab_run_on_an_unsupported_release_says_so_before_the_weights_load(monkeypatch, capsys, tiny_llama_dir):
    """A fresh process on 5.20: the first transformers class kvlab asks `_compat` for raises. Forgetting the
    classes this process already looked up replays that first use."""
    import kvlab.models

    monkeypatch.setattr(_compat, "TRANSFORMERS_VERSION", "5.20.2")
    for name in [*_compat._LAZY, "cache_utils", "PAGED_CACHE_MODULE", "QUANTIZED_LAYER_BACKENDS"]:
        monkeypatch.delitem(vars(_compat), name, raising=False)
    monkeypatch.setattr(kvlab.models, "load", lambda *a, **k: pytest.fail("the weights were loaded"))
    argv = ["run", "--model", str(tiny_llama_dir), "--cache", "dynamic", "--prompt", "the cache"]
    argv += ["--max-new-tokens", "2"]
    assert main(argv) == 1
    err = capsys.readouterr().err
    assert err == (
        f"kvlab run: error: kvlab supports transformers {_compat.SUPPORTED_TRANSFORMERS}, but 5.20.2 is installed: "
        f"pip install 'transformers{_compat.SUPPORTED_TRANSFORMERS}'\n"
    )
