from matplotlib.backends.backend_agg import FigureCanvasAgg

from kvlab.measure.published import PUBLISHED
from kvlab.plots import growth, quantized
from tools.figure_check import overflowing_texts


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
    assert fig.axes[0].get_legend().get_bbox_to_anchor().x0 >= fig.axes[0].bbox.x1  # the saw stays uncovered
    fig = quantized.plot_configs({"q": traces["quantized"], "q2": traces["quantized"]}, reference_bytes=10_000)
    assert len(fig.axes[0].patches) == 4 and fig.axes[0].lines


def test_split_draws_the_reference_cache_as_a_line(traces):
    fig = quantized.plot_split(traces["quantized"], reference_trace=traces["dynamic"])
    line = fig.axes[0].lines[0]
    expected = growth.total_bytes(traces["dynamic"])
    assert list(line.get_xdata()) == [t for t, _ in expected]
    assert list(line.get_ydata()) == [b / 2**10 for _, b in expected]  # a tiny model's bytes: KiB
    assert fig.axes[0].get_ylabel() == "cache bytes (KiB)"


def test_configs_are_drawn_in_the_unit_of_the_largest_bar_or_reference(traces):
    configs = {"q": traces["quantized"], "q2": traces["quantized"]}
    assert quantized.plot_configs(configs).axes[0].get_ylabel() == "cache bytes (KiB)"
    ax = quantized.plot_configs(configs, reference_bytes=12 * 2**20).axes[0]
    assert ax.get_ylabel() == "cache bytes (MiB)" and ax.lines[0].get_ydata()[0] == 12


def test_configuration_names_are_slanted_from_their_bar_and_stay_in_the_figure(traces):
    names = ["hqq 2-bit", "hqq 4-bit", "hqq 8-bit", "quanto 2-bit", "quanto 4-bit", "fp8"]
    fig = quantized.plot_configs(dict.fromkeys(names, traces["quantized"]), reference_bytes=12 * 2**20, title="t")
    FigureCanvasAgg(fig).draw()
    labels = fig.axes[0].get_xticklabels()
    assert [t.get_text() for t in labels] == names
    # anchored at their right end under the bar: a centred slanted label hung below the picture inline
    assert all(t.get_rotation_mode() == "anchor" and t.get_horizontalalignment() == "right" for t in labels)
    assert all(t.get_window_extent().y0 >= 0 and t.get_window_extent().x0 >= 0 for t in labels)
    assert not overflowing_texts(fig)


def test_quality_vs_memory_pairs_quality_only_with_the_memory_of_the_same_run():
    rows = [
        {"config": "hqq 4-bit", "memory_ratio_16bit": 0.45, "packed_ratio_16bit": 0.31, "top1_agreement": 0.9},
        {"config": "fp8", "memory_ratio_16bit": 0.5, "packed_ratio_16bit": 0.5, "top1_agreement": 1.0},
    ]
    fig = quantized.plot_quality_vs_memory(rows)
    ax, strip = fig.axes
    measured = {tuple(c.get_offsets()[0]) for c in ax.collections if len(c.get_offsets())}
    assert measured == {(0.45, 0.9), (0.5, 1.0)}  # quality at the whole cache's ratio, measured together
    assert ax.get_ylim()[0] == 0  # agreement read from 0, not from just under the lowest point
    packed = sorted(c.get_offsets()[0][0] for c in strip.collections if len(c.get_offsets()))
    assert packed == [0.31, 0.5]  # the packed ratios: on a strip of their own, with no quality axis
    assert not strip.get_yticks().size and ax.get_shared_x_axes().joined(ax, strip)
    assert not any("external" in t.get_text() for t in ax.texts)
    assert ax.get_xlim()[0] < 0.31 and ax.get_xlim()[1] > 0.5  # every marker and point inside the axes
    FigureCanvasAgg(fig).draw()
    renderer = fig.canvas.get_renderer()
    assert strip.get_window_extent(renderer).y1 < ax.get_window_extent(renderer).y0  # the strip below, apart


def test_references_table_is_marked_external_and_cites_each_source():
    table = quantized.references_markdown()
    assert "not measured by kvlab" in table
    assert table.count("| R") == len(PUBLISHED)
    assert all(r["url"] in table for r in PUBLISHED)
    assert "model weights included" in table  # KIVI's 2.6x is not a KV-cache ratio


def test_quality_vs_memory_gives_configurations_on_the_same_point_one_label():
    rows = [
        {"config": "hqq 4-bit", "memory_ratio_16bit": 0.45, "packed_ratio_16bit": 0.31, "top1_agreement": 0.9},
        {"config": "quanto 4-bit", "memory_ratio_16bit": 0.45, "packed_ratio_16bit": 0.31, "top1_agreement": 0.9},
        {"config": "fp8", "memory_ratio_16bit": 0.5, "packed_ratio_16bit": 0.5, "top1_agreement": 1.0},
    ]
    ax, strip = quantized.plot_quality_vs_memory(rows).axes
    assert sorted(t.get_text() for t in ax.texts) == ["fp8", "hqq 4-bit, quanto 4-bit"]
    assert sorted(t.get_text() for t in strip.texts) == ["fp8", "hqq 4-bit\nquanto 4-bit"]
