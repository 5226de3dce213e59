"""A `Trace` is the record of one cache's life: every layer update, crop, flush and offload.

Events are plain dicts (JSON-ready, pandas-ready) with a `type`: "update" (one layer update: its step, op, tokens,
seconds (null where a watched `DynamicCache` was read after its forward), `cache_bytes` after it, every `LayerState`
field and the work counters; op "outside" when only the bytes a cache holds beside its layers changed), "crop" (with
the linear-attention states it put back), "flush" (a quantized layer moved its residual into quantized storage) and
"transfer" (an offloaded layer moved); `meta` says what produced it.
`Trace.load` reads every schema version: an older file's names get today's, and counters it never recorded are null,
never a made-up zero. `summary()` and `layer_table()` are a dict and a list of dicts that print as aligned tables.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path

from kvlab.errors import KvlabUserError
from kvlab.i18n import N_, _, marks
from kvlab.recording.layer_state import STATE_FIELDS
from kvlab.recording.slots import SLOT_FIELDS, waste_pct
from kvlab.recording.work import WORK_FIELDS, input_signatures, work_by_step
from kvlab.units import human_bytes

SCHEMA_VERSION = 6  # 6: an update's `seconds` may be null (a watched DynamicCache read after its forward)
READABLE_VERSIONS = (1, 2, 3, 4, 5, 6)  # older versions are translated on load
# The fields the next version renamed, per older version: {version: {event type: {old name: new name}}}
RENAMED_FIELDS = {1: {"update": {"kind": "layer_kind"}}}
# The meta keys the next version renamed, per older version: {version: {old name: new name}}
RENAMED_META = {3: {"cache": "cache_kind"}}
# The fields the next version added, per older version: {version: {event type: fields}}; null in older files
ADDED_FIELDS: dict[int, dict[str, tuple[str, ...]]] = {
    2: {"update": WORK_FIELDS},
    4: {"crop": ("recurrent_states_restored",)},
}
EVENT_TYPES = ("update", "crop", "flush", "transfer")
# A layer's quantized storage: zero in every layer of every other cache kind, so a table leaves them out there
QUANTIZED_FIELDS = ("quantized_tokens", "residual_tokens", "packed_bytes", "residual_bytes")


class TraceFormatError(KvlabUserError, ValueError):
    """A file that is not a kvlab trace (or not a version this kvlab reads)."""


def _is_number(value) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool)


def shown(field: str, value) -> str:
    """One value of a summary or layer table as shown: bytes in binary units ("225.0 KiB"), counts grouped ("1,410"),
    shares and rates to one decimal, in the language's marks; "-" where nothing was recorded."""
    if value is None:
        return "-"
    if not _is_number(value):
        return str(value)
    if "bytes" in field.split("_"):  # peak_bytes, bytes_held, packed_bytes...
        return human_bytes(value, decimals=1, localized=True)
    return marks(f"{value:,.1f}" if isinstance(value, float) else f"{value:,}")


def text_table(rows: list[list[str]], right: list[bool]) -> str:
    """`rows` of cells in aligned columns, two spaces apart; a column in `right` is right-aligned (numbers)."""
    widths = [max(len(row[i]) for row in rows) for i in range(len(right))]
    return "\n".join(
        "  ".join(cell.rjust(w) if r else cell.ljust(w) for cell, w, r in zip(row, widths, right)).rstrip()
        for row in rows
    )


def known_sum(values):
    """The sum of counts, or None when one is None: unknown rather than too small."""
    total = 0
    for value in values:
        if value is None:
            return None
        total += value
    return total


class TraceSummary(dict):
    """`Trace.summary()`: a plain dict that prints as a two-column table, one field a line."""

    def __repr__(self) -> str:
        return text_table([[field, shown(field, value)] for field, value in self.items()], [False, True])


class LayerTable(list):
    """`Trace.layer_table()`: a plain list of one dict per layer that prints as an aligned table."""

    def columns(self) -> list[str]:
        """Every field of the rows, in order, but those of quantized storage where no layer has any."""
        fields = list(dict.fromkeys(field for row in self for field in row))
        quantized = any(row.get(f) for row in self for f in QUANTIZED_FIELDS)
        return [f for f in fields if quantized or f not in QUANTIZED_FIELDS]

    def __repr__(self) -> str:
        if not self:
            return "[]"
        columns = self.columns()
        right = [all(_is_number(row.get(c)) for row in self if row.get(c) is not None) for c in columns]
        cells = [[shown(c, row.get(c)) for c in columns] for row in self]
        return text_table([columns, *cells], right)


