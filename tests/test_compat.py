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
