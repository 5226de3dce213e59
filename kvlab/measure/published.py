"""What others published, that kvlab's measurements are set against: data only, nothing here is measured.

- `GUIDE`: the comparison table of transformers' cache guide ("KV cache strategies"), in the guide's words. The
  notebooks' table (`kvlab.measure.guide_table`) re-measures each cell; `kvlab bench` prints it next to its rows.
- `PUBLISHED`: results placed on the frontier plot as *external references*, never as kvlab measurements. Only
  what the sources state is recorded: a memory ratio where the source gives one, and the quality claim in words
  (no invented quality numbers).
"""

from __future__ import annotations

# The guide's table (transformers docs, "Cache strategies"), as published: three caches, four properties.
GUIDE = {
    "dynamic": {
        "cache": "Dynamic Cache",
        "sliding layers": "Yes",
        "offloading": "Yes",
        "torch.compile": "No",
        "memory": "Medium",
    },
    "static": {
        "cache": "Static Cache",
        "sliding layers": "Yes",
        "offloading": "Yes",
        "torch.compile": "Yes",
        "memory": "High",
    },
    "quantized": {
        "cache": "Quantized Cache",
        "sliding layers": "No",
        "offloading": "No",
        "torch.compile": "No",
        "memory": "Low",
    },
}

PUBLISHED = [
    {
        "label": "HF blog: quanto int4",
        "source": "Hugging Face blog, 'Unlocking Longer Generation with Key-Value Cache Quantization' (2024)",
        "memory_ratio": 4 / 16,  # nominal: 4-bit values instead of fp16 (scales and residual not counted)
        "claim": "int4 quality about the same as fp16 on LongBench",
    },
    {
        "label": "HF blog: quanto int2",
        "source": "Hugging Face blog, 'Unlocking Longer Generation with Key-Value Cache Quantization' (2024)",
        "memory_ratio": 2 / 16,  # nominal
        "claim": "int2 degrades quality on LongBench",
    },
    {
        "label": "KIVI 2-bit",
        "source": "Liu et al., 'KIVI: A Tuning-Free Asymmetric 2bit Quantization for KV Cache' (ICML 2024)",
        "memory_ratio": 1 / 2.6,  # the paper's peak-memory reduction, model weights included
        "claim": "2-bit KV cache cuts peak memory 2.6x at near-equal quality",
    },
]
