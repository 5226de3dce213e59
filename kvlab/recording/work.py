"""The work behind a step's time, counted exactly: what a forward asked of attention and of the cache.

Each update event carries `batch`, `queries` (new tokens), `slots_attended` (key positions each query is scored
against: eager and SDPA compute `Q K^T` over every slot handed back before masking, so a StaticCache's empty slots
count: the compute its fixed shape wastes), `attention_flops` (2 x batch x query heads x queries x slots_attended x
(key dim + value dim); `torch.utils.flop_counter` misses CPU SDPA) and a QuantizedCache's packing calls and elements.
"""

from __future__ import annotations

import torch

WORK_FIELDS = (
    "batch",
    "queries",
    "slots_attended",
    "attention_flops",
    "quantize_calls",
    "quantized_elements",
    "dequantize_calls",
    "dequantized_elements",
)
QUANT_FIELDS = WORK_FIELDS[4:]
NO_WORK = (0,) * len(WORK_FIELDS)  # the counters of an update that ran no attention, as a tuple


def no_work(queries: int = 0) -> dict:
    """The counters of an update that ran no attention (a crop's re-read, a state read, an attach)."""
    return dict.fromkeys(WORK_FIELDS, 0) | {"queries": int(queries)}


def layer_heads(heads: int | tuple[int, ...], layer_idx: int) -> int:
    """Layer `layer_idx`'s count from `ModelFacts.query_heads` (0, the KV heads standing in, past its layers)."""
    if isinstance(heads, int):
        return heads
    return heads[layer_idx] if layer_idx < len(heads) else 0


def attention_counts(key_states, returned, heads: int, quantized: tuple = (0, 0, 0, 0)) -> tuple:
    """`attention_work` as a tuple in `WORK_FIELDS` order (a fraction of a dict's cost, on every update), with the
    update's packing counters (`QUANT_FIELDS`) as `quantized`."""
    queries = int(key_states.shape[-2])
    keys, values = _pair(returned)
    if keys is None:
        return (0, queries, 0, 0, *quantized)
    batch, kv_heads, slots, key_dim = keys.shape  # (batch, kv_heads, slots, head_dim)
    flops = 2 * batch * (heads or kv_heads) * queries * slots * (key_dim + values.shape[-1])
    return (int(batch), queries, int(slots), int(flops), *quantized)


def attention_work(key_states, returned, heads: int) -> dict:
    """Counters of one key/value update: `key_states` went in, `returned` (keys, values) goes to attention.

    key_states: (batch, kv_heads, new_tokens, head_dim); returned keys/values: (batch, kv_heads, slots, dim).
    Without a query-head count (`heads` 0) the KV heads stand in, exact for multi-head attention."""
    return dict(zip(WORK_FIELDS, attention_counts(key_states, returned, heads)))


def _pair(returned):
    """(keys, values) from what a cache update returned, or (None, None) when it is not a pair of 4-D tensors."""
    if type(returned) in (tuple, list) and len(returned) >= 2:  # exact types: no isinstance ABC lookups per update
        keys, values = returned[0], returned[1]
        if isinstance(keys, torch.Tensor) and isinstance(values, torch.Tensor) and keys.dim() == 4:
            return keys, values
    elif isinstance(returned, (tuple, list)):
        return _pair(tuple(returned))
    return None, None


def work_by_step(trace) -> list[dict]:
    """Per forward (step): the work summed over layers, and the bytes offloading moved.

    `tokens` is the most queries any layer ran; `slots_attended` sums over layers; a field an older trace did not
    record stays None."""
    rows: dict[int, dict] = {}
    for e in trace.events:
        row = rows.setdefault(e["step"], _empty_row(e["step"]))
        if e["type"] == "update":
            row["tokens"] = _max(row["tokens"], e.get("queries"))
            for name in ("slots_attended", "attention_flops", *QUANT_FIELDS):
                row[name] = _add(row[name], e.get(name))
        elif e["type"] == "transfer":
            row[f"{e['direction']}_bytes"] += int(e["bytes"]) if e["moved"] else 0
    return [rows[s] for s in sorted(rows)]


def input_signatures(trace) -> list[tuple]:
    """The distinct shapes attention saw, in order of first appearance: (batch, queries, slots attended per layer),
    each one what `torch.compile` would trace again (a StaticCache keeps one; a DynamicCache's grow every step)."""
    per_step: dict[int, dict] = {}
    for e in trace.updates:
        if e["op"] == "kv" and e.get("slots_attended") is not None:
            per_step.setdefault(e["step"], {})[(e["role"], e["layer_idx"])] = (
                e["batch"],
                e["queries"],
                e["slots_attended"],
            )
    seen: list[tuple] = []
    for step in sorted(per_step):
        layers = per_step[step]
        keys = sorted(layers, key=lambda k: (k[0] != "self", k[1]))
        batch, queries, _ = layers[keys[0]]
        signature = (batch, queries, tuple(layers[k][2] for k in keys))
        if signature not in seen:
            seen.append(signature)
    return seen


def _empty_row(step: int) -> dict:
    counts = ("tokens", "slots_attended", "attention_flops", *QUANT_FIELDS, "offload_bytes", "prefetch_bytes")
    return {"step": step, **dict.fromkeys(counts, 0)}


def _add(total, value):
    return None if total is None or value is None else total + value


def _max(total, value):
    return None if value is None else max(total or 0, value)