def update_event(values: tuple) -> dict:
    """The dict of one "update" event from the tuple `Recorder.record_state` kept: its `LayerState`'s values,
    `work` (a tuple in `WORK_FIELDS` order, or a dict) and `extra` (a cache's own fields, or None)."""
    step, layer_idx, role, op, tokens_added, evicted_now, seconds, cache_bytes, state, work, extra = values
    event = {
        "type": "update",
        "step": step,
        "layer_idx": layer_idx,
        "role": role,
        "op": op,
        "tokens_added": tokens_added,
        "tokens_evicted_now": evicted_now,
        "seconds": seconds,
        "cache_bytes": cache_bytes,
    }
    event.update(zip(STATE_FIELDS, state))
    event.update(zip(WORK_FIELDS, work) if isinstance(work, tuple) else work)
    if extra:
        event.update(extra)
    return event


class Trace:
    """Every event of one cache's life, in order, and the views derived from them.

    An update is kept as the tuple it was recorded with and becomes its dict only when `events` is read: building
    dicts inside the decode loop was most of what watching cost."""

    def __init__(self, events: list[dict] | None = None, meta: dict | None = None):
        self._events: list[dict] = list(events or [])
        self._unbuilt: list = []  # events recorded since `events` was last read: dicts, or update_event's tuples
        self.meta: dict = dict(meta or {})
        # The recorder's deferred updates (`Recorder.defer`), logged before the events are read or one is added
        self.before_read: Callable[[], None] | None = None

    @property
    def events(self) -> list[dict]:
        if self.before_read is not None:
            self.before_read()
        if self._unbuilt:
            self._events.extend(e if type(e) is dict else update_event(e) for e in self._unbuilt)
            self._unbuilt.clear()
        return self._events

    @events.setter
    def events(self, events: list[dict]) -> None:
        self._unbuilt.clear()
        self._events = events

    @property
    def is_empty(self) -> bool:
        """No event recorded yet, the deferred ones counted: asked without building any event's dict."""
        if self.before_read is not None:
            self.before_read()
        return not (self._events or self._unbuilt)

    @property
    def recorded(self) -> int:
        """How many events were recorded, built or not: read without logging the recorder's deferred updates."""
        return len(self._events) + len(self._unbuilt)

    def record(self, event: dict) -> None:
        """Append one event (a crop, flush or transfer dict)."""
        if self.before_read is not None:
            self.before_read()
        self._unbuilt.append(event)

    def record_update(self, values: tuple) -> None:
        """Append one update as `update_event`'s tuple, built into its dict when `events` is next read."""
        self._unbuilt.append(values)

    def __repr__(self) -> str:
        s = self.summary()
        return (
            f"Trace({len(self.events)} events, {s['steps']} steps, peak {s['peak_bytes']:,} B, "
            f"final {s['final_bytes']:,} B)"
        )

    # -- selections -------------------------------------------------------------------------------------------
    def of_type(self, event_type: str) -> list[dict]:
        return [e for e in self.events if e["type"] == event_type]

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
                **{f: known_sum(c[f] for c in current.values()) for f in SLOT_FIELDS},
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

    def step_seconds(self) -> list[float]:
        """Wall seconds of each step but the last: from its start (its first layer update, or the start of the forward
        kvlab read after it ended) to the next step's (one reading)."""
        starts = self.meta.get("step_started_s") or []
        return [b - a for a, b in zip(starts, starts[1:]) if a is not None and b is not None]

    def work_by_step(self) -> list[dict]:
        """Per forward: tokens, key slots attended, attention FLOPs, packing calls, bytes offloaded."""
        return work_by_step(self)

    def input_signatures(self) -> list[tuple]:
        """The distinct attention shapes of the run: what a compiler would trace again."""
        return input_signatures(self)

    def layer_table(self) -> LayerTable:
        """One dict per layer, as the cache ended: what it holds, its slots and bytes, the tokens it evicted."""
        evicted: dict[tuple, int | None] = {}
        for e in self.updates:
            key = (e["role"], e["layer_idx"])
            evicted[key] = known_sum((evicted.get(key, 0), e["tokens_evicted_now"]))
        fields = (
            "role",
            "layer_idx",
            "layer_kind",
            "logical_length",
            "slots_allocated",
            "slots_live",
            "slots_masked",
            "bytes_held",
            *QUANTIZED_FIELDS,
            "device",
        )
        return LayerTable(
            {**{f: e[f] for f in fields}, "tokens_evicted": evicted[(e["role"], e["layer_idx"])]}
            for e in self.final_layers()
        )

    def summary(self) -> TraceSummary:
        """The whole cache in one dict: steps, peak and final bytes, slots, waste %, evictions, events, tokens/s."""
        updates = self.updates
        final = self.final_layers()
        allocated = known_sum(e["slots_allocated"] for e in final)
        masked = known_sum(e["slots_masked"] for e in final)
        byte_steps = self.bytes_by_step()
        return TraceSummary(
            steps=len(byte_steps),
            peak_bytes=max((e["cache_bytes"] for e in updates), default=0),
            final_bytes=byte_steps[-1] if byte_steps else 0,
            slots_allocated=allocated,
            slots_live=known_sum(e["slots_live"] for e in final),
            slots_masked=masked,
            waste_pct=None if allocated is None or masked is None else waste_pct(masked, allocated),
            tokens_evicted=known_sum(e["tokens_evicted_now"] for e in updates),
            crops=len(self.crops),
            flushes=len(self.flushes),
            transfers=len(self.transfers),
            transfer_bytes=sum(e["bytes"] for e in self.transfers),
            tokens_per_s=self.meta.get("tokens_per_s"),
        )

    def to_pandas(self, event_type: str = "update"):
        """Events of one type as a DataFrame (pandas is optional)."""
        try:
            import pandas as pd
        except ImportError as err:  # pragma: no cover - pandas ships with jupyterlab here
            raise ImportError(_("Trace.to_pandas needs pandas: pip install pandas")) from err
        return pd.DataFrame(self.of_type(event_type))

    # -- persistence ------------------------------------------------------------------------------------------
    def to_dict(self) -> dict:
        return {"kvlab_trace": SCHEMA_VERSION, "meta": self.meta, "events": self.events}

    def save(self, path: str | Path) -> Path:
        """Write the trace as JSON, atomically: a failed save leaves the file that was there loadable."""
        from kvlab.atomic import write_text

        return write_text(path, json.dumps(self.to_dict(), indent=1, default=str))

    @classmethod
    def from_dict(cls, data, source: str = "trace") -> Trace:
        """A trace from its JSON form, every event checked against `EVENT_FIELDS`; anything else is refused in one
        line naming what is valid."""
        if not isinstance(data, dict) or "kvlab_trace" not in data:
            raise TraceFormatError(
                _("{source} is not a kvlab trace: expected a JSON object with a 'kvlab_trace' key.").format(
                    source=source
                )
            )
        version = data["kvlab_trace"]
        if not isinstance(version, int) or isinstance(version, bool) or version not in READABLE_VERSIONS:
            raise TraceFormatError(
                _(
                    "{source} has trace schema version {version}; this kvlab reads versions {versions} and {last}."
                ).format(
                    source=source,
                    version=_short(version),
                    versions=", ".join(map(str, READABLE_VERSIONS[:-1])),
                    last=READABLE_VERSIONS[-1],
                )
            )
        meta = data.get("meta")
        if meta is not None and not isinstance(meta, dict):
            raise TraceFormatError(
                _("{source}: 'meta' must be a JSON object (model, cache_kind, options...); got {found}.").format(
                    source=source, found=type(meta).__name__
                )
            )
        events = data.get("events")
        if not isinstance(events, list):
            raise TraceFormatError(
                _("{source}: 'events' must be a list of event objects; got {found}.").format(
                    source=source, found=type(events).__name__
                )
            )
        events = _upgrade(events, version)
        for index, event in enumerate(events):
            problem = _event_problem(event)
            if problem is not None:
                raise TraceFormatError(
                    _("{source}: event {index} {problem}.").format(source=source, index=index, problem=problem)
                )
        return cls(events, _upgrade_meta(meta or {}, version))

    @classmethod
    def load(cls, path: str | Path) -> Trace:
        path = Path(path)
        try:
            content = path.read_bytes()
        except OSError as err:
            raise TraceFormatError(
                _("{path} cannot be read ({error}).").format(path=path, error=err.strerror or type(err).__name__)
            ) from None
        return parse_trace(content, str(path))


