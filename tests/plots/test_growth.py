import pytest
from matplotlib.figure import Figure

import kvlab
from kvlab.i18n import set_language
from kvlab.plots import growth
from kvlab.plots._figure import NumberFormatter


def test_total_bytes_follow_the_trace(traces):
    trace = traces["dynamic"]
    totals = growth.total_bytes(trace)
    assert [b for _, b in totals] == trace.bytes_by_step()
    tokens = [t for t, _ in totals]
    assert tokens == list(range(6, 6 + len(tokens)))  # prompt of 6, then one token per step


def test_sliding_layers_stop_at_the_window_full_layers_keep_growing(traces):
    kinds = growth.bytes_by_layer_kind(traces["sliding"])
    assert set(kinds) == {"sliding", "full"}
    full = [b for _, b in kinds["full"]]
    sliding = [b for _, b in kinds["sliding"][1:]]  # after the prefill the window is in force
    assert all(b2 > b1 for b1, b2 in zip(full, full[1:]))
    assert len(set(sliding)) == 1


def test_cross_attention_is_its_own_kind(traces):
    kinds = growth.bytes_by_layer_kind(traces["bart"])
    assert "cross" in kinds
    assert len({b for _, b in kinds["cross"]}) == 1  # fixed at the source length


def test_plot_growth_draws_one_line_per_kind_plus_total_and_formula(traces):
    fig = growth.plot_growth(traces["sliding"], formula_bytes_per_token=1000)
    assert isinstance(fig, Figure)
    labels = [line.get_label() for line in fig.axes[0].lines]
    assert labels[0] == "cache: total"
    assert any("sliding" in label for label in labels) and any("full" in label for label in labels)
    assert labels[-1].startswith("formula")


def test_plot_growth_compares_several_traces(traces):
    fig = growth.plot_growth({"a": traces["dynamic"], "b": traces["static"]})
    assert [line.get_label() for line in fig.axes[0].lines] == ["a", "b"]


def test_expected_curves_are_drawn_dotted(traces):
    fig = growth.plot_growth(traces["dynamic"], expected={"total": [(0, 0), (10, 5000)]})
    dotted = [line for line in fig.axes[0].lines if line.get_linestyle() == ":"]
    assert [line.get_label() for line in dotted] == ["formula: total"]


def test_a_linear_attention_model_counts_tokens_from_the_prompt(tiny, prompt_ids):
    import kvlab

    trace = kvlab.run(tiny("tiny-mamba"), None, prompt_ids(10), "dynamic", max_new_tokens=4).trace
    totals = growth.total_bytes(trace)
    assert [t for t, _ in totals] == [10, 11, 12, 13]
    assert len({b for _, b in totals}) == 1  # the state does not grow
    assert set(growth.bytes_by_layer_kind(trace)) == {"linear"}


def test_lines_take_the_palette_and_the_legend_sits_outside_the_axes(traces):
    from kvlab.plots.palette import ALLOCATED, LAYER_KIND_COLORS, series

    ax = growth.plot_growth(traces["sliding"], expected={"sliding": [(0, 0), (10, 5000)]}).axes[0]
    colors = {line.get_label(): line.get_color() for line in ax.lines}
    assert colors["cache: total"] == ALLOCATED
    assert colors[next(label for label in colors if label.endswith("sliding layers"))] == LAYER_KIND_COLORS["sliding"]
    assert colors["formula: sliding"] == LAYER_KIND_COLORS["sliding"]  # the formula in its measured line's colour
    assert ax.get_legend().get_bbox_to_anchor().x0 > ax.get_window_extent().x1 - 1  # right of the axes
    several = growth.plot_growth({"a": traces["dynamic"], "b": traces["static"]}).axes[0]
    assert [line.get_color() for line in several.lines] == [series(0), series(1)]


