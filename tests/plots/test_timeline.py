from kvlab.plots import timeline


def test_update_is_placed_between_prefetch_and_offload(traces):
    events = timeline.schedule(traces["offloaded"], (1, 1))
    for i, e in enumerate(events):
        if e["type"] == "update":
            later = events[i + 1]
            assert (later["type"], later["direction"], later["layer_idx"]) == ("transfer", "offload", e["layer_idx"])


def test_each_decode_step_makes_every_layer_resident_once(traces):
    intervals = timeline.residency(traces["offloaded"], steps=(1, 1))
    assert sorted(r["layer_idx"] for r in intervals if not r.get("open")) == [0, 1, 2]
    assert [r["layer_idx"] for r in intervals if r.get("open")] == [0]  # prefetched for the next step
    assert all(r["end"] > r["start"] for r in intervals)


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


def test_sliding_layers_kept_resident_with_offload_only_non_sliding():
    import torch

    import kvlab

    gemma = kvlab.tiny_model("tiny-gemma3")
    ids = torch.randint(3, 100, (1, 12), generator=torch.Generator().manual_seed(0))
    trace = kvlab.run(gemma, None, ids, "offloaded", offload_only_non_sliding=True, max_new_tokens=3).trace
    never = {r["layer_idx"] for r in timeline.residency(trace, steps=(1, 2)) if r.get("never_offloaded")}
    assert never == {0, 1, 3, 4}  # the sliding layers of [sliding, sliding, full] * 2


def test_effective_moves_drop_prefetches_of_resident_layers():
    import torch

    import kvlab

    gemma = kvlab.tiny_model("tiny-gemma3")
    ids = torch.randint(3, 100, (1, 12), generator=torch.Generator().manual_seed(0))
    trace = kvlab.run(gemma, None, ids, "offloaded", offload_only_non_sliding=True, max_new_tokens=3).trace
    moves = timeline.effective_moves(trace)
    assert len(moves) < len(trace.transfers)  # each sliding layer re-requests the next full layer
    assert {e["layer_idx"] for e in moves} == {2, 5}
    decode = [e for e in moves if e["step"] == 1]
    # layer 2's update prefetches layer 5; layer 5's update wraps around and prefetches layer 2 for the next step
    assert [(e["direction"], e["layer_idx"]) for e in decode] == [
        ("prefetch", 5),
        ("offload", 2),
        ("prefetch", 2),
        ("offload", 5),
    ]


def test_effective_moves_keep_every_move_when_all_layers_travel(traces):
    trace = traces["offloaded"]
    assert timeline.effective_moves(trace) == trace.transfers
