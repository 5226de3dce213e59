"""What others published, that kvlab's measurements are set against: data only, nothing here is measured.

- `GUIDE`: the comparison table of transformers' cache guide ("KV cache strategies"), in the guide's words. The
  notebooks' table (`kvlab.measure.guide_table`) re-measures each cell; `kvlab bench` prints it next to its rows.
- `PUBLISHED`: results placed on the frontier plot as *external references*, never as kvlab measurements. Only
  what the sources state is recorded: a memory ratio where the source gives one, and the quality claim in words
  (no invented quality numbers); the plot shows its label and claim in the reader's language.
"""

from __future__ import annotations

from kvlab.i18n import N_

# The guide's table (transformers docs, "Cache strategies"), as published: three caches, four properties. The
# words stay English here (they are what kvlab compares and records); `kvlab.measure.guide_table.word` shows one
# in the reader's language, in the pt-BR guide's own words (Cache Dinâmica, Sim, Médio...).
GUIDE = {
    "dynamic": {
        "cache": N_("Dynamic Cache"),
        "sliding layers": N_("Yes"),
        "offloading": N_("Yes"),
        "torch.compile": N_("No"),
        "memory": N_("Medium"),
    },
    "static": {
        "cache": N_("Static Cache"),
        "sliding layers": N_("Yes"),
        "offloading": N_("Yes"),
        "torch.compile": N_("Yes"),
        "memory": N_("High"),
    },
    "quantized": {
        "cache": N_("Quantized Cache"),
        "sliding layers": N_("No"),
        "offloading": N_("No"),
        "torch.compile": N_("No"),
        "memory": N_("Low"),
    },
}

PUBLISHED = [
    {
        "label": N_("HF blog: quanto int4"),
        "source": "Hugging Face blog, 'Unlocking Longer Generation with Key-Value Cache Quantization' (2024)",
        "memory_ratio": 4 / 16,  # nominal: 4-bit values instead of fp16 (scales and residual not counted)
        "claim": N_("int4 quality about the same as fp16 on LongBench"),
    },
    {
        "label": N_("HF blog: quanto int2"),
        "source": "Hugging Face blog, 'Unlocking Longer Generation with Key-Value Cache Quantization' (2024)",
        "memory_ratio": 2 / 16,  # nominal
        "claim": N_("int2 degrades quality on LongBench"),
    },
    {
        "label": N_("KIVI 2-bit"),
        "source": "Liu et al., 'KIVI: A Tuning-Free Asymmetric 2bit Quantization for KV Cache' (ICML 2024)",
        "memory_ratio": 1 / 2.6,  # the paper's peak-memory reduction, model weights included
        "claim": N_("2-bit KV cache cuts peak memory 2.6x at near-equal quality"),
    },
]
