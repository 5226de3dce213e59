"""Measurements the notebooks make, kept out of the notebooks so they are tested and reusable.

- `text`: deterministic English text available offline (Python's own pydoc topics) and prompts built from it;
- `formula`: the textbook KV-cache size formula, to set next to measured bytes;
- `latency`: time per new token against position, with and without a cache;
- `quality`: greedy token agreement, logit KL divergence and perplexity of a cache against DynamicCache;
- `resilient`: `resilient_generate` from the cache guide, with a simulated memory budget on a CPU.
"""
