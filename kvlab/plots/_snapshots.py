"""What the whole cache holds after each step, from a trace's per-layer update events: a layer not updated at a
step (a linear layer, a cross-attention layer after prefill) keeps its state."""

from __future__ import annotations

from kvlab.i18n import layer_kind_label
from kvlab.recording.trace import Trace


def snapshots(trace: Trace) -> list[tuple[int, dict[tuple[str, int], dict]]]:
    """[(step, {(role, layer_idx): last update event so far}), ...] in step order."""
    current: dict[tuple[str, int], dict] = {}
    out: list[tuple[int, dict]] = []
    step = None
    for event in trace.updates:  # steps only increase along a trace
        if step is not None and event["step"] != step:
            out.append((step, dict(current)))
        step = event["step"]
        current[(event["role"], event["layer_idx"])] = event
    if step is not None:
        out.append((step, dict(current)))
    return out


def tokens_seen(layers: dict[tuple[str, int], dict], trace: Trace | None = None, step: int = 0) -> int:
    """The longest logical length among the self-attention layers; for a model of linear layers only (Mamba, no
    per-token length), the `trace`'s prompt length plus one token per decode step."""
    lengths = [e["logical_length"] for (role, _), e in layers.items() if role == "self"]
    seen = max(lengths, default=0)
    if seen == 0 and trace is not None and trace.meta.get("prompt_tokens"):
        return int(trace.meta["prompt_tokens"]) + step
    return seen


def layer_labels(trace: Trace) -> list[str]:
    """'L3 sliding' style labels, in the row order of `Trace.occupancy()`."""
    final = trace.final_layers()
    return [
        f"{'x' if e['role'] == 'cross' else 'L'}{e['layer_idx']} {layer_kind_label(e['layer_kind'])}" for e in final
    ]
