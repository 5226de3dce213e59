"""Every measurement kvlab makes, one module per concept, used by the notebooks, the plots and `kvlab bench`.
Data flows one way: caches -> trace -> `kvlab.measure` -> whatever shows the numbers (plots, bench, explorer,
notebooks); nothing here imports `kvlab.bench` or `kvlab.plots`.

- `text`: deterministic English text available offline (Python's own pydoc topics): the notebooks' prompts
  (`english_text`, `prompt_ids`) and the bench's seeded windows (`pydoc_text`, `token_windows`);
- `formula`: the textbook KV-cache size formula, to set next to measured bytes;
- `layer_lengths`: tokens seen, live and stored per layer at one step of a trace;
- `latency`: time per new token against position, with and without a cache;
- `timing`: a generation's prefill and decode speed (`DecodeClock`), interleaved repeats, medians;
- `roofline`: memory bandwidth, weight bytes, and the decode speed they allow;
- `quality`: teacher forcing, greedy token agreement, logit KL divergence and perplexity of a cache against
  DynamicCache (or no cache); `sweep` for quantized configurations;
- `quality_chunked`: the same rows with teacher forcing in two forwards, for caches where that is exact;
- `compiled`: `torch.compile` with a StaticCache: compile time, steady speed, graphs compiled per call;
- `residency`: the offload schedule in device order, the layers resident on the device and their bytes;
- `resilient`: `resilient_generate` from the cache guide, with a simulated memory budget on a CPU;
- `guide_table`: the cache guide's comparison table, each cell re-measured;
- `published`: data, not measurements: the guide's table as published and external reference points.
"""
