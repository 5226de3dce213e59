from kvlab.plots import timeline


def test_plot_timeline_marks_prefetches_and_offloads(traces):
    trace = traces["offloaded"]
    fig = timeline.plot_timeline(trace, steps=(1, 2))
    labels = {
        c.get_label(): len(c.get_offsets())
        for c in fig.axes[0].collections
        if c.get_label() in ("prefetch", "offload", "update")
    }
    moves = [e for e in trace.transfers if 1 <= e["step"] <= 2]
    assert labels["offload"] == sum(e["direction"] == "offload" for e in moves)
    assert labels["prefetch"] == sum(e["direction"] == "prefetch" for e in moves)
    assert labels["update"] == 2 * 3
