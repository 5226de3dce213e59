from kvlab.recording.recorder import Recorder


def test_a_step_starts_when_a_layer_operation_repeats():
    rec = Recorder()
    order = [
        ("self", 0, "read"),
        ("self", 0, "conv"),
        ("self", 0, "recurrent"),
        ("self", 1, "kv"),
        ("cross", 1, "kv"),
        ("self", 0, "read"),
        ("self", 1, "kv"),
        ("self", 0, "read"),
    ]
    steps = []
    for role, layer, op in order:
        rec.begin(role, layer, op)
        steps.append(rec.step)
    assert steps == [0, 0, 0, 0, 0, 1, 1, 2]


def test_a_state_the_caller_read_becomes_the_same_event_as_a_layers():
    """`record_update` reads a layer and builds its event with `record_state`; a cache that reads its own state (the
    paged cache's block pool) gets the same fields in the same order, its own after the work."""
    import torch

    from kvlab import _compat
    from kvlab.recording.layer_state import read_layer
    from kvlab.recording.work import no_work

    layer = _compat.DynamicLayer()
    layer.update(torch.zeros(1, 2, 3, 4), torch.zeros(1, 2, 3, 4))  # (batch, kv_heads, tokens, head_dim)
    read = Recorder()
    read.record_update("self", 0, layer, "full", "kv", 3, 0.5)
    given = Recorder()
    given.record_state("self", 0, read_layer(layer, "full"), "kv", 3, 0.5)
    assert list(given.trace.events[0].items()) == list(read.trace.events[0].items())

    given.cache_bytes = 4096  # a pool allocated up front
    given.record_state("self", 1, read_layer(layer, "full"), "free", 0, 0.0, no_work(), {"blocks_free": 7})
    event = given.trace.events[-1]
    assert (event["cache_bytes"], event["layer_idx"], list(event)[-1]) == (4096, 1, "blocks_free")
    assert given.total_bytes() == 2 * event["bytes_held"]  # the pool's own bytes do not replace the layers' count


def test_bytes_beside_the_layers_join_their_layers_events_and_the_total():
    """A Cache subclass's own state (MiniMax's `linear_cache[i]`): a layer's share is in its `bytes_held` (an
    "outside" event when only the share changed), a share paired with no layer in `cache_bytes` and the meta."""
    import torch

    from kvlab import _compat
    from kvlab.recording.layer_state import LayerState, read_layer
    from kvlab.recording.storage import Outside

    layer = _compat.DynamicLayer()
    layer.update(torch.zeros(1, 2, 3, 4), torch.zeros(1, 2, 3, 4))  # (batch, kv_heads, tokens, head_dim): 192 B
    rec = Recorder()
    rec.record_update("self", 0, layer, "full", "kv", 3, 0.0)
    empty = LayerState("linear", 0, 0, 0, 0, 0, 0, "none")
    rec.record_outside("self", Outside({1: 1000}, {"pool": 24}), lambda i: empty)
    rec.record_outside("self", Outside({1: 1000}, {"pool": 24}), lambda i: empty)  # unchanged: no event
    events = rec.trace.updates
    assert [(e["layer_idx"], e["op"], e["bytes_held"], e["cache_bytes"]) for e in events] == [
        (0, "kv", 192, 192),
        (1, "outside", 1000, 192 + 1000 + 24),
    ]
    rec.record_update("self", 1, layer, "full", "kv", 3, 0.0)  # layer 1's own keys now, beside its share
    assert rec.trace.updates[-1]["bytes_held"] == 192 + 1000
    assert rec.trace.updates[-1]["cache_bytes"] == 192 * 2 + 1000 + 24
    assert rec.state("self", 1) == read_layer(layer, "full")  # the layer's own reading, for re-read comparisons
    rec.record_outside("self", Outside(), lambda i: empty)  # freed
    assert rec.trace.updates[-1]["bytes_held"] == 192 and rec.trace.updates[-1]["cache_bytes"] == 192 * 2
    assert rec.trace.meta["bytes_outside_layers"] == {"pool": 0}