def test_zoom_draws_the_total_at_the_scale_of_the_measured_tokens(traces):
    trace = traces["sliding"]
    fig = growth.plot_growth(trace, expected={"total": [(0, 0), (100, 10**6)]}, zoom=True)
    ax = fig.axes[0]
    (inset,) = ax.child_axes
    totals = growth.total_bytes(trace)
    assert list(inset.lines[0].get_xdata()) == [t for t, _ in totals]
    low, high = inset.get_ylim()
    assert inset.get_title() == "total (KiB), zoomed on the measured tokens"  # its own unit: a tiny model's KiB
    measured = [b / 2**10 for _, b in totals]
    assert low <= min(measured) and max(measured) <= high
    assert high - low < ax.get_ylim()[1] - ax.get_ylim()[0]  # a closer look than the main axes
    assert not growth.plot_growth(trace).axes[0].child_axes  # no inset unless asked


def test_an_encoder_decoder_counts_decoder_tokens_on_the_x_axis(traces):
    assert growth.plot_growth(traces["bart"]).axes[0].get_xlabel() == "decoder tokens seen (start token + generated)"
    assert growth.plot_growth(traces["dynamic"]).axes[0].get_xlabel() == "tokens seen (prompt + generated)"


def test_cross_attention_takes_a_colour_no_layer_kind_uses(traces):
    from kvlab.plots.palette import LAYER_KIND_COLORS

    ax = growth.plot_growth(traces["bart"]).axes[0]
    cross = next(line for line in ax.lines if "cross-attention" in line.get_label())
    assert cross.get_color() not in LAYER_KIND_COLORS.values()


def test_portuguese_legends_name_the_layer_kinds_in_portuguese(traces):
    set_language("pt-BR")
    try:
        ax = growth.plot_growth(traces["sliding"], expected={"sliding": [(0, 0), (10, 5000)]}).axes[0]
        bart = growth.plot_growth(traces["bart"]).axes[0]
    finally:
        set_language(None)
    labels = [line.get_label() for line in ax.lines]
    assert any(label.endswith("camadas (deslizantes)") for label in labels)  # agrees with "camadas"
    assert any(label.endswith("camadas (completas)") for label in labels)
    assert "fórmula: deslizante" in labels
    assert not any("sliding" in label or "full" in label for label in labels)
    assert any("autoatenção (completa)" in line.get_label() for line in bart.lines)


def test_the_zoom_inset_writes_its_ticks_as_the_reader_does(traces):
    fig = growth.plot_growth(traces["sliding"], expected={"total": [(0, 0), (100, 10**6)]}, zoom=True)
    (inset,) = fig.axes[0].child_axes
    assert isinstance(inset.xaxis.get_major_formatter(), NumberFormatter)
    assert isinstance(inset.yaxis.get_major_formatter(), NumberFormatter)


def test_bytes_by_layer_kind_by_tokens_or_by_step_holds_the_same_bytes(tiny, prompt_ids):
    trace = kvlab.run(tiny("tiny-gemma3"), None, prompt_ids(12), cache="dynamic", max_new_tokens=6).trace
    by_tokens, by_step = growth.bytes_by_layer_kind(trace), growth.bytes_by_layer_kind(trace, x="step")
    assert {kind: [b for _x, b in points] for kind, points in by_tokens.items()} == {
        kind: [b for _x, b in points] for kind, points in by_step.items()
    }
    assert [x for x, _b in by_step["full"]] == list(range(6))
    assert [x for x, _b in by_tokens["full"]] == list(range(12, 18))
    with pytest.raises(ValueError, match="x must be 'tokens' or 'step'"):
        growth.bytes_by_layer_kind(trace, x="seconds")


def test_bytes_are_drawn_in_the_binary_unit_their_largest_reaches(traces):
    trace = traces["dynamic"]  # a tiny model: thousands of bytes, not a sliver of a MiB (ticks 0.00-0.05)
    ax = growth.plot_growth(trace).axes[0]
    assert ax.get_ylabel() == "cache bytes (KiB)"
    totals = growth.total_bytes(trace)
    assert list(ax.lines[0].get_ydata()) == [b / 2**10 for _, b in totals]
    assert max(totals)[1] / 2**10 > 1 and ax.get_ylim()[1] > 1  # ticks of whole KiB, readable
    big = growth.plot_growth(trace, expected={"total": [(0, 0), (100, 5 * 2**20)]}).axes[0]
    assert big.get_ylabel() == "cache bytes (MiB)"  # the unit of the largest line drawn, a formula's too
    assert list(big.lines[0].get_ydata()) == [b / 2**20 for _, b in totals]
