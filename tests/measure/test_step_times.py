import pytest
import transformers

import kvlab
from kvlab.measure import step_times
from kvlab.measure.timing import Timing

QUANTO = {"backend": "quanto", "nbits": 4, "q_group_size": 16}


def quantized(residual_length: int, **options) -> dict:
    return {
        "cache_implementation": "quantized",
        "cache_config": QUANTO | options | {"residual_length": residual_length},
    }


def test_every_configuration_gets_one_time_per_decode_step_per_repeat(tiny, prompt_ids):
    model = tiny("tiny-llama")
    built = []

    def fresh_cache():
        cache = transformers.QuantizedCache(backend="quanto", config=model.config, nbits=4, q_group_size=16)
        built.append(cache)
        return cache

    configs = {"dynamic": {}, "quanto r4": quantized(4), "QuantizedCache": fresh_cache}
    result = step_times.decode_step_times(model, prompt_ids(6), configs, new_tokens=7, repeats=3, warmup=1)
    assert list(result) == list(configs)
    for label, times in result.items():
        assert times.label == label
        assert times.step_numbers == [1, 2, 3, 4, 5, 6]  # 7 new tokens: the prefill, then 6 fed back
        assert len(times.runs) == 3 and all(len(r) == 6 for r in times.runs)
        assert [len(t.times) for t in times.steps] == [3] * 6
        assert [t.times for t in times.steps] == [[r[i] for r in times.runs] for i in range(6)]
        assert all(isinstance(t, Timing) for t in (times.decode, times.call))
        assert len(times.decode.times) == len(times.call.times) == 3
        assert times.decode.times == pytest.approx([sum(r) / 6 for r in times.runs])
        assert len(times.per_step()) == 6
        assert all(q1 <= m <= q3 for m, q1, q3 in times.per_step())
    # a fresh cache for the warm-up and every repeat, each holding exactly one run's tokens
    assert len(built) == 4 and len({id(c) for c in built}) == 4
    assert [int(c.get_seq_length()) for c in built] == [6 + 6] * 4


def test_a_cache_object_is_refused_because_repeats_need_a_fresh_one(tiny, prompt_ids):
    model = tiny("tiny-llama")
    cache = transformers.DynamicCache(config=model.config)
    with pytest.raises(ValueError, match="fresh"):
        step_times.decode_step_times(model, prompt_ids(6), {"reused": {"past_key_values": cache}}, new_tokens=3)
    with pytest.raises(ValueError, match="new_tokens"):
        step_times.decode_step_times(model, prompt_ids(6), {"dynamic": {}}, new_tokens=1)
    with pytest.raises(ValueError, match="input_ids"):
        step_times.decode_step_times(model, prompt_ids(6)[0], {"dynamic": {}}, new_tokens=3)


def test_flush_schedule_is_every_residual_length_th_decode_step():
    assert step_times.flush_schedule(8, 25) == [8, 16, 24]
    assert step_times.flush_schedule(8, 24) == [8, 16]  # token 24 is never fed back: step 24 does not run
    assert step_times.flush_schedule(4, 10) == [4, 8]
    assert step_times.flush_schedule(1, 4) == [1, 2, 3]
    assert step_times.flush_schedule(128, 24) == []
    with pytest.raises(ValueError):
        step_times.flush_schedule(0, 4)


@pytest.mark.parametrize("residual_length", [3, 4])
@pytest.mark.parametrize("backend", ["quanto", "hqq"])
def test_traced_flushes_follow_transformers_schedule(tiny, prompt_ids, backend, residual_length):
    model, ids = tiny("tiny-llama"), prompt_ids(6)
    options = {"backend": backend} | ({"axis_key": 1, "axis_value": 1} if backend == "hqq" else {})
    with kvlab.watch(model) as watch:
        model.generate(
            ids, do_sample=False, max_new_tokens=10, min_new_tokens=10, **quantized(residual_length, **options)
        )
    schedule = step_times.flush_schedule(residual_length, 10)
    assert step_times.flush_steps(watch.trace) == schedule
    assert step_times.quantize_steps(watch.trace) == [0, *schedule]  # the prefill packs the prompt at once
    work = watch.trace.work_by_step()
    layers = model.config.num_hidden_layers
    per_token = model.config.num_key_value_heads * model.config.head_dim * 2 * layers  # keys and values
    for row in work:
        flushed = row["step"] in schedule
        assert row["quantize_calls"] == (2 * layers if flushed or row["step"] == 0 else 0)
        if flushed:  # the whole cache is packed again: prompt + the tokens fed so far
            assert row["quantized_elements"] == (6 + row["step"]) * per_token
        if row["step"] > 0:
            assert row["dequantize_calls"] == 2 * layers


def test_fp8_quantizes_every_step_and_never_flushes(tiny, prompt_ids):
    model = tiny("tiny-llama")
    with kvlab.watch(model) as watch:
        model.generate(
            prompt_ids(6),
            do_sample=False,
            max_new_tokens=5,
            min_new_tokens=5,
            cache_implementation="quantized",
            cache_config={"backend": "fp8"},
        )
    assert step_times.flush_steps(watch.trace) == []
    assert step_times.quantize_steps(watch.trace) == [0, 1, 2, 3, 4]


def test_split_steps_pools_the_chosen_steps_against_the_others():
    runs = [[0.01, 0.03, 0.01, 0.03], [0.02, 0.04, 0.02, 0.04]]
    steps = [Timing(f"s{i}", [r[i] for r in runs]) for i in range(4)]
    result = step_times.StepTimes("quanto", runs, steps, [1, 2, 3, 4], Timing("quanto", [0.02, 0.03]), Timing("q", [1]))
    others, flushes = step_times.split_steps(result, [2, 4])
    assert flushes.label == "quanto flush steps" and others.label == "quanto other steps"
    assert sorted(flushes.times) == [0.03, 0.03, 0.04, 0.04]
    assert sorted(others.times) == [0.01, 0.01, 0.02, 0.02]
    with pytest.raises(ValueError, match="not timed"):
        step_times.split_steps(result, [0])
    with pytest.raises(ValueError, match="both sides"):
        step_times.split_steps(result, [])
