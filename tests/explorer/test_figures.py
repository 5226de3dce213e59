from __future__ import annotations

import numpy as np
from matplotlib.figure import Figure

import kvlab
from kvlab.explorer import figures
from kvlab.explorer.figures import CROPPED, EMPTY, EVICTED, LIVE, MASKED, QUANTIZED, RESIDUAL
from kvlab.plots import palette
from kvlab.plots.growth import bytes_by_layer_kind
from kvlab.units import binary_unit, human_bytes
from tools.figure_check import overflowing_texts


def row(layer_kind="full", length=0, allocated=0, live=0, masked=0, quantized=0, residual=0, idx=0) -> dict:
    return {
        "layer_idx": idx,
        "role": "self",
        "layer_kind": layer_kind,
        "logical_length": length,
        "slots_allocated": allocated,
        "slots_live": live,
        "slots_masked": masked,
        "tokens_evicted": length - live,
        "bytes_held": 0,
        "quantized_tokens": quantized,
        "residual_tokens": residual,
    }


def test_cells_show_evicted_live_masked_quantized_and_cropped():
    rows = [
        row("sliding", length=10, allocated=7, live=7),  # dynamic sliding: 3 evicted, 7 live
        row("full", length=4, allocated=8, live=4, masked=4, idx=1),  # static: 4 live then 4 masked
        row("full", length=9, allocated=9, live=9, quantized=6, residual=3, idx=2),
    ]  # quantized + residual
    grid = figures.occupancy_cells(rows)
    assert grid.shape == (3, 10)
    assert grid[0].tolist() == [EVICTED] * 3 + [LIVE] * 7
    assert grid[1].tolist() == [LIVE] * 4 + [MASKED] * 4 + [EMPTY] * 2
    assert grid[2].tolist() == [QUANTIZED] * 6 + [RESIDUAL] * 3 + [EMPTY]
    crop = {"lengths_before": [12, 6, 9], "lengths_after": [10, 4, 9]}
    cropped = figures.occupancy_cells(rows, crop)
    assert cropped.shape == (3, 12)
    assert (cropped[0, 10:] == CROPPED).all() and (cropped[1, 4:6] == CROPPED).all()
    assert not (cropped[2] == CROPPED).any()


def test_bytes_by_layer_kind_by_step_adds_up_to_the_cache_total(tiny, prompt_ids):
    trace = kvlab.run(tiny("tiny-gemma3"), None, prompt_ids(12), cache="dynamic", max_new_tokens=6).trace
    series = bytes_by_layer_kind(trace, x="step")
    assert set(series) == {"sliding", "full"}
    totals = [sum(dict(points)[step] for points in series.values()) for step in range(6)]
    assert totals == trace.bytes_by_step()


def test_dashboard_draws_runs_comparisons_and_an_empty_state(tiny, prompt_ids):
    first = kvlab.run(tiny("tiny-llama"), None, prompt_ids(8), cache="static", max_cache_len=32, max_new_tokens=4)
    second = kvlab.run(tiny("tiny-llama"), None, prompt_ids(8), cache="dynamic", max_new_tokens=4)
    fig = figures.dashboard(("dynamic", second.trace), second.trace.final_layers(), [("static", first.trace)])
    assert isinstance(fig, Figure) and len(fig.axes) == 3
    labels = fig.axes[0].get_legend_handles_labels()[1]
    assert labels[0] == "[1] static: total" and "full layers" in labels  # the compared run named, not "[1]" alone
    image = fig.axes[2].get_images()[0].get_array()
    assert np.asarray(image).shape == (3, 8 + 3)  # 3 layers x the positions the cache holds
    png = figures.png_bytes(figures.dashboard(None, []))
    assert png[:8] == b"\x89PNG\r\n\x1a\n"
    assert human_bytes(3 * 1024 * 1024, decimals=1, localized=True) == "3.0 MiB"  # a value read off the axis
    assert human_bytes(512, decimals=1, localized=True) == "512 B" and binary_unit(512) == ("B", 1)
    assert binary_unit(3 * 1024 * 1024) == ("MiB", 2**20)
    bytes_axis = fig.axes[0].yaxis
    assert isinstance(bytes_axis.get_major_locator(), figures.BinaryBytesLocator)
    assert isinstance(bytes_axis.get_major_formatter(), figures.BinaryBytesFormatter)


def test_the_png_has_its_own_opaque_white_background_whatever_the_matplotlib_style():
    """JupyterLab's dark theme shows a transparent PNG's black text on black: the figure paints its own white."""
    import io

    import matplotlib
    from matplotlib.image import imread

    dark = {"figure.facecolor": "#111111", "savefig.facecolor": "none", "savefig.transparent": True}
    with matplotlib.rc_context(dark):
        png = figures.png_bytes(figures.dashboard(None, []))
    pixels = imread(io.BytesIO(png))  # (height, width, RGBA) floats
    assert pixels.shape[2] == 4 and (pixels[..., 3] == 1.0).all()  # opaque everywhere
    assert pixels[0, 0].tolist() == [1.0, 1.0, 1.0, 1.0] and pixels[-1, -1].tolist() == [1.0, 1.0, 1.0, 1.0]


