"""Prompt presets (text files in `kvlab/data/prompts/`) and prompts of an exact token length.

A cache shows its structure only with enough tokens (Gemma 3's sliding layers wrap after 512), so "a 600-token
prompt" repeats a text to exactly 600 tokens, the same on every machine.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

from kvlab.i18n import N_, _

if TYPE_CHECKING:  # the explorer reads the presets before torch is imported
    import torch

PROMPTS_DIR = Path(__file__).resolve().parents[1] / "data" / "prompts"
FALLBACK = {
    "kv_cache_question": "Explain in two sentences why a language model keeps a cache of keys and values "
    "while it generates text.\n"
}
# The menu titles of the shipped presets: in English the file's name, a translation gives it words. The texts stay
# English: they are what the model is fed.
TITLES = (N_("kv_cache_question"), N_("python_execution_model"), N_("python_with_statement"), N_("story_opening"))


def presets() -> dict[str, str]:
    """{name: text} for every `kvlab/data/prompts/*.txt`, sorted by name (a built-in one when the folder is absent)."""
    found = {path.stem: path.read_text(encoding="utf-8") for path in sorted(PROMPTS_DIR.glob("*.txt"))}
    return found or dict(FALLBACK)


def title(name: str) -> str:
    """The menu title of preset `name`; a learner's own preset keeps its name (one called "live" is not a label)."""
    return _(name) if name in TITLES else name


def encode_prompt(tokenizer, text: str, target_tokens: int = 0, chat: bool = False) -> torch.Tensor:
    """Prompt ids, shape (1, n). With `target_tokens` > 0 the text is repeated or cut to exactly that many tokens."""
    from kvlab.recorded_run import encode

    if not text.strip():
        raise ValueError(_("the prompt is empty; type some text or choose a preset"))
    if target_tokens < 0:
        wrong = _("prompt length must be 0 (use the text as is) or a positive token count; got {target}")
        raise ValueError(wrong.format(target=target_tokens))
    ids = encode(tokenizer, text, chat=chat)  # (1, n)
    if target_tokens == 0:
        return ids
    repeats = -(-target_tokens // ids.shape[-1])  # ceil
    return ids.repeat(1, repeats)[:, :target_tokens]  # (1, target_tokens)
