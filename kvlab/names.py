"""How kvlab names a model and a dtype in traces, tables and the explorer: one spelling everywhere.

No torch here: both read attributes of objects the caller already has.
"""

from __future__ import annotations


def model_name(model) -> str:
    """The name `kvlab.load` gave a model ("smollm2", a path, a hub id), else its config's model type."""
    return getattr(model, "kvlab_name", model.config.model_type)


def dtype_name(dtype) -> str:
    """A torch dtype without its module prefix: torch.float32 -> "float32"."""
    return str(dtype).replace("torch.", "")
