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
    lines = overhead_lines(result)
    assert lines[0].startswith("instrumented / plain decode time: ") and lines[-1] == "same tokens: True"
