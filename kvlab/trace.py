"""A `Trace` is the record of one cache's life: every layer update, crop, flush and offload.

Events are plain dicts (JSON-ready, pandas-ready), each with a `type`:
- "update":   one layer update: step, layer_idx, role, op, tokens_added, tokens_evicted_now, seconds,
              cache_bytes (whole cache after this update) and every field of `LayerState`;
- "crop":     n, past_recording, lengths_before, lengths_after (per layer);
- "flush":    a quantized layer moved its full-precision residual into quantized storage;
- "transfer": an offloaded layer moved (direction "offload" or "prefetch"), bytes, seconds, src, dst.
`meta` holds what produced the trace (model, cache kind, options, dtype, timings).
"""

from __future__ import annotations

import json
from pathlib import Path

SCHEMA_VERSION = 1
EVENT_TYPES = ("update", "crop", "flush", "transfer")


class TraceFormatError(ValueError):
    """A file that is not a kvlab trace (or not a version this kvlab reads)."""


class Trace:
    def __init__(self, events: list[dict] | None = None, meta: dict | None = None):
        self.events: list[dict] = list(events or [])
        self.meta: dict = dict(meta or {})

    def __repr__(self) -> str:
        s = self.summary()
        return (f"Trace({len(self.events)} events, {s['steps']} steps, peak {s['peak_bytes']:,} B, "
                f"final {s['final_bytes']:,} B)")  # fmt: skip

    # -- selections -------------------------------------------------------------------------------------------
    def of_type(self, kind: str) -> list[dict]:
        return [e for e in self.events if e["type"] == kind]

    @property
    def updates(self) -> list[dict]:
        return self.of_type("update")

    @property
    def crops(self) -> list[dict]:
        return self.of_type("crop")

    @property
    def flushes(self) -> list[dict]:
        return self.of_type("flush")

    @property
    def transfers(self) -> list[dict]:
        return self.of_type("transfer")

    # -- derived views ----------------------------------------------------------------------------------------
    def final_layers(self) -> list[dict]:
        """The last update of each (role, layer), in layer order: the state the cache ended in (before crops)."""
        last: dict[tuple, dict] = {}
        for e in self.updates:
            last[(e["role"], e["layer_idx"])] = e
        return [last[k] for k in sorted(last, key=lambda k: (k[0] != "self", k[1]))]

    def bytes_by_step(self) -> list[int]:
        """Total cache bytes at the end of each step."""
        by_step: dict[int, int] = {}
        for e in self.updates:
            by_step[e["step"]] = e["cache_bytes"]
        return [by_step[s] for s in sorted(by_step)]

    def slots_by_step(self) -> list[dict]:
        """Allocated, live and masked slots summed over layers, at the end of each step."""
        current: dict[tuple, dict] = {}
        rows: dict[int, dict] = {}
        for e in self.updates:
            current[(e["role"], e["layer_idx"])] = e
            rows[e["step"]] = {
                "step": e["step"],
                **{f: sum(c[f] for c in current.values()) for f in ("slots_allocated", "slots_live", "slots_masked")},
            }
        return [rows[s] for s in sorted(rows)]

    def occupancy(self) -> list[list[int]]:
        """Live slots per layer (rows) per step (columns), for a layer × step heatmap."""
        roles_layers = sorted({(e["role"], e["layer_idx"]) for e in self.updates}, key=lambda k: (k[0] != "self", k[1]))
        steps = sorted({e["step"] for e in self.updates})
        index = {k: i for i, k in enumerate(roles_layers)}
        grid = [[0] * len(steps) for _ in roles_layers]
        col = {s: j for j, s in enumerate(steps)}
        for e in self.updates:
            grid[index[(e["role"], e["layer_idx"])]][col[e["step"]]] = e["slots_live"]
        for row in grid:  # a layer not updated at a step keeps its previous occupancy
            for j in range(1, len(row)):
                row[j] = row[j] or row[j - 1]
        return grid

    def layer_table(self) -> list[dict]:
        evicted: dict[tuple, int] = {}
        for e in self.updates:
            key = (e["role"], e["layer_idx"])
            evicted[key] = evicted.get(key, 0) + e["tokens_evicted_now"]
        fields = ("role", "layer_idx", "kind", "logical_length", "slots_allocated", "slots_live", "slots_masked",
                  "bytes_held", "quantized_tokens", "residual_tokens", "packed_bytes", "residual_bytes", "device")
        return [{**{f: e[f] for f in fields}, "tokens_evicted": evicted[(e["role"], e["layer_idx"])]}
                for e in self.final_layers()]  # fmt: skip

    def summary(self) -> dict:
        updates = self.updates
        final = self.final_layers()
        allocated = sum(e["slots_allocated"] for e in final)
        masked = sum(e["slots_masked"] for e in final)
        byte_steps = self.bytes_by_step()
        return {
            "steps": len(byte_steps),
            "peak_bytes": max((e["cache_bytes"] for e in updates), default=0),
            "final_bytes": byte_steps[-1] if byte_steps else 0,
            "slots_allocated": allocated,
            "slots_live": sum(e["slots_live"] for e in final),
            "slots_masked": masked,
            "waste_pct": round(100.0 * masked / allocated, 2) if allocated else 0.0,
            "tokens_evicted": sum(e["tokens_evicted_now"] for e in updates),
            "crops": len(self.crops),
            "flushes": len(self.flushes),
            "transfers": len(self.transfers),
            "transfer_bytes": sum(e["bytes"] for e in self.transfers),
            "tokens_per_s": self.meta.get("tokens_per_s"),
        }

    def to_pandas(self, kind: str = "update"):
        """Events of one type as a DataFrame (pandas is optional)."""
        try:
            import pandas as pd
        except ImportError as err:  # pragma: no cover - pandas ships with jupyterlab here
            raise ImportError("Trace.to_pandas needs pandas: pip install pandas") from err
        return pd.DataFrame(self.of_type(kind))

    # -- persistence ------------------------------------------------------------------------------------------
    def to_dict(self) -> dict:
        return {"kvlab_trace": SCHEMA_VERSION, "meta": self.meta, "events": self.events}

    def save(self, path: str | Path) -> Path:
        path = Path(path)
        path.write_text(json.dumps(self.to_dict(), indent=1, default=str))
        return path

    @classmethod
    def from_dict(cls, data, source: str = "trace") -> Trace:
        if not isinstance(data, dict) or "kvlab_trace" not in data:
            raise TraceFormatError(f"{source} is not a kvlab trace: expected a JSON object with a 'kvlab_trace' key.")
        version = data["kvlab_trace"]
        if version != SCHEMA_VERSION:
            raise TraceFormatError(
                f"{source} has trace schema version {version!r}; this kvlab reads version {SCHEMA_VERSION}."
            )
        events = data.get("events")
        if not isinstance(events, list) or any(not isinstance(e, dict) or e.get("type") not in EVENT_TYPES for e in events):
            raise TraceFormatError(f"{source}: 'events' must be a list of objects whose 'type' is one of {EVENT_TYPES}.")
        return cls(events, data.get("meta") or {})

    @classmethod
    def load(cls, path: str | Path) -> Trace:
        path = Path(path)
        try:
            data = json.loads(path.read_text())
        except json.JSONDecodeError as err:
            raise TraceFormatError(f"{path} does not parse as JSON ({err.msg} at line {err.lineno}); "
                                   "a kvlab trace is the JSON written by Trace.save().") from err  # fmt: skip
        return cls.from_dict(data, source=str(path))
