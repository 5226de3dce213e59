import json

from kvlab.bench.report import COLUMNS, markdown_table, to_json


def test_markdown_has_one_aligned_row_per_configuration(tiny_bench):
    _, result = tiny_bench
    table = markdown_table(result)
    rows = [line for line in table.splitlines() if line.startswith("| ") and "---" not in line]
    assert len(rows) == 1 + len(result["rows"])  # header + one per configuration
    widths = {line.replace("\\|", "").count("|") for line in rows}
    assert widths == {len(COLUMNS) + 1}
    assert "unsupported: " in table and "instrumentation overhead" in table and "roofline" in table


def test_json_is_strict_and_keeps_rows(tiny_bench):
    _, result = tiny_bench
    data = json.loads(to_json(result))  # NaN would not parse as strict JSON
    assert [r["label"] for r in data["rows"]] == [r["label"] for r in result["rows"]]
    assert all("cache" in r and "options" in r for r in data["rows"])


def test_the_batching_row_is_reported_with_its_direction(tiny_bench):
    _, result = tiny_bench
    row = {
        "label": "continuous batching (4 requests x 16 tokens, page_size 16)",
        "batched_seconds": 8.0,
        "sequential_seconds": 4.0,
        "speedup": 0.5,
        "repeats": 3,
        "same_tokens": True,
    }
    table = markdown_table({**result, "batching": row})
    assert "`generate_batch` 8.00 s against 4.00 s for one `generate` per request, 2.00× slower" in table
    assert "batching" not in markdown_table(result)


def test_every_timed_row_carries_its_spread_and_a_ratio_interval_against_dynamic(tiny_bench):
    _, result = tiny_bench
    timed = [r for r in result["rows"] if r.get("decode_tokens_per_s")]
    assert timed
    for row in timed:
        spread, versus = row["decode_seconds_per_token"], row["decode_time_vs_dynamic"]
        assert spread["q1_s"] <= spread["median_s"] <= spread["q3_s"]
        assert versus["low"] <= versus["ratio"] <= versus["high"] and versus["verdict"]
    dynamic = next(r for r in timed if r["label"] == "dynamic")
    assert dynamic["decode_time_vs_dynamic"]["ratio"] == 1.0 and not dynamic["decode_time_vs_dynamic"]["differs"]


def test_the_time_column_quotes_the_interval_and_never_calls_noise_an_effect():
    from kvlab.bench.report import _fmt

    def row(ratio, low, high, differs, noisy):
        value = {"ratio": ratio, "low": low, "high": high, "differs": differs, "too_noisy": noisy}
        return {"decode_time_vs_dynamic": value}

    assert _fmt("decode_time_vs_dynamic", row(1.62, 1.55, 1.70, True, False)) == "1.62× (1.55–1.70)"
    assert _fmt("decode_time_vs_dynamic", row(1.01, 0.97, 1.04, False, False)).endswith("no difference beyond noise")
    assert _fmt("decode_time_vs_dynamic", row(1.5, 0.8, 2.9, True, True)).endswith("too noisy to tell")
