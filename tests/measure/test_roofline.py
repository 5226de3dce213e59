import kvlab
from kvlab.measure.roofline import mean_decode_cache_bytes, measure_bandwidth, roofline_tokens_per_s, weight_bytes
from kvlab.recording.trace import Trace


def test_bandwidth_is_a_positive_rate():
    assert measure_bandwidth(mebibytes=8, repeats=3) > 1e6


def test_weight_bytes_count_tied_weights_once():
    model = kvlab.tiny_model("tiny-gemma3")  # ties its embedding and output matrices
    assert model.lm_head.weight.data_ptr() == model.model.embed_tokens.weight.data_ptr()
    state = model.state_dict()  # lists the tied matrix twice
    naive = sum(t.numel() * t.element_size() for t in state.values())
    embedding = model.lm_head.weight.numel() * model.lm_head.weight.element_size()
    # the tied matrix counted once; small non-persistent buffers (rotary frequencies) are not in the state dict
    assert naive - weight_bytes(model) > embedding - 1024
    assert weight_bytes(model) >= sum(p.numel() * p.element_size() for p in model.parameters())


def test_decode_reads_the_cache_stored_by_earlier_steps():
    events = [
        {"type": "update", "step": s, "layer_idx": 0, "role": "self", "cache_bytes": b}
        for s, b in enumerate([100, 110, 120])
    ]
    assert mean_decode_cache_bytes(Trace(events)) == 105
    assert roofline_tokens_per_s(1000.0, 90, 10) == 10.0
