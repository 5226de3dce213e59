"""matplotlib plots of traces: one module per kind of picture, each function takes a Trace (or several).

- `growth`: bytes against tokens, per layer kind (`plot_growth`, `bytes_by_layer_kind`, `total_bytes`);
- `occupancy`: layer × step heatmaps of live slots and evictions (`plot_occupancy`, `evictions`);
- `slots`: allocated vs live vs masked slots per step and per run (`plot_slots`, `plot_runs`, `run_slots`);
- `timeline`: the offload/prefetch schedule (`plot_timeline`, `residency`);
- `quantized`: packed vs residual bytes and the memory–quality frontier (`plot_split`, `plot_configs`,
  `plot_frontier`, `split_by_step`, `PUBLISHED_REFERENCES`);
- `png`: a figure as the PNG bytes of an `ipywidgets.Image`, for the explorer and `kvlab.live` (`png_bytes`).
Every function returns a matplotlib Figure and leaves no pyplot state open.
"""
