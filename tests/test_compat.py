"""What kvlab assumes about the installed transformers, checked in one place (see kvlab/_compat.py)."""

import inspect

import torch
import transformers
from packaging.specifiers import SpecifierSet

from kvlab import _compat


def test_installed_transformers_is_the_tested_range():
    assert transformers.__version__ in SpecifierSet(_compat.SUPPORTED_TRANSFORMERS)


def test_the_attributes_kvlab_reads_exist():
    assert "cache" in inspect.signature(transformers.LlamaForCausalLM.forward).parameters
    layer = _compat.StaticSlidingWindowLayer(max_cache_len=8, sliding_window=4)
    assert _compat.static_sliding_length(layer) == 0
    quantized = _compat.QuantoQuantizedLayer()
    assert _compat.quantized_payload(quantized) == (None, None)
    assert set(inspect.signature(_compat.QuantizedLayer.__init__).parameters) >= set(_compat.QUANTIZED_DEFAULTS)
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
