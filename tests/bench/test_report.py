import json

from kvlab.bench.report import COLUMNS, markdown_table, write_json


def test_markdown_has_one_aligned_row_per_configuration(tiny_bench):
    _, result = tiny_bench
    table = markdown_table(result)
    rows = [line for line in table.splitlines() if line.startswith("| ") and "---" not in line]
    assert len(rows) == 1 + len(result["rows"])  # header + one per configuration
    widths = {line.replace("\\|", "").count("|") for line in rows}
    assert widths == {len(COLUMNS) + 1}
    assert "unsupported: " in table and "instrumentation overhead" in table and "roofline" in table


def test_json_is_strict_and_keeps_rows(tiny_bench, tmp_path):
    _, result = tiny_bench
    path = write_json(result, tmp_path / "bench.json")
    data = json.loads(path.read_text())  # NaN would not parse as strict JSON
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
