"""Per-layer lengths of a cache at one step: tokens seen, tokens live, tokens' worth of storage held. A sliding
layer's kept keys are a *view* into the tensor its last update built: after a prefill of N > W tokens it holds N
tokens of storage while W - 1 are live."""

from __future__ import annotations

from dataclasses import dataclass

from kvlab.i18n import _
from kvlab.recording.trace import Trace


@dataclass(frozen=True)
class LayerLength:
    layer_idx: int
    layer_kind: str
    seen: int  # tokens given to the layer so far
    live: int  # tokens attention can still read from the cache
    slots_stored: int  # tokens' worth of allocated storage (bytes_held // bytes_per_token)


def layer_lengths(trace: Trace, bytes_per_token: int, step: int | None = None) -> list[LayerLength]:
    """One `LayerLength` per self-attention layer at the end of `step` (None: the last step recorded);
    `bytes_per_token` is one token's keys plus values in one layer (`formula.bytes_per_token_per_layer`)."""
    if bytes_per_token <= 0:
        raise ValueError(
            _("bytes_per_token must be positive; got {bytes_per_token}").format(bytes_per_token=bytes_per_token)
        )
    updates = [e for e in trace.updates if e["role"] == "self"]
    if not updates:
        raise ValueError(_("the trace has no self-attention updates"))
    steps = sorted({e["step"] for e in updates})
    if step is not None and step not in steps:
        raise ValueError(
            _("no step {step} in the trace; steps {first}..{last}").format(step=step, first=steps[0], last=steps[-1])
        )
    last: dict[int, dict] = {}
    for e in updates:
        if step is None or e["step"] <= step:
            last[e["layer_idx"]] = e
    return [
        LayerLength(i, e["layer_kind"], e["logical_length"], e["slots_live"], e["bytes_held"] // bytes_per_token)
        for i, e in sorted(last.items())
    ]