def test_the_map_and_the_lines_speak_kvlabs_one_palette(tiny, prompt_ids):
    """Grey is masked and red is cropped here as in every notebook figure; compared runs take `series(i)`."""
    assert figures.CELL_COLORS[LIVE] == palette.LIVE and figures.CELL_COLORS[MASKED] == palette.MASKED
    assert figures.CELL_COLORS[CROPPED] == palette.CROPPED and figures.CELL_COLORS[EVICTED] == palette.EVICTED
    own = {figures.CELL_COLORS[QUANTIZED], figures.CELL_COLORS[RESIDUAL]}
    assert not own & (
        {
            palette.LIVE,
            palette.MASKED,
            palette.FREE,
            palette.ALLOCATED,
            palette.EVICTED,
            palette.CROPPED,
            palette.CACHED,
        }
        | set(palette.SERIES)
        | set(palette.LAYER_KIND_COLORS.values())
    )
    first = kvlab.run(tiny("tiny-llama"), None, prompt_ids(8), cache="static", max_cache_len=32, max_new_tokens=4)
    second = kvlab.run(tiny("tiny-llama"), None, prompt_ids(8), cache="dynamic", max_new_tokens=4)
    fig = figures.dashboard(("dynamic", second.trace), second.trace.final_layers(), [("static", first.trace)])
    colors = {line.get_label(): line.get_color() for line in fig.axes[1].get_lines()}
    assert colors["[1] static:\nallocated"] == colors["[1] static: live"] == palette.series(0)
    assert (colors["allocated"], colors["live"], colors["masked"]) == (palette.ALLOCATED, palette.LIVE, palette.MASKED)


def _tick_labels(top: float) -> tuple[list[float], list[str]]:
    fig = Figure()
    ax = fig.add_subplot()
    ax.plot([0, 1], [0, top])
    ax.set_ylim(0, top)
    ax.yaxis.set_major_locator(figures.BinaryBytesLocator())
    ax.yaxis.set_major_formatter(figures.BinaryBytesFormatter())
    fig.canvas.draw()
    ticks = [t for t in ax.get_yticks() if 0 <= t <= top]
    labels = [t.get_text() for t in ax.get_yticklabels() if 0 <= t.get_position()[1] <= top]
    return ticks, labels


def test_byte_ticks_are_round_in_the_binary_unit_they_are_labelled_in():
    """Decimal ticks (500,000 B) under binary labels read "488.3 KiB": every tick must be a round number of KiB/MiB."""
    ticks, labels = _tick_labels(2_949_120)  # the static cache of notebook 11: 2.8125 MiB
    assert labels[0] == "0 B" and all(label.endswith(" MiB") for label in labels[1:])
    for tick, label in zip(ticks, labels):
        assert float(label.split()[0]) * 2**20 == tick  # the label is the tick, exactly
    steps = np.diff(ticks) / 2**20
    assert len(set(steps)) == 1 and steps[0] in (0.2, 0.5, 1.0)
    ticks, labels = _tick_labels(170 * 1024)
    assert labels == ["0 B", "50 KiB", "100 KiB", "150 KiB"] and ticks == [0, 51200, 102400, 153600]
    assert _tick_labels(700)[1] == ["0 B", "200 B", "400 B", "600 B"]  # below 1 KiB: plain bytes


def test_the_map_and_the_slot_counts_write_numbers_as_the_reader_does():
    """Positions and slots past 999 in pt-BR: "1.000", not pyplot's "1000"."""
    from kvlab.i18n import set_language

    fig = Figure()
    slots_ax, occupancy_ax = fig.subplots(1, 2)
    figures.draw_slots(slots_ax, None)
    slots_ax.set_ylim(0, 2000)  # as a run of 2,000 slots would leave it
    layer_rows = [row("sliding", length=1500, allocated=1024, live=1024), row("full", 1500, 1500, 1500, idx=1)]
    set_language("pt-BR")
    try:
        figures.draw_occupancy(occupancy_ax, layer_rows)
        fig.canvas.draw()
        slot_ticks = [t.get_text() for t in slots_ax.get_yticklabels()]
        position_ticks = [t.get_text() for t in occupancy_ax.get_xticklabels()]
        title = occupancy_ax.get_title()
    finally:
        set_language(None)
    assert any("." in label for label in slot_ticks) and "2.000" in slot_ticks
    assert "1.000" in position_ticks
    assert title == "o que cada camada guarda (d = deslizante, c = completa)"


def test_a_compared_run_is_named_and_drawn_over_the_current_run_it_may_lie_on(tiny, prompt_ids):
    current = ("smollm2 · dynamic", None)
    label = figures.compared_label(1, "smollm2 · static (max_cache_len=64)", current, "live")
    assert label == "[1] static\n(max_cache_len=64):\nlive"  # the model both share left out, wrapped to fit
    other_model = figures.compared_label(2, "tiny-llama · static", current, "total")
    assert other_model == "[2] tiny-llama ·\nstatic: total"
    run = kvlab.run(tiny("tiny-llama"), None, prompt_ids(8), cache="dynamic", max_new_tokens=4)
    fig = figures.dashboard(("m · dynamic", run.trace), run.trace.final_layers(), [("m · dynamic", run.trace)])
    lines = {line.get_label(): line for line in fig.axes[1].get_lines()}
    compared, own = lines["[1] dynamic: live"], lines["live"]  # the same run twice: one line on the other
    assert compared.get_zorder() > own.get_zorder() and compared.get_marker() not in ("", "None")
    assert compared.get_linestyle() != own.get_linestyle()
    assert not overflowing_texts(fig)
