"""`kvlab.model_facts`: one reading of a config's cache facts, which the option checks, the formula and the size
calculator share, and which a caller reads once and passes down (configs only: no weights, no forward)."""

from __future__ import annotations

import pytest
import transformers

from kvlab import _compat
from kvlab.caches import options
from kvlab.measure import formula
from kvlab.model_facts import model_facts, position_limit
from kvlab.models.tiny import tiny_config
from kvlab.request import Request
from kvlab.size import from_config, request_rules


@pytest.fixture
def reads(monkeypatch):
    """How many times transformers is asked for a config's layer types (the costly part of a reading)."""
    calls = []
    layer_types = _compat.layer_types
    monkeypatch.setattr(_compat, "layer_types", lambda config: calls.append(config) or layer_types(config))
    return calls


def test_the_facts_of_each_kind_of_model():
    llama = model_facts(tiny_config("tiny-llama"))
    assert (llama.layer_kinds, llama.kv_heads, llama.head_dim, llama.attention_heads) == (("full",) * 3, 2, 16, 4)
    assert (llama.sliding_window, llama.max_positions, llama.is_encoder_decoder) == (None, 512, False)
    gemma = model_facts(tiny_config("tiny-gemma3"))
    assert gemma.layer_kinds == ("sliding", "sliding", "full") * 2 and gemma.sliding_window == 8
    assert model_facts(tiny_config("tiny-llama4")).chunk_size == 8  # chunked layers: their window
    bart = model_facts(tiny_config("tiny-bart"))
    assert bart.is_encoder_decoder and (bart.max_positions, bart.encoder_max_positions) == (256, 256)
    mamba = model_facts(tiny_config("tiny-mamba"))
    assert mamba.layer_kinds == ("linear",) * 3 and mamba.linear_state == (128, 4, 8)  # channels, conv, state
    assert (mamba.kv_heads, mamba.max_positions) == (0, None)  # no attention heads, no position table


def test_positions_come_from_the_decoder_or_the_encoder():
    assert position_limit(tiny_config("tiny-llama")) == 512 and position_limit(tiny_config("tiny-mamba")) is None
    whisper = transformers.WhisperConfig(max_target_positions=448, max_source_positions=1500)
    assert position_limit(whisper) == 448  # Whisper's decoder says max_target_positions


def test_layer_flags_are_transformers_layout_read_on_first_use(reads):
    facts = model_facts(tiny_config("tiny-gemma3"))
    assert "layer_flags" not in vars(facts)  # only the offloading rule asks for them
    assert facts.layer_flags == tuple(_compat.layer_flags(facts.config))
    assert facts.layer_flags[:3] == ((True, True), (True, True), (True, False))  # (attention, sliding)


def test_an_encoder_only_model_says_why_it_keeps_no_cache():
    bert = model_facts(transformers.BertConfig(num_hidden_layers=2, architectures=["BertForMaskedLM"]))
    assert bert.encoder_only == "model_type 'bert'; is_decoder false; architectures BertForMaskedLM"
    assert model_facts(transformers.BertConfig(is_decoder=True)).encoder_only == ""
    assert [model_facts(tiny_config(name)).encoder_only for name in ("tiny-llama", "tiny-bart")] == ["", ""]


def test_facts_read_once_are_passed_down_and_never_read_again(reads):
    config = tiny_config("tiny-gemma3")
    facts = model_facts(config)
    assert len(reads) == 1 and model_facts(facts) is facts
    options.check_options("static", {"max_cache_len": 64}, facts, request=Request(prompt_tokens=20, new_tokens=8))
    options.check_options(
        "offloaded_static", {"max_cache_len": 64}, facts, request=Request(prompt_tokens=20, new_tokens=8)
    )
    request_rules.check_request(Request("static", {"max_cache_len": 64}, facts, prompt_tokens=20, new_tokens=8))
    formula.expected_curves(facts, 100)
    assert from_config(facts).layer_kinds == facts.layer_kinds
    assert len(reads) == 1


def test_each_check_reads_a_config_once(reads):
    config = tiny_config("tiny-gemma3")
    formula.expected_curves(config, 100)  # 201 points from one reading
    assert len(reads) == 1
    options.check_options("dynamic", {}, config, request=Request(prompt_tokens=20, new_tokens=8))  # in the request
    assert len(reads) == 2
    options.check_options(
        "offloaded_static", {"max_cache_len": 64}, config, request=Request(prompt_tokens=20, new_tokens=8)
    )
    request_rules.check_request(Request("static", {"max_cache_len": 64}, config, prompt_tokens=20, new_tokens=8))
    assert len(reads) == 4


def test_facts_compare_by_value_not_by_the_config_they_came_from():
    assert model_facts(tiny_config("tiny-llama")) == model_facts(tiny_config("tiny-llama"))
    with pytest.raises(AttributeError):
        model_facts(tiny_config("tiny-llama")).kv_heads = 3  # frozen: what was read stays what was read
