"""Speculative decoding, step by step: drafted tokens accepted or rolled back, and the cache length around it.

Each verification forward writes keys and values for every drafted token; the rejected ones are cropped
straight away. The bars show the split per step; the line shows the cache length right before and after the
crop, so the rollback is visible as a drop.
"""

from __future__ import annotations

import matplotlib.pyplot as plt
import numpy as np
from matplotlib.figure import Figure

from kvlab.i18n import N_, _


def plot_speculative_steps(result, title: str = N_("Speculative decoding: accepted and rolled-back drafts")) -> Figure:
    """From a `kvlab.measure.rollback.SpeculativeResult`: accepted/rejected drafts per step, and the cache length."""
    steps = result.steps
    with plt.ioff():
        fig, (bars, lengths) = plt.subplots(1, 2, figsize=(10, 3.8))
    plt.close(fig)  # shown once, by its return value; no pyplot state left open
    x = np.arange(len(steps))
    accepted = [s.accepted for s in steps]
    bars.bar(x, accepted, color="#41ab5d", label=_("accepted"))
    bars.bar(x, [s.rejected for s in steps], bottom=accepted, color="#de2d26", label=_("rejected (cropped)"))
    bars.set_xlabel(_("verification step"))
    bars.set_ylabel(_("drafted tokens"))
    bars.set_ylim(0, max((len(s.drafted) for s in steps), default=1) * 1.35)  # headroom for the legend
    bars.legend(fontsize="small", loc="upper left", ncol=2)
    before = [s.cache_length_before_crop for s in steps]
    after = [s.cache_length_after_crop for s in steps]
    lengths.plot(x, before, "o-", color="#de2d26", label=_("after the verify forward"))
    lengths.plot(x, after, "s-", color="#08519c", label=_("after crop(-rejected)"))
    lengths.set_xlabel(_("verification step"))
    lengths.set_ylabel(_("cache length (tokens)"))
    lengths.legend(fontsize="small")
    fig.suptitle(_(title))
    fig.tight_layout()
    return fig
