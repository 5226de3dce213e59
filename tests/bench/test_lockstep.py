"""kvlab.bench.lockstep: two calls taking turns token by token in two threads (no timing asserted: the order of the
turns, what each side's turns sum to, and that neither side can leave the other waiting)."""

from __future__ import annotations

import threading

import pytest
import torch

from kvlab.bench.lockstep import lockstep, shared_weights_twin


def _side(name: str, tokens: int, log: list, fail_at: int | None = None):
    """A stand-in for `generate(streamer=turns)`: the prompt's `put`, then one per new token, then `end`."""

    def run(turns):
        for k in range(tokens + 1):
            if k == fail_at:
                raise RuntimeError(f"{name} failed")
            log.append((name, k))
            turns.put(k)
        turns.end()
        return name

    return run


def _bounded(call, seconds: float = 20.0):
    """`call()` in a thread that must finish within `seconds`: a hang fails the test instead of stalling it."""
    out: dict = {}

    def target():
        try:
            out["value"] = call()
        except BaseException as err:
            out["error"] = err

    thread = threading.Thread(target=target, daemon=True)
    thread.start()
    thread.join(seconds)
    assert not thread.is_alive(), "lockstep left a side waiting"
    if "error" in out:
        raise out["error"]
    return out["value"]


@pytest.mark.parametrize("first", [0, 1])
def test_the_sides_alternate_at_every_token_and_each_keeps_its_own_slices(first):
    log: list = []
    pair = _bounded(lambda: lockstep((_side("a", 3, log), _side("b", 3, log)), first=first))
    starter, other = ("a", "b") if first == 0 else ("b", "a")
    assert log == [(name, k) for k in range(4) for name in (starter, other)]
    assert [result for result, _ in pair] == ["a", "b"]  # in the sides' order, whoever started
    for _, turns in pair:
        assert len(turns.slices) == 3 + 2  # setup, prefill, two later tokens, the end
        assert turns.seconds == pytest.approx(sum(turns.slices)) and min(turns.slices) >= 0
        assert turns.decode_tokens_per_s > 0


def test_sides_of_unequal_length_both_finish():
    log: list = []
    _bounded(lambda: lockstep((_side("a", 1, log), _side("b", 5, log))))
    assert [k for name, k in log if name == "b"] == list(range(6))


@pytest.mark.parametrize("failing", [0, 1])
def test_an_error_on_either_side_is_raised_once_both_stopped(failing):
    log: list = []
    sides = [_side("a", 4, log), _side("b", 4, log)]
    sides[failing] = _side("ab"[failing], 4, log, fail_at=2)
    with pytest.raises(RuntimeError, match=f"{'ab'[failing]} failed"):
        _bounded(lambda: lockstep(tuple(sides)))


def test_the_twin_shares_every_weight_but_not_the_hooks(tiny):
    model = tiny("tiny-llama")
    twin = shared_weights_twin(model)
    assert twin is not model and all(a is b for a, b in zip(model.parameters(), twin.parameters()))
    assert all(a is b for a, b in zip(model.buffers(), twin.buffers()))
    seen: list = []
    handle = model.register_forward_pre_hook(lambda module, args: seen.append(module))
    ids = torch.tensor([[5, 6, 7]])  # (1, prompt)
    with torch.inference_mode():
        same = torch.equal(twin(ids).logits, model(ids).logits)
    handle.remove()
    assert same and seen == [model]  # the twin's forward met no hook of the model's


def test_a_sides_figures_are_its_own_turns_the_same_before_finish_and_after():
    from kvlab.bench.lockstep import PARTS, parts

    log: list = []
    seen: dict = {}

    def read_before_finish(turns):
        _side("a", 3, log)(turns)
        seen["rate"] = turns.decode_tokens_per_s  # what generate_once reads, before `finish`
        return "a"

    (_, turns), _ = _bounded(lambda: lockstep((read_before_finish, _side("b", 3, log))))
    assert turns.decode_tokens_per_s == seen["rate"] == pytest.approx(2 / sum(turns.slices[2:4]))
    assert turns.prefill_seconds == pytest.approx(turns.slices[0] + turns.slices[1])
    split = parts(turns.slices)
    assert len(split) == len(PARTS) and sum(split) == pytest.approx(turns.seconds)
