"""Serving many requests: a workload of real chat requests, what each cache layout reserves, and the paged kind's
runner (`model.generate_batch` inside `kvlab.watch`); the paged cache itself is `kvlab.caches.paged`."""

from kvlab.serving.batch_run import generate_paged
from kvlab.serving.layouts import fits_in_budget, layout_rows, request_lengths
from kvlab.serving.workload import WORKLOAD_PATH, load_workload

__all__ = ["WORKLOAD_PATH", "fits_in_budget", "generate_paged", "layout_rows", "load_workload", "request_lengths"]
