from __future__ import annotations

import pytest

from kvlab.cache_kinds import PAST_RECORDING_KINDS
from kvlab.caches import CACHE_KINDS, KIND_OPTIONS
from kvlab.explorer.controls import CUSTOM, OPTION_NAMES, Controls, options_for


def shown(controls: Controls) -> set[str]:
    return {n for n in OPTION_NAMES if getattr(controls, n).layout.display != "none"}


@pytest.mark.parametrize("kind", CACHE_KINDS)
def test_choosing_a_kind_shows_exactly_its_options(kind):
    controls = Controls(prompt_presets={"p": "text"})
    controls.set(cache=kind)
    expected = set(KIND_OPTIONS[kind]) | ({"past_recording"} if kind in PAST_RECORDING_KINDS else set())
    assert shown(controls) == expected
    assert set(controls.options()) == set(KIND_OPTIONS[kind])


def test_fp8_hides_the_group_wise_options_and_switching_back_shows_them():
    controls = Controls(prompt_presets={"p": "text"}).set(cache="quantized", backend="fp8")
    assert shown(controls) == {"backend"}
    assert controls.options() == {"backend": "fp8"}
    controls.set(backend="hqq")
    assert shown(controls) == {"backend", "nbits", "axis_key", "axis_value", "q_group_size", "residual_length"}


def test_request_carries_only_the_options_of_the_kind():
    controls = Controls(prompt_presets={"p": "text"}).set(max_cache_len=48, past_recording=True, cache="static")
    request = controls.request()
    assert request.options == {"max_cache_len": 48}
    assert request.past_recording is False  # static caches cannot record the past: the box is hidden and ignored
    request = controls.set(cache="dynamic").request()
    assert request.options == {} and request.past_recording is True


def test_options_for_matches_the_cache_factory():
    for kind in CACHE_KINDS:
        assert set(options_for(kind)) - {"past_recording"} == set(KIND_OPTIONS[kind])


def test_presets_fill_the_prompt_and_typing_switches_to_custom():
    controls = Controls(prompt_presets={"a": "first text", "b": "second text"})
    assert controls.prompt.value == "first text"
    controls.set(preset="b")
    assert controls.prompt.value == "second text"
    controls.set(prompt="my own words")
    assert controls.preset.value == CUSTOM and controls.request().prompt == "my own words"


def test_unknown_control_names_the_valid_ones():
    with pytest.raises(ValueError, match="no control named 'colour'.*cache"):
        Controls(prompt_presets={"p": "t"}).set(colour="red")


def test_a_loaded_model_is_offered_first_and_keeps_its_dtype():
    controls = Controls(has_loaded_model=True, prompt_presets={"p": "t"})
    assert controls.model.value == "loaded" and controls.dtype.disabled
    controls.set(model="tiny-llama")
    assert not controls.dtype.disabled


def test_a_chat_model_gets_its_chat_template_by_default_and_a_model_without_one_cannot():
    controls = Controls(prompt_presets={"p": "t"})  # smollm2, the first model: an instruct model
    assert controls.request().chat and not controls.chat.disabled
    controls.set(chat=False)
    assert not controls.request().chat  # the box turns it off
    for model in ("gemma3", "tiny-llama"):
        controls.set(model=model)
        assert not controls.request().chat and controls.chat.disabled
    controls.set(model="smollm2")
    assert controls.request().chat