NOT_TEXT = N_("{path} is not text (not UTF-8); a kvlab trace is the JSON written by Trace.save().")
NOT_JSON = N_(
    "{path} does not parse as JSON ({error} at line {line}); a kvlab trace is the JSON written by Trace.save()."
)


def parse_trace(content: bytes, source: str, not_text: str = NOT_TEXT, not_json: str = NOT_JSON) -> Trace:
    """A trace from a file's bytes, refused in one line (TraceFormatError) when they are not UTF-8 text, not JSON,
    nested too deeply or not a trace. `not_text` and `not_json` are the refusals' English messages."""
    try:
        text = bytes(content).decode("utf-8")
    except UnicodeDecodeError:
        raise TraceFormatError(_(not_text).format(path=source)) from None
    try:
        data = json.loads(text)
    except json.JSONDecodeError as err:
        raise TraceFormatError(_(not_json).format(path=source, error=err.msg, line=err.lineno)) from None
    except RecursionError:
        raise TraceFormatError(_("{path} is nested too deeply to be a kvlab trace.").format(path=source)) from None
    return Trace.from_dict(data, source=source)


# The fields of each event type and their JSON types: English message ids, shown translated in a refusal.
_INT, _NUMBER, _STR = N_("an integer"), N_("a number"), N_("a string")
_BOOL, _INTS = N_("true or false"), N_("a list of integers")
_COUNT = N_("an integer, or null where an older kvlab did not count it")
_SLOTS = N_("an integer, or null where kvlab cannot read the layer's slots")
_SECONDS = N_("a number, or null where kvlab read the layer after its forward instead of timing the update")
_NULLABLE = {_COUNT: _INT, _SLOTS: _INT, _SECONDS: _NUMBER}  # each with what it is when not null
_COMMON = {"step": _INT, "role": _STR}
_LAYER_STATE = {
    "layer_kind": _STR,
    "logical_length": _SLOTS,
    "slots_allocated": _SLOTS,
    "slots_live": _SLOTS,
    "slots_masked": _SLOTS,
    "tokens_evicted": _SLOTS,
    "bytes_held": _INT,
    "device": _STR,
    "quantized_tokens": _INT,
    "residual_tokens": _INT,
    "packed_bytes": _INT,
    "residual_bytes": _INT,
}
EVENT_FIELDS = {
    "update": {
        **_COMMON,
        "layer_idx": _INT,
        "op": _STR,
        "tokens_added": _INT,
        "tokens_evicted_now": _SLOTS,
        "seconds": _SECONDS,
        "cache_bytes": _INT,
        **_LAYER_STATE,
        **dict.fromkeys(WORK_FIELDS, _COUNT),
    },
    "crop": {
        **_COMMON,
        "n": _INT,
        "past_recording": _BOOL,
        "lengths_before": _INTS,
        "lengths_after": _INTS,
        "recurrent_states_restored": _COUNT,  # since schema 5 (transformers 5.25's linear-attention rollback)
    },
    "flush": {**_COMMON, "layer_idx": _INT, "residual_tokens_flushed": _INT, "quantized_tokens": _INT},
    "transfer": {
        **_COMMON,
        "layer_idx": _INT,
        "direction": _STR,
        "bytes": _INT,
        "seconds": _NUMBER,
        "src": _STR,
        "dst": _STR,
        "moved": _BOOL,
    },
}


