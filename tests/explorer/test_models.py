from __future__ import annotations

import pytest
import torch

from kvlab.explorer.models import CHAT_TEMPLATES, ByteTokenizer, ModelStore, model_choices


def test_byte_tokenizer_stays_inside_the_tiny_vocabulary():
    ids = ByteTokenizer()("héllo, wörld ~\x7f", return_tensors="pt").input_ids
    assert ids.shape == (1, len("héllo, wörld ~\x7f".encode()))
    assert int(ids.min()) >= 3 and int(ids.max()) < 128
    assert ByteTokenizer().decode(torch.tensor([5, 17])) == "‹5›‹17›"


def test_store_loads_a_model_once(tiny):
    store = ModelStore()
    assert not store.is_ready("tiny-llama", "float32")
    first = store.get("tiny-llama")
    assert store.is_ready("tiny-llama", "float32") and store.get("tiny-llama") is first
    assert first[0].kvlab_name == "tiny-llama" and isinstance(first[1], ByteTokenizer)
    assert ModelStore().get("tiny-llama") is first  # shared by every explorer of the process


def test_store_keeps_an_already_loaded_model_with_its_dtype(tiny):
    model = tiny("tiny-llama")
    store = ModelStore(model, None)
    assert store.has_loaded and model_choices(True)[0] == "loaded"
    got, tokenizer = store.get("loaded", "bfloat16")  # the dtype control does not apply to it
    assert got is model and isinstance(tokenizer, ByteTokenizer)


def test_store_names_what_is_valid():
    with pytest.raises(ValueError, match="unknown model 'gpt5'; valid: smollm2, gemma3, tiny-llama"):
        ModelStore().get("gpt5")
    with pytest.raises(ValueError, match="no model was passed to explore"):
        ModelStore().get("loaded")
    with pytest.raises(ValueError, match="valid: float32, bfloat16"):
        ModelStore().get("tiny-llama", "float16")


def test_the_chat_templates_the_explorer_knows_are_the_bundled_models_facts(tiny):
    from kvlab.models import BUNDLED

    assert CHAT_TEMPLATES == {name: spec.facts["chat_template"] for name, spec in BUNDLED.items()}
    store = ModelStore(tiny("tiny-llama"), None)
    assert not store.has_chat_template("loaded") and not store.has_chat_template("tiny-gemma3")
    assert store.has_chat_template("smollm2")
