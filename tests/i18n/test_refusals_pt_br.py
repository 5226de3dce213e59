"""kvlab's refusals in the reader's language: a refused crop, a chat or prefix mismatch, an unknown model, a trace
that does not parse and a cache a model cannot take say why in Portuguese once `set_language("pt-BR")`, and in
English again once it is undone.

Each refusal is raised by the code a notebook or the Cache Explorer calls (a cache's `crop`, `kvlab.load`,
`Trace.load`, the explorer's upload, `make_cache` and the option check every run makes), on a cache filled by hand,
a config without weights or no model at all: the file takes about a second.
"""

from __future__ import annotations

import pytest
import torch

import kvlab
from kvlab import make_cache
from kvlab.caches import CacheCropError
from kvlab.explorer import prompts
from kvlab.explorer.export import read_trace
from kvlab.explorer.models import ByteTokenizer
from kvlab.i18n import current_language, set_language
from kvlab.measure.chat import first_mismatch
from kvlab.measure.prefix import PrefixMismatchError, check_token_prefix
from kvlab.models import UnknownModelError
from kvlab.recording.trace import Trace, TraceFormatError


@pytest.fixture
def sliding_cache(sliding_config):
    """A DynamicCache of one sliding layer (window 4) and one full layer, 5 tokens in each: its window is full."""
    cache = make_cache("dynamic", sliding_config)
    states = torch.arange(5, dtype=torch.float32).view(1, 1, -1, 1)  # (batch, kv_heads, 5 tokens, head_dim)
    for layer in (0, 1):
        cache.update(states, states, layer)
    return cache


def refusal(error: type[Exception], call) -> str:
    with pytest.raises(error) as raised:
        call()
    return str(raised.value)


def in_both_languages(error: type[Exception], call) -> tuple[str, str]:
    """(Portuguese, English) message of the refusal `call` raises; the language in use before is back afterwards,
    so the English one is read in the language every other test runs in."""
    before = current_language()
    set_language("pt-BR")
    try:
        portuguese = refusal(error, call)
    finally:
        set_language(None)
    assert current_language() == before == "en"
    return portuguese, refusal(error, call)


def test_a_refused_crop_says_why_in_portuguese(sliding_cache):
    portuguese, english = in_both_languages(CacheCropError, lambda: sliding_cache.crop(-1))
    assert portuguese.startswith("crop(-1) recusado: a camada deslizante 0 já viu 5 tokens e guarda só os últimos 3")
    assert "chame cache.activate_past_recording() antes de gerar" in portuguese
    assert english.startswith("crop(-1) refused: sliding layer 0 has seen 5 tokens and keeps only the last 3")
    portuguese, english = in_both_languages(CacheCropError, lambda: sliding_cache.crop(-9))
    assert portuguese == (
        "crop(-9) passa do início: o cache guarda 5 tokens, então as contagens válidas vão de crop(0) a crop(-5)."
    )
    assert english.startswith("crop(-9) goes past the start: the cache holds 5 tokens")
    assert not sliding_cache.trace.crops  # refused in either language before any layer changed


def test_a_chat_turn_that_no_longer_matches_its_cache_says_why_in_portuguese():
    def refuse(cached, prompt):
        def raise_it():  # what ChatSession raises (CacheMismatchError) or warns, as the reused cache meets the prompt
            raise ValueError(first_mismatch(cached, prompt).describe(ByteTokenizer()))

        return raise_it

    portuguese, english = in_both_languages(ValueError, refuse([5, 6, 7], [5, 6, 9, 10]))
    assert portuguese.startswith(
        "o cache guarda 3 tokens, mas o novo prompt difere deles na posição 2: no cache '‹7›' (id 7), "
        "no prompt '‹9›' (id 9). generate() pré-preencheria só prompt[3:]"
    )
    assert portuguese.endswith("Recorte o cache até o prefixo comum (cache.crop(-1)) ou comece um cache novo.")
    assert english.startswith("the cache holds 3 tokens, but the new prompt differs from them at position 2")
    portuguese, english = in_both_languages(ValueError, refuse([5, 6, 7], [5, 6]))
    assert "no cache '‹7›' (id 7), no prompt nada (o prompt termina aqui)." in portuguese
    assert "cached '‹7›' (id 7), prompt nothing (the prompt ends here)." in english


def test_a_prefix_that_is_not_a_token_prefix_says_why_in_portuguese():
    portuguese, english = in_both_languages(PrefixMismatchError, lambda: check_token_prefix([5, 6], [5, 7, 8]))
    assert portuguese.startswith(
        "o prefixo em cache não é um prefixo em tokens do prompt: na posição 1 o prefixo tem id 6, mas "
        "prefixo+pergunta vira id 7 na tokenização."
    )
    assert english.startswith("the cached prefix is not a token prefix of the prompt: at position 1")
    portuguese, _english = in_both_languages(PrefixMismatchError, lambda: check_token_prefix([5, 6], [5, 6]))
    assert portuguese.startswith("o prompt (2 tokens) não acrescenta nada depois do prefixo em cache (2 tokens)")


def test_an_unknown_model_is_refused_in_portuguese():
    portuguese, english = in_both_languages(UnknownModelError, lambda: kvlab.load("no-such-model"))
    assert portuguese.startswith("modelo desconhecido 'no-such-model'; modelos incluídos: smollm2, gemma3 (ou um")
    assert english.startswith("unknown model 'no-such-model'; bundled models: smollm2, gemma3 (or a")


