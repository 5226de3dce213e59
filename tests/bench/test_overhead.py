"""`kvlab bench --overhead` on tiny-llama: the same JSON shape as data/bench/overhead_smollm2.json, never timings."""

import json
from pathlib import Path

from kvlab.bench import BenchSettings
from kvlab.bench.overhead import overhead_lines, run_overhead

SAVED = Path(__file__).parents[2] / "data" / "bench" / "overhead_smollm2.json"


def test_plain_instrumented_and_watched_agree_and_are_timed(tiny, byte_tokenizer):
    settings = BenchSettings(model="tiny-llama", prompt_tokens=12, new_tokens=4, repeats=2)
    result = run_overhead(tiny("tiny-llama"), byte_tokenizer, settings)
    assert list(result) == list(json.loads(SAVED.read_text()))
    assert result["same_tokens"] is True and result["repeats"] == 2 and result["device"] == "cpu"
    assert result["time_ratio"] == result["plain_decode_tokens_per_s"] / result["instrumented_decode_tokens_per_s"]
    assert result["watched_time_ratio"] > 0
    for name in ("instrumented", "watched"):  # each ratio with the timing instrument's interval and verdict
        low, high = result[f"{name}_interval"]
        assert 0 < low <= high
        assert result[f"{name}_verdict"].startswith("too noisy to tell: ")  # two repeats say nothing
        assert f"{name} / plain" in result[f"{name}_verdict"]
    lines = overhead_lines(result)
    assert lines[0].startswith("instrumented / plain decode time: ") and lines[-1] == "same tokens: True"
    assert "95% interval" in lines[0] and lines[0].endswith(result["instrumented_verdict"])


def test_each_repeat_rotates_the_order_of_the_routes():
    from kvlab.bench.overhead import rotated

    order = rotated(("a", "b", "c"), 4)
    assert order == ["a", "b", "c", "b", "c", "a", "c", "a", "b", "a", "b", "c"]
    assert [order[3 * r] for r in range(3)] == ["a", "b", "c"]  # each route leads once in every three repeats