def _watched_events(model, monkeypatch=None, crop_after: int | None = None) -> list[dict]:
    """The events of a greedy generate under kvlab.watch (then a crop), `seconds` left out: timing, not state."""
    import torch

    import kvlab
    from kvlab import _compat

    ids = torch.tensor([[3, 14, 15, 92, 65, 35, 89, 79]])  # (batch, prompt tokens)
    cache = _compat.DynamicCache(config=model.config)
    with kvlab.watch(model) as watch, torch.inference_mode():
        model.generate(ids, max_new_tokens=6, do_sample=False, past_key_values=cache, pad_token_id=0)
        if crop_after is not None:
            cache.crop(crop_after)  # the layers keep views of their tensors: the next update concatenates onto them
            model(ids[:, :2], past_key_values=cache)  # (batch, 2 new tokens)
    return [{k: v for k, v in e.items() if k != "seconds"} for e in watch.trace.events]


def test_a_deferred_update_logs_the_event_the_general_path_logs(tiny, monkeypatch):
    """The hot path (`Recorder.defer`, read at the step's end) and the general one (`record_update`, read at once)
    give the same events in the same order, full and sliding layers, before and after a crop and past it."""
    import kvlab.caches.base
    from kvlab import watcher

    # every forward through the instrumented `update`, not read after it ended (`tests/caches/test_forward_read.py`)
    monkeypatch.setattr(watcher, "read_after_forward", lambda cache, started: False)
    for name, crop in (("tiny-llama", -2), ("tiny-gemma3", None)):  # a sliding layer past its window refuses a crop
        model = tiny(name)
        deferred = _watched_events(model, crop_after=crop)
        with monkeypatch.context() as patched:
            patched.setattr(kvlab.caches.base, "read_after_update", lambda layer_type: False)  # never deferred
            at_once = _watched_events(model, crop_after=crop)
        kv_updates = [e for e in deferred if e.get("op") == "kv"]
        forwards = 6 if crop is None else 7  # the generate's, then one past the crop
        assert deferred == at_once and len(kv_updates) == forwards * model.config.num_hidden_layers
        assert deferred[-1]["type"] == "update" and deferred[-1].get("op") == "kv"
        assert any(e.get("op") == "crop" for e in deferred) == (crop is not None)


def test_every_read_of_the_record_sees_the_deferred_updates():
    """A deferred update is logged before the record is read or added to: `events`, `state`, `total_bytes`, a crop
    event, an update of another layer."""
    import torch

    from kvlab import _compat
    from kvlab.recording.layer_state import read_layer

    layer = _compat.DynamicLayer()
    layer.update(torch.zeros(1, 2, 3, 4), torch.zeros(1, 2, 3, 4))  # (batch, kv_heads, tokens, head_dim)
    read_layer(layer, "full")  # its class is known to keep keys and values alone: the hot path's condition

    class Cache:  # what `defer` reads of a cache
        layers = [layer]
        kvlab_role = "self"
        _kvlab_query_heads = 0

        def _kvlab_layer_kind(self, layer_idx):
            return "full"

    for read in (
        lambda r: r.trace.events,
        lambda r: r.state("self", 0),
        lambda r: r.total_bytes(),
        lambda r: r.record_crop("self", -1, False, [3], [2]),
        lambda r: r.record_update("self", 1, layer, "full", "kv", 3, 0.0),
    ):
        recorder = Recorder()
        recorder.defer(Cache(), 0, 0.25)
        read(recorder)
        first = recorder.trace.events[0]
        assert (first["type"], first["layer_idx"], first["seconds"], first["slots_attended"]) == ("update", 0, 0.25, 3)
        assert recorder.total_bytes() == 2 * 3 * 2 * 4 * 4 * (2 if len(recorder.trace.updates) == 2 else 1)


def test_a_long_trace_leaves_the_garbage_collectors_lists():
    """An update event keeps plain values only, so the collector stops tracking it once it has seen it: a long run's
    events add nothing to what a full collection walks (as objects, a 16 + 512 run's set off a 0.25 s one)."""
    import gc

    import torch

    from kvlab import _compat

    rec = Recorder()
    layer = _compat.DynamicLayer()
    for _ in range(3):
        rec.begin("self", 0, "kv")
        layer.update(torch.zeros(1, 2, 1, 4), torch.zeros(1, 2, 1, 4))  # (batch, kv_heads, tokens, head_dim)
        rec.record_update("self", 0, layer, "full", "kv", 1, 0.0)
    kept = list(rec.trace._unbuilt)
    gc.collect()
    gc.collect()
    assert len(kept) == 3 and not any(gc.is_tracked(event) for event in kept)
    assert [e["logical_length"] for e in rec.trace.events] == [1, 2, 3]  # the values still read back as fields
