"""A watched `DynamicCache` read once per forward: the same record as update by update, but for the updates' own
seconds; the same tokens; the cache back to its class whatever happens mid-forward."""

import pytest
import torch
from transformers import DynamicCache

import kvlab
from kvlab import watcher
from kvlab.caches.forward_read import ForwardReadDynamicCache
from kvlab.caches.kinds import InstrumentedDynamicCache


def _know_readers(model, ids, greedy) -> None:
    """A watched run first: kvlab learns its layer classes' readers (`read_after_update`) on their first filled layer,
    so a process's first watched prefill is recorded update by update; every later forward is read after it."""
    with kvlab.watch(model):
        greedy(model, ids, new_tokens=2)


def _untimed(trace) -> list[dict]:
    """Every event but the updates' own `seconds` (unknown where the forward was read after it ended)."""
    return [{k: v for k, v in event.items() if k != "seconds"} for event in trace.events]


def _watched(model, ids, greedy, forward_read: bool, monkeypatch, **kwargs):
    with monkeypatch.context() as patch:
        if not forward_read:  # every update through the instrumented twin's own `update`, as before issue 41
            patch.setattr(watcher, "read_after_forward", lambda cache, started: False)
        with kvlab.watch(model) as watch:
            tokens = greedy(model, ids, **kwargs)
    return tokens, watch


@pytest.mark.parametrize("name", ["tiny-llama", "tiny-gemma3"])  # full layers; sliding ones past their window of 8
def test_same_record_as_update_by_update(name, tiny, prompt_ids, greedy, monkeypatch):
    model, ids = tiny(name), prompt_ids(6)
    _know_readers(model, ids, greedy)
    read_tokens, read = _watched(model, ids, greedy, True, monkeypatch, new_tokens=12)
    updated_tokens, updated = _watched(model, ids, greedy, False, monkeypatch, new_tokens=12)

    assert torch.equal(read_tokens, updated_tokens)
    assert _untimed(read.trace) == _untimed(updated.trace)
    layers = len(model.config.layer_types) if name == "tiny-gemma3" else model.config.num_hidden_layers
    seconds = [e["seconds"] for e in read.trace.updates]
    assert seconds == [None] * (12 * layers)  # every forward read after it ended: prefill and 11 decode steps
    assert all(isinstance(s, float) for s in (e["seconds"] for e in updated.trace.updates))
    assert len(read.trace.meta["step_started_s"]) == len(updated.trace.meta["step_started_s"]) == 12
    assert type(read.caches[0]) is DynamicCache  # given back after the block


def test_a_read_mid_forward_records_the_rest_update_by_update(tiny, prompt_ids, greedy, monkeypatch):
    """Reading the trace while a forward runs flushes: the layers updated so far are read, the rest of the forward
    goes through the instrumented `update` (timed), and the record is the same."""
    model, ids = tiny("tiny-llama"), prompt_ids(5)
    _know_readers(model, ids, greedy)
    seen_mid_forward: list[type] = []

    def read_trace(module, args):
        watch = module_watch[0]
        if watch.caches:
            len(watch.trace.events)
            seen_mid_forward.append(type(watch.caches[0]))

    module_watch: list = []
    handle = model.model.layers[1].register_forward_pre_hook(read_trace)
    try:
        with monkeypatch.context():
            with kvlab.watch(model) as watch:
                module_watch.append(watch)
                tokens = greedy(model, ids, new_tokens=6)
    finally:
        handle.remove()
    _plain_tokens, plain = _watched(model, ids, greedy, False, monkeypatch, new_tokens=6)

    assert torch.equal(tokens, _plain_tokens)
    assert _untimed(watch.trace) == _untimed(plain.trace)
    assert set(seen_mid_forward) == {InstrumentedDynamicCache}  # the read gave the class back at once
    layer_0 = [e["seconds"] for e in watch.trace.updates if e["layer_idx"] == 0]
    layer_1 = [e["seconds"] for e in watch.trace.updates if e["layer_idx"] == 1]
    assert layer_0 == [None] * 6 and all(isinstance(s, float) for s in layer_1)


def test_a_forward_that_raises_is_recorded_up_to_the_error(tiny, prompt_ids, greedy):
    model, ids = tiny("tiny-llama"), prompt_ids(4)
    _know_readers(model, ids, greedy)
    cache = DynamicCache(config=model.config)
    calls = []

    def fail_on_second(module, args):
        calls.append(1)
        if len(calls) == 2:
            raise RuntimeError("stop")

    handle = model.model.layers[1].register_forward_pre_hook(fail_on_second)
    try:
        with kvlab.watch(model) as watch:
            model(ids, past_key_values=cache)  # prefill: every layer
            with pytest.raises(RuntimeError, match="stop"):
                model(ids[:, :1], past_key_values=cache)  # layer 0 updated, then the error
            assert type(cache) is ForwardReadDynamicCache  # until the record is read
            updates = [(e["step"], e["layer_idx"], e["tokens_added"]) for e in watch.trace.updates]
            assert type(cache) is InstrumentedDynamicCache
    finally:
        handle.remove()
    layers = model.config.num_hidden_layers
    assert updates == [(0, i, 4) for i in range(layers)] + [(1, 0, 1)]
    assert type(cache) is DynamicCache and cache.get_seq_length(0) == 5


def test_only_a_plain_dynamic_cache_is_read_after_the_forward(tiny, prompt_ids, greedy, monkeypatch):
    model, ids = tiny("tiny-llama"), prompt_ids(4)
    with kvlab.watch(model) as watch:
        greedy(model, ids, new_tokens=3, cache_implementation="static")
    assert all(isinstance(e["seconds"], float) for e in watch.trace.updates)  # StaticCache: update by update


def test_the_keys_a_read_kept_serve_the_next_forward_until_something_is_recorded(tiny, prompt_ids, greedy):
    """The next forward starts from the keys the last read kept (no look at the layers as it begins) while nothing
    was recorded since; a crop between forwards is recorded, and a copy has its own layers: both look again."""
    import copy

    model, ids = tiny("tiny-llama"), prompt_ids(5)
    _know_readers(model, ids, greedy)
    cache = DynamicCache(config=model.config)
    with kvlab.watch(model) as watch, torch.no_grad():
        model(ids, past_key_values=cache)  # met, adopted and read after it ended: the layers looked at
        model(ids[:, :1], past_key_values=cache)  # starts from the keys the first read kept
        recorder = cache.kvlab_recorder
        kept = recorder.keys_after_read(cache)
        assert [ref() for ref in kept] == [layer.keys for layer in cache.layers]
        copied = copy.deepcopy(cache)
        assert copied.kvlab_recorder.keys_after_read(copied) is None  # its layers are not the ones kept
        assert recorder.keys_after_read(cache) is kept  # a read of the record changes nothing
        cache.crop(-1)
        assert recorder.keys_after_read(cache) is None
        model(ids[:, :2], past_key_values=cache)  # looked at again as it began
        assert recorder.keys_after_read(cache) is not None
    updates = [(e["step"], e["tokens_added"], e["seconds"] is None) for e in watch.trace.updates if e["op"] == "kv"]
    layers = model.config.num_hidden_layers
    assert updates == [(0, 5, True)] * layers + [(1, 1, True)] * layers + [(2, 2, True)] * layers
