"""Every measurement kvlab makes, one module per concept, used by the notebooks, the plots and `kvlab bench`.
Data flows one way: caches -> trace -> `kvlab.measure` -> whatever shows the numbers (plots, bench, explorer,
notebooks); nothing here imports `kvlab.bench` or `kvlab.plots`.

- `text`: deterministic English text available offline (Python's own pydoc topics): the notebooks' prompts
  (`english_text`, `prompt_ids`) and the bench's seeded windows (`pydoc_text`, `token_windows`);
- `formula`: the textbook KV-cache size formula, to set next to measured bytes;
- `layer_lengths`: tokens seen, live and stored per layer at one step of a trace;
- `timing`: the one timing instrument: interleaved repeats, medians with their IQR, a bootstrap interval of
  each ratio and a verdict a sentence can quote; `DecodeClock` for a generation's prefill and decode steps;
- `latency`: time per new token against position, with and without a cache, beside the work of each forward;
- `decode_step`: one decode step against caches of different sizes (what masked slots cost in compute);
- `step_times`: per-step decode time of several caches, with a quantized cache's flush steps marked;
- `offload_time`: bytes an offloaded cache moves per step, its decode time, and a labelled PCIe estimate;
- `batching`: continuous batching (`generate_batch`) against one `generate` per request, with an interval;
- `paged`: a paged trace per forward and over the run: blocks in use / free / cached, fragmentation, queueing;
- `roofline`: memory bandwidth, weight bytes, and the decode speed they allow;
- `quality`: teacher forcing (one token per forward, or in two forwards where that is exact), greedy token
  agreement, logit KL divergence and perplexity of a cache against DynamicCache (or no cache); `sweep` for
  quantized configurations;
- `compiled`: `torch.compile` with a StaticCache: compile time, steady speed, graphs compiled per call;
- `residency`: the offload schedule in device order, the layers resident on the device and their bytes;
- `resilient`: a simulated accelerator of a given memory, for the cache guide's `resilient_generate` recipe on a CPU;
- `guide_table`: the cache guide's comparison table, each cell re-measured;
- `published`: data, not measurements: the guide's table as published and external reference points.
"""
