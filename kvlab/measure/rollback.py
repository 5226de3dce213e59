"""Rolling a cache back: which positions it holds, and a speculative-decoding loop that crops rejected drafts.
A sliding layer past its window has already dropped the tokens a crop must bring back into view, so transformers
refuses to crop it unless `cache.activate_past_recording()` made it keep them."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field

import torch

from kvlab import _compat
from kvlab.caches import make_cache
from kvlab.i18n import _
from kvlab.recording.layer_kinds import layer_kind_at
from kvlab.recording.layer_state import read_layer

Draft = Callable[[list[int], int], list[int]]


def cached_positions(cache) -> list[dict]:
    """Per layer: the absolute positions in its live slots (`positions_live`: with past recording, a sliding layer
    keeps positions it no longer attends) and those the next query sees (`positions_visible`: a sliding layer its
    last `window - 1` tokens plus itself)."""
    rows = []
    for idx, layer in enumerate(cache.layers):
        layer_kind = layer_kind_at(getattr(cache, "_kvlab_layer_kinds", ()), idx, layer)
        state = read_layer(layer, layer_kind)
        seen, live = state.logical_length, state.slots_live
        positions = list(range(seen - live, seen))
        window = getattr(layer, "sliding_window", None) or (layer.max_cache_len if layer_kind == "sliding" else None)
        visible = positions[-(window - 1) :] if window and len(positions) >= window else positions
        rows.append(
            {
                "layer_idx": idx,
                "layer_kind": layer_kind,
                "seen": seen,
                "window": window,
                "positions_live": positions,
                "positions_visible": visible,
            }
        )
    return rows


def holdings(cache) -> dict[str, dict]:
    """Per layer kind: how many layers, the largest layer's tokens seen, live slots and bytes (`bytes_per_layer`),
    and the bytes of all of them. Slots and bytes can disagree: a crop slices the stored tensors, and the slice
    keeps the whole storage alive until the next update concatenates into a fresh tensor."""
    out: dict[str, dict] = {}
    for row in cached_positions(cache):
        layer = cache.layers[row["layer_idx"]]
        state = read_layer(layer, row["layer_kind"])
        current = out.setdefault(
            row["layer_kind"], {"layers": 0, "tokens": 0, "slots_live": 0, "bytes_per_layer": 0, "bytes_all_layers": 0}
        )
        current["layers"] += 1
        current["tokens"] = max(current["tokens"], state.logical_length)
        current["slots_live"] = max(current["slots_live"], state.slots_live)
        current["bytes_per_layer"] = max(current["bytes_per_layer"], state.bytes_held)
        current["bytes_all_layers"] += state.bytes_held
    return out


def prompt_lookup_draft(ngram: int = 2) -> Draft:
    """Prompt-lookup drafting: find the latest earlier occurrence of the last `ngram` tokens and propose the
    tokens that followed it. Free to compute, and good on text that repeats itself (code, lists, quotes)."""

    def draft(ids: list[int], k: int) -> list[int]:
        tail = ids[-ngram:]
        for start in range(len(ids) - ngram - 1, -1, -1):
            if ids[start : start + ngram] == tail:
                return ids[start + ngram : start + ngram + k]
        return []

    return draft


@dataclass(frozen=True)
class SpeculativeStep:
    """One forward after the prefill; `drafted` is empty when the draft had nothing to propose (one greedy token)."""

    drafted: tuple[int, ...]
    accepted: int
    rejected: int
    cache_length_before_crop: int
    cache_length_after_crop: int


@dataclass
class SpeculativeResult:
    token_ids: list[int]  # the new tokens, after the prompt
    steps: list[SpeculativeStep] = field(default_factory=list)  # every forward after the prefill, drafted or not
    forwards: int = 0  # the prefill + len(steps)
    cache: object = None

    @property
    def accepted(self) -> int:
        return sum(s.accepted for s in self.steps)

    @property
    def rejected(self) -> int:
        return sum(s.rejected for s in self.steps)


def speculative_generate(
    model,
    input_ids: torch.Tensor,
    max_new_tokens: int,
    draft: Draft,
    k: int = 4,
    cache: str = "dynamic",
    past_recording: bool = False,
    eos_token_id: int | None = None,
    **cache_options,
) -> SpeculativeResult:
    """Greedy decoding that verifies `k` drafted tokens per forward and crops the rejected ones from the cache:
    the same tokens as plain greedy decoding. Between forwards the cache holds every committed token but the last."""
    if input_ids.dim() != 2 or input_ids.shape[0] != 1:
        raise ValueError(_("input_ids must have shape (1, tokens), got {shape}").format(shape=tuple(input_ids.shape)))
    input_ids = input_ids.to(model.device)
    if k < 1:
        raise ValueError(_("k={k}: draft at least one token per step").format(k=k))
    kv = make_cache(cache, model.config, **cache_options)
    if past_recording:
        kv.activate_past_recording()
    committed = input_ids[0].tolist()
    result = SpeculativeResult([], cache=kv)
    with torch.inference_mode():
        logits = _forward(model, input_ids, kv)  # prefill: (1, prompt_tokens, vocab)
        result.forwards += 1
        committed.append(int(logits[0, -1].argmax()))
        while len(committed) - input_ids.shape[-1] < max_new_tokens and committed[-1] != eos_token_id:
            room = max_new_tokens - (len(committed) - input_ids.shape[-1])
            guesses = list(draft(committed, k))[: min(k, room - 1)] if room > 1 else []
            feed = torch.tensor([[committed[-1], *guesses]], device=model.device)  # (1, 1 + drafted)
            logits = _forward(model, feed, kv)
            result.forwards += 1
            predicted = logits[0].argmax(-1).tolist()  # the model's next token after each fed token
            accepted = 0
            while accepted < len(guesses) and guesses[accepted] == predicted[accepted]:
                accepted += 1
            before = kv.get_seq_length()
            rejected = len(guesses) - accepted
            if rejected:
                kv.crop(-rejected)
            elif past_recording:
                kv.crop(0)  # nothing to undo, but let recording sliding layers drop what they no longer need
            committed.extend([*guesses[:accepted], predicted[accepted]])
            result.steps.append(SpeculativeStep(tuple(guesses), accepted, rejected, before, kv.get_seq_length()))
    new = committed[input_ids.shape[-1] :][:max_new_tokens]
    if eos_token_id is not None and eos_token_id in new:
        new = new[: new.index(eos_token_id) + 1]
    result.token_ids = new
    return result


def _forward(model, ids: torch.Tensor, kv) -> torch.Tensor:
    return model(ids, use_cache=True, **{_compat.CACHE_KWARG: kv}).logits
