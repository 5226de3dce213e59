"""Serving many requests: a workload of real requests (`kvlab/data/requests/`), and what each cache layout reserves.

    from kvlab.serving import load_workload, layout_rows
    workload = load_workload(tokenizer)                 # prompt token ids, chat template applied
    rows = layout_rows(lengths, bytes_per_token, block_sizes=(4, 16, 64, 256))

The paged cache itself is instrumented in `kvlab.caches.paged`.
"""

from kvlab.serving.layouts import LAYOUTS, fits_in_budget, layout_rows, paged_blocks, request_lengths
from kvlab.serving.workload import WORKLOAD_PATH, Workload, load_workload

__all__ = [
    "LAYOUTS",
    "WORKLOAD_PATH",
    "Workload",
    "fits_in_budget",
    "layout_rows",
    "load_workload",
    "paged_blocks",
    "request_lengths",
]