def _is(value, expected: str) -> bool:
    if expected in _NULLABLE:
        return value is None or _is(value, _NULLABLE[expected])
    if expected == _INT:
        return isinstance(value, int) and not isinstance(value, bool)
    if expected == _NUMBER:
        return isinstance(value, (int, float)) and not isinstance(value, bool)
    if expected == _STR:
        return isinstance(value, str)
    if expected == _BOOL:
        return isinstance(value, bool)
    return isinstance(value, list) and all(_is(v, _INT) for v in value)


def _short(value) -> str:
    text = repr(value)
    return text if len(text) <= 40 else text[:37] + "..."


def _event_problem(event) -> str | None:
    """What is wrong with one event (None when it has every field of its type, each of the right JSON type)."""
    if not isinstance(event, dict):
        return _("is {found}, not an object").format(found=type(event).__name__)
    event_type = event.get("type")
    if not isinstance(event_type, str) or event_type not in EVENT_FIELDS:
        return _("has type {found}; valid types: {valid}").format(
            found=_short(event_type), valid=", ".join(EVENT_TYPES)
        )
    fields = EVENT_FIELDS[event_type]
    missing = [name for name in fields if name not in event]
    if missing:
        return _("({event_type}) lacks {missing}; a {event_type} event has {fields}").format(
            event_type=event_type, missing=", ".join(missing), fields=", ".join(fields)
        )
    for name, expected in fields.items():
        if not _is(event[name], expected):
            return _("({event_type}) has {name}={found}; it must be {expected}").format(
                event_type=event_type, name=name, found=_short(event[name]), expected=_(expected)
            )
    return None


def _upgrade(events: list, version: int) -> list:
    """The events of a `version` file with today's field names; a non-event is left for `_event_problem`."""
    for old in range(version, SCHEMA_VERSION):
        renames, added = RENAMED_FIELDS.get(old, {}), ADDED_FIELDS.get(old, {})
        events = [_upgrade_event(e, renames, added) for e in events]
    return events


def _upgrade_event(event, renames: dict, added: dict):
    if not (isinstance(event, dict) and isinstance(event.get("type"), str)):
        return event
    event_type = event["type"]
    if event_type in renames:
        event = {renames[event_type].get(k, k): v for k, v in event.items()}
    if event_type in added:
        event = {**dict.fromkeys(added[event_type]), **event}
    return event


def _upgrade_meta(meta: dict, version: int) -> dict:
    """A `version` file's meta with today's key names, as a copy."""
    for old in range(version, SCHEMA_VERSION):
        renames = RENAMED_META.get(old, {})
        meta = {renames.get(k, k): v for k, v in meta.items()}
    return dict(meta)
