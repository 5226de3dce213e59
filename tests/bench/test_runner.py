"""run_bench end to end on tiny-llama (seconds): structure and relations, never timings."""

import math

import pytest
import torch

import kvlab
from kvlab.bench import BenchConfig, BenchSettings, run_bench
from kvlab.size import cache_size, from_config


def _rows(result):
    return {r["label"]: r for r in result["rows"]}


def test_every_configuration_gets_a_row_named_by_kind_and_options(tiny_bench):
    settings, result = tiny_bench
    rows = _rows(result)
    assert list(rows) == [
        "none",
        "dynamic",
        "dynamic (plain transformers)",
        "static",
        "quantized quanto int4",
        "offloaded (plain transformers)",
        "static + torch.compile",
    ]
    assert rows["static"]["cache"] == "static" and rows["static"]["options"] == {"max_cache_len": 24}
    assert rows["dynamic (plain transformers)"]["instrumented"] is False


def test_dynamic_is_its_own_reference(tiny_bench):
    _, result = tiny_bench
    dynamic = _rows(result)["dynamic"]
    assert dynamic["ratio_vs_dynamic"] == 1.0 and dynamic["greedy_agreement"] == 1.0
    # against itself, one tensor both sides: every KL term is exp(p) * (p - p), the perplexity ratio x / x
    assert dynamic["logit_kl_vs_dynamic"] == 0.0 and dynamic["perplexity_delta_pct"] == 0.0


def test_cache_bytes_agree_with_the_size_calculator(tiny_bench):
    settings, result = tiny_bench
    arch = from_config(kvlab.tiny_model("tiny-llama").config)
    held = settings.prompt_tokens + settings.new_tokens - 1
    rows = _rows(result)
    assert (
        rows["static"]["peak_cache_bytes"]
        == cache_size(arch, "static", held, prefill=settings.prompt_tokens, max_cache_len=24).peak_bytes
    )
    quanto = cache_size(
        arch, "quantized", held, prefill=settings.prompt_tokens, backend="quanto", nbits=4, q_group_size=16
    )
    assert rows["quantized quanto int4"]["peak_cache_bytes"] == quanto.peak_bytes
    assert rows["quantized quanto int4"]["ratio_vs_dynamic"] < 1


def test_quality_of_the_uncached_reference_matches_dynamic(tiny_bench):
    """No cache and a DynamicCache differ only in float32 summation order: each of the layers sums hidden-size
    terms, so a log-probability (|log p| < 2 log vocab on the near-uniform random model) moves by at most
    atol, and a KL between distributions that close is at most (e^2atol - 1)^2 (tests/measure/float_bounds.py)."""
    _, result = tiny_bench
    none = _rows(result)["none"]
    config = kvlab.tiny_model("tiny-llama").config
    scale = 2 * math.log(config.vocab_size)
    atol = config.num_hidden_layers * config.hidden_size * torch.finfo(torch.float32).eps * scale
    assert 0 <= none["logit_kl_vs_dynamic"] <= math.expm1(2 * atol) ** 2 and none["peak_cache_bytes"] == 0


@pytest.mark.skipif(torch.cuda.is_available(), reason="transformers offloads for real on a GPU")
def test_plain_offloaded_on_cpu_is_unsupported_with_transformers_reason(tiny_bench):
    _, result = tiny_bench
    row = _rows(result)["offloaded (plain transformers)"]
    assert row["status"] == "unsupported" and "CUDA" in row["unsupported"]


def test_compile_row_is_not_run_without_the_flag(tiny_bench):
    _, result = tiny_bench
    assert _rows(result)["static + torch.compile"]["status"] == "not run"


def test_overhead_and_roofline_are_reported(tiny_bench):
    _, result = tiny_bench
    assert result["overhead"]["time_ratio"] > 0
    assert result["roofline"]["bandwidth_bytes_per_s"] > 0 and result["roofline"]["weight_bytes"] > 0
    assert 0 < _rows(result)["dynamic"]["roofline_fraction"]


def test_quantized_on_a_sliding_model_carries_transformers_reason(byte_tokenizer):
    model = kvlab.tiny_model("tiny-gemma3")
    configs = [
        BenchConfig("dynamic", "dynamic"),
        BenchConfig("quantized hqq int4", "quantized", {"backend": "hqq", "nbits": 4}),
    ]
    settings = BenchSettings(model="tiny-gemma3", prompt_tokens=6, new_tokens=2, repeats=1, quality_windows=1)
    row = _rows(run_bench(model, byte_tokenizer, settings, configs, progress=False))["quantized hqq int4"]
    assert row["status"] == "unsupported"
    assert "only supported for models with only full attention layers" in row["unsupported"]


def test_bad_settings_are_refused():
    with pytest.raises(ValueError, match="new_tokens"):
        BenchSettings(new_tokens=1).check()


def test_quanto_is_built_before_any_timing_with_one_notice(byte_tokenizer, unbuilt_quanto, capsys, monkeypatch):
    """A fresh machine, faked by the probe: the build (and its one line) comes before the first timed run."""
    from kvlab.measure import timing

    events = unbuilt_quanto  # the probe records the extension it found unbuilt; the clocks follow

    class Clock(timing.DecodeClock):
        def __init__(self):
            events.append("clock")
            super().__init__()

    monkeypatch.setattr(timing, "DecodeClock", Clock)
    configs = [BenchConfig("dynamic", "dynamic"), BenchConfig("quanto", "quantized", {"backend": "quanto"})]
    settings = BenchSettings(model="tiny-llama", prompt_tokens=8, new_tokens=2, repeats=1, quality_windows=1)
    rows = _rows(run_bench(kvlab.tiny_model("tiny-llama"), byte_tokenizer, settings, configs, progress=False))
    assert rows["quanto"]["status"] == "measured" and events == ["quanto_cpp", "clock", "clock"]
    assert capsys.readouterr().err.count("building optimum-quanto's C++ extension once") == 1


def test_the_bar_is_redrawn_while_a_configuration_runs():
    """The ticker redraws with the current piece of work and its elapsed seconds until it is stopped."""
    import threading

    from kvlab.bench.runner import Ticker

    drawn, twice = [], threading.Event()

    class Bar:
        disable = False

        def set_postfix_str(self, text):
            drawn.append(text)
            if len(drawn) >= 3:
                twice.set()

    with Ticker(Bar(), interval=0.01) as ticker:
        ticker.start("quantized quanto int2")  # draws at once, then the thread redraws
        assert twice.wait(timeout=60)
    assert not ticker._thread.is_alive() and drawn[0] == "quantized quanto int2 (0 s)"
    assert set(drawn) <= {f"quantized quanto int2 ({s} s)" for s in range(61)}


def test_the_eta_follows_the_completed_work_between_updates():
    """tqdm's smoothing=0: at each redraw the rate is work done / time elapsed, so a long configuration moves the
    ETA (a fake clock: 1 of 10 pieces done after 10 s leaves 90 s; still 1 done after 20 s leaves 180 s)."""
    import io

    from kvlab.bench.runner import _progress

    bar = _progress(10, True, "bench")
    bar.fp, now = io.StringIO(), [0.0]
    bar._time, bar.start_t = (lambda: now[0]), 0.0
    now[0] = 10.0
    bar.update(1)
    etas = []
    for t in (10.0, 20.0):
        now[0] = t
        etas.append(bar.format_meter(**bar.format_dict).split("<")[1][:5])
    bar.close()
    assert etas == ["01:30", "03:00"]
