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
