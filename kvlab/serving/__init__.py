"""Serving many requests: a workload of real requests (`kvlab/data/requests/`), what each cache layout reserves,
and the paged kind's runner (`model.generate_batch` inside `kvlab.watch`).

    from kvlab.serving import load_workload, layout_rows, generate_paged
    workload = load_workload(tokenizer)                 # prompt token ids, chat template applied
    rows = layout_rows(lengths, bytes_per_token, block_sizes=(4, 16, 64, 256))
    result = generate_paged(model, tokenizer, {"page_size": 16, "requests": 4}, 24)   # a RunResult, its trace paged

The paged cache itself is instrumented in `kvlab.caches.paged`.
"""

from kvlab.serving.batch_run import generate_paged, paged_requests, run_batch
from kvlab.serving.layouts import LAYOUTS, fits_in_budget, layout_rows, paged_blocks, request_lengths
from kvlab.serving.workload import WORKLOAD_PATH, Workload, load_workload

__all__ = [
    "LAYOUTS",
    "WORKLOAD_PATH",
    "Workload",
    "fits_in_budget",
    "generate_paged",
    "layout_rows",
    "load_workload",
    "paged_blocks",
    "paged_requests",
    "request_lengths",
    "run_batch",
]
