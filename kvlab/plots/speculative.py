"""Speculative decoding, forward by forward: drafted tokens accepted or rejected (cropped straight after the
verify forward that wrote them), and the cache length before and after the crop, the rollback a drop."""

from __future__ import annotations

import numpy as np
from matplotlib.figure import Figure

from kvlab.i18n import N_, _
from kvlab.plots._figure import legend_beside, subplots, tight_layout_fitted
from kvlab.plots.palette import CROPPED, LIVE
from kvlab.plots.palette import series as series_color


def plot_speculative_steps(result, title: str = N_("Speculative decoding: accepted and rolled-back drafts")) -> Figure:
    """From a `kvlab.measure.rollback.SpeculativeResult`: accepted/rejected drafts per forward (every forward the
    loop ran, one with no draft marked), and the cache length."""
    steps = result.steps
    fig, (bars, lengths) = subplots(1, 2, figsize=(11, 3.8))
    x = np.arange(len(steps)) + 2  # forward 1 is the prefill
    accepted = [s.accepted for s in steps]
    bars.bar(x, accepted, color=LIVE, label=_("accepted"))
    bars.bar(x, [s.rejected for s in steps], bottom=accepted, color=CROPPED, label=_("rejected (cropped)"))
    for forward, step in zip(x, steps):
        if not step.drafted:
            bars.annotate(_("no draft"), (forward, 0), textcoords="offset points", xytext=(0, 3), ha="center",
                          rotation=90, fontsize=7)  # fmt: skip
    bars.set_ylabel(_("drafted tokens"))
    bars.set_ylim(0, max((len(s.drafted) for s in steps), default=1) + 0.5)
    before = [s.cache_length_before_crop for s in steps]
    lengths.plot(x, before, "o--", color=series_color(1), label=_("after the verify forward"))
    after = [s.cache_length_after_crop for s in steps]
    lengths.plot(x, after, "s-", color=series_color(0), label=_("after crop(-rejected)"))
    lengths.set_ylabel(_("cache length (tokens)"))
    for ax in (bars, lengths):
        ax.set_xlabel(_("forward (1 = the prefill, not drawn)"))
        ax.set_xticks(x)
        legend_beside(ax, fontsize="small", frameon=False)
    return tight_layout_fitted(fig, grow=True, title=_(title))
