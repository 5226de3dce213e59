import numpy as np

from kvlab.plots import occupancy


def test_evictions_are_cumulative_and_only_in_sliding_layers(traces):
    trace = traces["sliding"]
    grid = np.array(occupancy.evictions(trace))
    kinds = [e["layer_kind"] for e in trace.final_layers()]
    assert grid.shape == (6, trace.summary()["steps"])
    assert (np.diff(grid, axis=1) >= 0).all()
    for row, kind in zip(grid, kinds):
        assert (row[-1] > 0) == (kind == "sliding")
    assert grid[:, -1].sum() == trace.summary()["tokens_evicted"]


def test_plot_occupancy_has_two_heatmaps_with_layer_labels(traces):
    fig = occupancy.plot_occupancy(traces["sliding"])
    heatmaps = [ax for ax in fig.axes if ax.images]
    assert len(heatmaps) == 2
    assert np.array_equal(heatmaps[0].images[0].get_array(), np.array(traces["sliding"].occupancy()))
    assert [t.get_text() for t in heatmaps[0].get_yticklabels()][:3] == ["L0 sliding", "L1 sliding", "L2 full"]


def test_plot_occupancy_without_evictions(traces):
    assert len([ax for ax in occupancy.plot_occupancy(traces["dynamic"], show_evictions=False).axes if ax.images]) == 1


def test_the_live_panel_writes_each_rows_first_and_last_count(traces):
    trace = traces["sliding"]
    live = np.array(trace.occupancy())
    ax = occupancy.plot_occupancy(trace, show_evictions=False).axes[0]
    written = {(round(t.get_position()[0]), round(t.get_position()[1])): t.get_text() for t in ax.texts}
    last = live.shape[1] - 1
    assert written == {(column, row): f"{live[row, column]:,}" for row in range(live.shape[0]) for column in (0, last)}
