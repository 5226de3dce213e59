import pytest
from matplotlib.colors import to_hex

from kvlab.measure.step_times import StepTimes, flush_steps
from kvlab.measure.timing import Timing
from kvlab.plots.palette import series
from kvlab.plots.step_times import plot_step_times


def step_times(label: str, runs: list[list[float]]) -> StepTimes:
    numbers = list(range(1, len(runs[0]) + 1))
    steps = [Timing(f"{label} step {s}", [r[i] for r in runs]) for i, s in enumerate(numbers)]
    decode = Timing(label, [sum(r) / len(r) for r in runs])
    return StepTimes(label, runs, steps, numbers, decode, Timing(label, [sum(r) for r in runs]))


def test_medians_bands_flush_marks_and_quantize_calls(traces):
    quantized = traces["quantized"]  # quanto, residual_length 8, 12 new tokens: steps 1..11, a flush at step 8
    assert flush_steps(quantized) == [8]
    fast = [0.010] * 11
    slow_at_flush = [0.020 if s == 8 else 0.012 for s in range(1, 12)]
    times = {
        "dynamic": step_times("dynamic", [fast, fast, fast]),
        "quanto": step_times("quanto", [slow_at_flush, [t + 0.002 for t in slow_at_flush], slow_at_flush]),
    }
    fig = plot_step_times(times, {"dynamic": traces["dynamic"], "quanto": quantized}, title="t")
    ax, ax_work = fig.axes[:2]
    dynamic_line, quanto_line, flush_marks = ax.lines[:3]
    assert list(dynamic_line.get_xdata()) == list(range(1, 12))
    assert list(quanto_line.get_ydata()) == pytest.approx([20.0 if s == 8 else 12.0 for s in range(1, 12)])
    assert list(flush_marks.get_xdata()) == [8] and list(flush_marks.get_ydata()) == pytest.approx([20.0])
    assert len(ax.collections) == 2  # one IQR band per configuration
    band = ax.collections[1].get_paths()[0].vertices[:, 1]
    assert band.max() == pytest.approx(21.0) and band.min() == pytest.approx(12.0)  # q3 of 20, 22, 20
    # flush steps are dotted lines in both panels
    assert [a.get_xdata()[0] for a in ax.lines if a.get_linestyle() == ":"] == [8]
    assert [a.get_xdata()[0] for a in ax_work.lines if a.get_linestyle() == ":"] == [8]
    # quantize calls: only the quantized cache has any; in the timed steps, at its flush only
    work = {row["step"]: row["quantize_calls"] for row in quantized.work_by_step()}
    heights = [p.get_height() for p in ax_work.patches]
    assert heights == [work[s] for s in range(1, 12)]
    assert [s for s, h in zip(range(1, 12), heights) if h] == [8]
    # one legend for both panels, outside them: every configuration (its line colour is its bar colour), then flushes
    assert ax.get_legend() is None
    legend = ax_work.get_legend()
    assert [t.get_text() for t in legend.get_texts()] == ["dynamic", "quanto", "flushes"]
    assert legend.get_bbox_to_anchor().x0 >= ax_work.bbox.x1
    assert to_hex(ax_work.patches[0].get_facecolor()) == quanto_line.get_color() == series(1)


def test_the_work_panel_can_show_the_numbers_quantized(traces):
    quantized = traces["quantized"]
    runs = [[0.01] * 11]
    fig = plot_step_times({"quanto": step_times("quanto", runs)}, {"quanto": quantized}, field="quantized_elements")
    work = {row["step"]: row["quantized_elements"] for row in quantized.work_by_step()}
    assert [p.get_height() for p in fig.axes[1].patches] == [work[s] for s in range(1, 12)]
    assert fig.axes[1].get_ylabel() == "numbers quantized (all layers)"


def test_the_verdicts_go_in_a_box_under_the_panels_and_a_long_label_wraps(traces):
    from kvlab.i18n import set_language

    quantized = traces["quantized"]
    runs = [[0.01] * 11]
    verdict = "quanto flush steps is 2.00x slower than quanto other steps (1.50-2.50)"
    fig = plot_step_times({"quanto": step_times("quanto", runs)}, {"quanto": quantized}, verdicts=[verdict])
    box = [t for t in fig.texts if t.get_text() == verdict]
    assert len(box) == 1 and box[0].get_bbox_patch() is not None  # drawn once, in its box
    assert box[0].get_window_extent().y1 < min(ax.get_position().y0 for ax in fig.axes) * fig.bbox.height
    set_language("pt-BR")  # "ms por passo de decodificação (mediana, IQR)" is taller than its panel: it wraps
    try:
        fig = plot_step_times({"quanto": step_times("quanto", runs)}, {"quanto": quantized})
    finally:
        set_language(None)
    fig.canvas.draw()
    label = fig.axes[0].yaxis.label
    assert label.get_window_extent().height <= fig.axes[0].get_window_extent().height
