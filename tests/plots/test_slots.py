from kvlab.plots import slots


def test_static_run_has_masked_slots_dynamic_has_none(traces):
    rows = {r["run"]: r for r in slots.run_slots({"static": traces["static"], "dynamic": traces["dynamic"]})}
    assert rows["static"]["slots_allocated"] == 3 * 16  # 3 layers × max_cache_len
    assert rows["static"]["slots_masked"] == rows["static"]["slots_allocated"] - rows["static"]["slots_live"] > 0
    assert rows["dynamic"]["slots_masked"] == 0 and rows["dynamic"]["waste_pct"] == 0


def test_plot_slots_stacks_live_and_masked_under_allocated(traces):
    fig = slots.plot_slots(traces["static"])
    ax = fig.axes[0]
    allocated = ax.lines[0].get_ydata()
    assert list(allocated) == [r["slots_allocated"] for r in traces["static"].slots_by_step()]
    assert len(ax.collections) == 2  # live, masked


def test_plot_runs_one_bar_pair_per_run(traces):
    fig = slots.plot_runs({"long": traces["static"], "short": traces["dynamic"]})
    assert len(fig.axes[0].patches) == 4


def test_the_states_take_the_palette_and_the_legends_sit_outside(traces):
    from matplotlib.colors import to_hex

    from kvlab.plots.palette import LIVE, MASKED

    ax = slots.plot_slots(traces["static"]).axes[0]
    assert [to_hex(c.get_facecolor()[0]) for c in ax.collections] == [LIVE, MASKED]
    bars = slots.plot_runs({"long": traces["static"]}).axes[0]
    assert [to_hex(p.get_facecolor()) for p in bars.patches] == [LIVE, MASKED]
    for axes in (ax, bars):
        assert axes.get_legend().get_bbox_to_anchor().x0 > axes.get_window_extent().x1 - 1  # right of the data


def test_each_bar_says_its_masked_share_to_one_decimal_as_the_prose_does(traces):
    row = slots.run_slots({"long": traces["static"]})[0]
    (label,) = [t.get_text() for t in slots.plot_runs({"long": traces["static"]}).axes[0].texts]
    assert label == f"{row['waste_pct']:.1f}% masked"  # "89.5% masked" beside a text saying 89.5 %, not "89%"
