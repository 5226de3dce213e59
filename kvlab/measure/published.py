"""What others published, that kvlab's measurements are set against: data only, nothing here is measured."""

from __future__ import annotations

from kvlab.i18n import N_

# The table of transformers' cache guide, as published. The words stay English (what kvlab compares and records);
# `kvlab.measure.guide_table.word` shows one in the reader's language.
_GUIDE_COLUMNS = ("cache", "sliding layers", "offloading", "torch.compile", "memory")
GUIDE = {
    kind: dict(zip(_GUIDE_COLUMNS, row, strict=True))
    for kind, row in {
        "dynamic": (N_("Dynamic Cache"), N_("Yes"), N_("Yes"), N_("No"), N_("Medium")),
        "static": (N_("Static Cache"), N_("Yes"), N_("Yes"), N_("Yes"), N_("High")),
        "quantized": (N_("Quantized Cache"), N_("No"), N_("No"), N_("No"), N_("Low")),
    }.items()
}

# External references (other models, benchmarks, hardware; memory relative to a 16-bit cache): on the frontier plot
# (`label`, `claim`) and in notebook 04's table of their own (`reference`, `memory_meaning`, `url`). Only what the
# sources state (a memory ratio where given, the quality claim in words), never invented quality numbers.
HF_BLOG = "https://huggingface.co/blog/kv-cache-quantization"
PUBLISHED = [
    {
        "label": N_("HF blog: quanto int4"),
        "source": "Hugging Face blog, 'Unlocking Longer Generation with Key-Value Cache Quantization' (2024)",
        "memory_ratio": 4 / 16,  # nominal: 4-bit values instead of fp16 (scales and residual not counted)
        "claim": N_("int4 quality about the same as fp16 on LongBench"),
        "reference": N_("HF blog: quanto int4 ≈ fp16 on LongBench"),
        "memory_meaning": N_("nominal: 4 of 16 bits per number"),
        "url": HF_BLOG,
    },
    {
        "label": N_("HF blog: quanto int2"),
        "source": "Hugging Face blog, 'Unlocking Longer Generation with Key-Value Cache Quantization' (2024)",
        "memory_ratio": 2 / 16,  # nominal
        "claim": N_("int2 degrades quality on LongBench"),
        "reference": N_("HF blog: quanto int2 degrades on LongBench"),
        "memory_meaning": N_("nominal: 2 of 16 bits per number"),
        "url": HF_BLOG,
    },
    {
        "label": N_("KIVI 2-bit"),
        "source": "Liu et al., 'KIVI: A Tuning-Free Asymmetric 2bit Quantization for KV Cache' (ICML 2024)",
        "memory_ratio": 1 / 2.6,  # the paper's peak-memory reduction, model weights included
        "claim": N_("2-bit KV cache cuts peak memory 2.6x at near-equal quality"),
        "reference": N_("KIVI 2-bit: ≈ same quality, 2.6× less peak memory (incl. weights)"),
        "memory_meaning": N_("peak memory of the whole run, model weights included (1 / 2.6)"),
        "url": "https://arxiv.org/abs/2402.02750",
    },
]
