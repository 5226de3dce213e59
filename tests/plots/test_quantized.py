from kvlab.plots import quantized


def test_split_shows_residual_filling_then_flushing(traces):
    rows = quantized.split_by_step(traces["quantized"])
    assert rows[0]["residual_bytes"] == 0 and rows[0]["packed_bytes"] > 0  # the prefill is quantized at once
    residual = [r["residual_tokens"] for r in rows]
    flush = residual.index(0, 1)  # first step after the prefill whose residual is empty again
    assert residual[1:flush] == sorted(residual[1:flush]) and residual[flush - 1] > 0
    assert rows[flush]["packed_bytes"] > rows[flush - 1]["packed_bytes"]
    assert rows[-1]["tokens"] == 40 + len(rows) - 1


def test_plot_split_and_configs(traces):
    fig = quantized.plot_split(traces["quantized"])
    assert len(fig.axes[0].collections) == 2
    fig = quantized.plot_configs({"q": traces["quantized"], "q2": traces["quantized"]}, reference_bytes=10_000)
    assert len(fig.axes[0].patches) == 4 and fig.axes[0].lines


def test_frontier_marks_references_as_external():
    points = [{"label": "hqq 4-bit", "memory_ratio": 0.4, "quality": 0.98}]
    fig = quantized.plot_frontier(points)
    texts = [t.get_text() for t in fig.axes[0].texts]
    assert "hqq 4-bit" in texts
    assert sum(t.startswith("external R") for t in texts) == len(quantized.PUBLISHED_REFERENCES)
    footnote = fig.texts[0].get_text()
    assert all(f"R{i} (external, not measured here)" in footnote for i in range(1, 4))