def test_a_trace_that_does_not_parse_is_refused_in_portuguese(tmp_path):
    broken = tmp_path / "broken.json"
    broken.write_text("{not json", encoding="utf-8")
    portuguese, english = in_both_languages(TraceFormatError, lambda: Trace.load(broken))
    assert portuguese.startswith(f"{broken} não é um JSON válido (")  # json's own reason stays Python's English
    assert portuguese.endswith("; um trace do kvlab é o JSON gravado por Trace.save().")
    assert english.startswith(f"{broken} does not parse as JSON (")
    uploaded, _english = in_both_languages(TraceFormatError, lambda: read_trace("upload.json", b"\xff\xfe"))
    assert uploaded.startswith("upload.json não é texto (não é UTF-8)")
    assert uploaded.endswith("pelo botão Salvar trace do Explorador de Cache.")
    wrong_field = {"kvlab_trace": 4, "events": [{"type": "crop", "step": "x"}]}
    portuguese, _english = in_both_languages(TraceFormatError, lambda: Trace.from_dict(wrong_field, "t.json"))
    assert portuguese.startswith("t.json: o evento 0 (crop) não tem role, n, past_recording")
    wrong_type = {"kvlab_trace": 4, "events": [{"type": "crop", "step": "x", "role": "self", "n": -1}]}
    wrong_type["events"][0] |= {"past_recording": False, "lengths_before": [1], "lengths_after": [0]}
    portuguese, english = in_both_languages(TraceFormatError, lambda: Trace.from_dict(wrong_type, "t.json"))
    assert portuguese == "t.json: o evento 0 (crop) tem step='x'; precisa ser um inteiro."
    assert english == "t.json: event 0 (crop) has step='x'; it must be an integer."


def test_shipped_presets_have_portuguese_titles_and_a_learner_s_own_keeps_its_name():
    assert [prompts.title(name) for name in ("story_opening", "live")] == ["story_opening", "live"]
    set_language("pt-BR")
    try:
        assert [prompts.title(name) for name in ("story_opening", "live")] == ["início de uma história", "live"]
        assert {prompts.title(name) for name in prompts.presets()}.isdisjoint(prompts.presets())
    finally:
        set_language(None)


def test_a_request_past_the_positions_or_the_memory_says_why_in_portuguese(monkeypatch):
    from kvlab.models.tiny import tiny_config
    from kvlab.request import Request
    from kvlab.size import request_rules

    config = tiny_config("tiny-llama")  # 512 positions, 768 B of keys and values per token
    portuguese, english = in_both_languages(
        request_rules.RequestError,
        lambda: request_rules.check_request(Request("dynamic", {}, config, prompt_tokens=500, new_tokens=1_400)),
    )
    assert portuguese.startswith("o prompt (500 tokens) mais 1.400 tokens novos precisam de 1.899 posições")
    assert english.startswith("the prompt (500 tokens) plus 1,400 new tokens need 1,899 positions")
    monkeypatch.setattr(request_rules, "available_memory", lambda device="cpu": 1 << 20)
    portuguese, english = in_both_languages(
        request_rules.RequestError,
        lambda: request_rules.check_request(Request("offloaded", {}, config, prompt_tokens=6, new_tokens=2_000)),
    )
    assert portuguese.startswith("um cache descarregado de 2.005 tokens precisa de ")
    assert "e a memória da CPU tem 1,00 MiB (1.048.576 B) disponíveis" in portuguese
    assert english.startswith("an offloaded cache of 2,005 tokens needs ")


def test_a_quantized_cache_on_a_sliding_model_and_a_static_cache_too_short_are_refused_in_portuguese():
    from kvlab.caches.options import CacheOptionError, check_options
    from kvlab.models.tiny import tiny_config
    from kvlab.request import Request

    config = tiny_config("tiny-gemma3")  # 6 layers: 4 sliding (window 8), 2 full attention
    portuguese, english = in_both_languages(CacheOptionError, lambda: make_cache("quantized", config))
    assert portuguese.startswith(
        "um cache quantizado precisa que todas as camadas sejam de atenção completa, e este modelo não cumpre isso: "
        "as suas 6 camadas são 4 deslizantes, 2 completas (janela deslizante de 8). O QuantizedCache do transformers "
        "não suporta camadas deslizantes"
    )
    assert english.startswith(
        "a quantized cache needs every layer to be full attention, and this model is not: its 6 layers are "
        "4 sliding, 2 full (sliding window 8). transformers' QuantizedCache does not support sliding"
    )
    # what kvlab.run checks before any model work: 10 prompt tokens in a static cache of 4 slots
    portuguese, english = in_both_languages(
        CacheOptionError,
        lambda: check_options("static", {"max_cache_len": 4}, config, request=Request(prompt_tokens=10, new_tokens=5)),
    )
    assert portuguese == (
        "max_cache_len=4 é menor que o comprimento do prompt (10 tokens); use pelo menos 14 para guardar o prompt e "
        "os tokens novos realimentados (prompt + novos - 1, como generate o dimensiona)."
    )
    assert english == (
        "max_cache_len=4 is below the prompt length (10 tokens); use at least 14 to hold the prompt and the new tokens "
        "fed back (prompt + new - 1, as generate sizes it)."
    )
