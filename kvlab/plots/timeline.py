"""The offloading schedule drawn as a timeline: which layer is on the accelerator when.

An offloaded cache keeps layers on the CPU and, while layer i computes, prefetches layer i+1 and offloads
layer i afterwards. The x axis is the order in which the cache saw events (updates and moves), not wall time,
so the picture is the same on any machine; a bar shows a layer resident on the compute device.
"""

from __future__ import annotations

from matplotlib.figure import Figure
from matplotlib.patches import Patch
from matplotlib.ticker import MaxNLocator

from kvlab.plots._figure import subplots
from kvlab.trace import Trace


def residency(trace: Trace, steps: tuple[int, int] | None = None) -> list[dict]:
    """Intervals during which each layer is resident on the compute device, in event order.

    Returns [{"layer_idx", "start", "end", "step"}]: `start`/`end` index the events of `schedule`.
    Intervals still resident when the window ends carry "open": True (the last layer prefetches the first one
    for the next step); a layer never offloaded in the window (a sliding layer with `offload_only_non_sliding`)
    is resident throughout and has "never_offloaded": True.
    """
    events = schedule(trace, steps)
    offloaded = {e["layer_idx"] for e in events if e["type"] == "transfer" and e["direction"] == "offload"}
    open_at: dict[int, int] = {}
    intervals = []
    for i, e in enumerate(events):
        layer = e["layer_idx"]
        if layer not in offloaded:
            open_at.setdefault(layer, 0)
        elif e["type"] == "update" and layer not in open_at:
            open_at[layer] = i  # created (prefill) or prefetched before the window
        elif e["type"] == "transfer" and e["direction"] == "prefetch" and layer not in open_at:
            open_at[layer] = i
        elif e["type"] == "transfer" and e["direction"] == "offload" and layer in open_at:
            intervals.append({"layer_idx": layer, "start": open_at.pop(layer), "end": i, "step": e["step"]})
    for layer, start in open_at.items():
        intervals.append(
            {
                "layer_idx": layer,
                "start": start,
                "end": len(events) - 1,
                "step": events[-1]["step"],
                "open": True,
                "never_offloaded": layer not in offloaded,
            }
        )
    return sorted(intervals, key=lambda r: (r["start"], r["layer_idx"]))


def effective_moves(trace: Trace) -> list[dict]:
    """The transfers that change where a layer lives: a prefetch of a layer already on the device is a no-op.

    transformers calls `prefetch(i + 1)` before every layer's update and it looks for the *next offloaded*
    layer, so with `offload_only_non_sliding` each sliding layer asks again for the same full layer. On an
    accelerator the repeated calls copy nothing; kvlab logs every call, and this keeps the real moves.
    """
    resident: set[int] = set()
    seen: set[int] = set()
    moves = []
    for e in trace.events:
        if e["type"] == "update":
            if e["layer_idx"] not in seen:
                resident.add(e["layer_idx"])  # a layer is created on the device
                seen.add(e["layer_idx"])
            continue
        if e["type"] != "transfer":
            continue
        layer = e["layer_idx"]
        first_time = layer not in seen  # its update is logged after this offload: it was created on the device
        seen.add(layer)
        if e["direction"] == "prefetch" and layer not in resident:
            resident.add(layer)
            moves.append(e)
        elif e["direction"] == "offload" and (layer in resident or first_time):
            resident.discard(layer)
            moves.append(e)
    return moves


def schedule(trace: Trace, steps: tuple[int, int] | None) -> list[dict]:
    """Updates and transfers in the order they happened on the device.

    The cache logs a layer's update after the update returns, by which time that layer has already been
    offloaded: the log reads [prefetch i+1, offload i, update i]; the device saw [prefetch i+1, update i,
    offload i]. The update is moved back before its own offload.
    """
    kept: list[dict] = []
    real = {id(e) for e in effective_moves(trace)}
    for e in trace.events:
        if e["type"] == "transfer" and id(e) not in real:
            continue  # a prefetch of a layer already on the device
        if e["type"] not in ("update", "transfer") or e.get("role", "self") != "self":
            continue
        if steps is not None and not steps[0] <= e["step"] <= steps[1]:
            continue
        previous = kept[-1] if kept else None
        if (
            e["type"] == "update"
            and previous is not None
            and previous["type"] == "transfer"
            and previous["direction"] == "offload"
            and previous["layer_idx"] == e["layer_idx"]
            and previous["step"] == e["step"]
        ):
            kept.insert(len(kept) - 1, e)
        else:
            kept.append(e)
    return kept


def plot_timeline(trace: Trace, steps: tuple[int, int] | None = (1, 2), title: str | None = None) -> Figure:
    """Per layer (rows): resident intervals as bars, prefetches ▲, offloads ▼, updates as dots.

    `steps` picks a window of steps (default: two decode steps) so individual moves stay readable.
    """
    events = schedule(trace, steps)
    fig, ax = subplots(figsize=(9, 0.22 * max(e["layer_idx"] for e in events) + 2.5) if events else (9, 3))
    for r in residency(trace, steps):
        colour = "tab:orange" if r.get("never_offloaded") else "tab:blue"
        ax.barh(r["layer_idx"], r["end"] - r["start"], left=r["start"], height=0.6, color=colour, alpha=0.35)
    styles = {"prefetch": ("^", "tab:green"), "offload": ("v", "tab:red")}
    for direction, (marker, colour) in styles.items():
        xs = [i for i, e in enumerate(events) if e["type"] == "transfer" and e["direction"] == direction]
        layers = [events[i]["layer_idx"] for i in xs]
        ax.scatter(xs, layers, marker=marker, color=colour, s=22, label=direction, zorder=3)
    xs = [i for i, e in enumerate(events) if e["type"] == "update"]
    ax.scatter(xs, [events[i]["layer_idx"] for i in xs], marker="o", color="k", s=8, label="update", zorder=3)
    for i in range(1, len(events)):
        if events[i]["step"] != events[i - 1]["step"]:
            ax.axvline(i - 0.5, color="grey", ls=":", lw=1)
    handles, _ = ax.get_legend_handles_labels()
    handles += [
        Patch(color="tab:blue", alpha=0.35, label="resident (offloaded between uses)"),
        Patch(color="tab:orange", alpha=0.35, label="resident (never offloaded)"),
    ]
    ax.yaxis.set_major_locator(MaxNLocator(integer=True))
    ax.invert_yaxis()
    ax.set_xlabel("event order (dotted lines: step boundaries)")
    ax.set_ylabel("layer")
    ax.legend(handles=handles, fontsize=7, loc="upper right", ncol=2)
    ax.set_title(title or "Offload / prefetch timeline")
    fig.tight_layout()
    return fig
