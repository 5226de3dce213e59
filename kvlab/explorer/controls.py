"""The explorer's input widgets, and which of them apply to which cache kind.

A learner should only see the options a cache takes: `options_for(cache_kind, backend)` is the rule (the kind's
options in `kvlab.explorer.kinds`: `kvlab.caches.KIND_OPTIONS`, plus past recording for DynamicCache kinds, minus
the group-wise options the fp8 backend does not take), and `Controls` shows or hides the option widgets to match.
Values that the rule allows but the backend refuses (quanto at 3 bits, axis 1 on quanto) stay selectable on
purpose: the message the explorer shows for them is part of the lesson.

A kind that brings its own requests ("paged (generate_batch)": continuous batching, whose options are page size,
requests and pool blocks) hides the prompt controls (`ExplorerKind.uses_prompt`).

A chat model's prompt goes through its chat template by default (an instruct model given the bare text answers
off-topic); the "chat template" box turns that off, and is unticked and disabled for a model without one.
Nothing here imports torch: the controls are drawn first, while the explorer imports it in the background.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING

import ipywidgets as widgets

from kvlab import _compat
from kvlab.cache_kinds import DEFAULT_QUANTIZED_BACKEND, PAGE_SIZES, PAGED_DEFAULTS, PAGED_OPTIONS, QUANTIZED_OPTIONS
from kvlab.cache_kinds import OPTION_NAMES as CACHE_OPTION_NAMES
from kvlab.explorer import kinds
from kvlab.explorer.kinds import kind_of
from kvlab.explorer.models import CHAT_TEMPLATES, DTYPES, LOADED, model_choices
from kvlab.explorer.prompts import presets, title
from kvlab.i18n import N_, _
from kvlab.serving.batch_run import MAX_REQUESTS

if TYPE_CHECKING:
    from kvlab.explorer.session import RunRequest

# The cache options, past recording (a run setting shown beside them), then the paged kind's own options.
OPTION_NAMES = (*CACHE_OPTION_NAMES, "past_recording", *PAGED_OPTIONS)
KINDS = tuple(kind.name for kind in kinds.KINDS)  # the cache menu's values: transformers' kinds, then paged
CUSTOM = N_("(your own text)")  # the preset dropdown's value for a typed prompt; shown as `_(CUSTOM)`
PROMPT_NAMES = ("preset", "chat", "prompt", "prompt_tokens")  # hidden for a kind that brings its own requests


def options_for(cache_kind: str, backend: str = DEFAULT_QUANTIZED_BACKEND) -> tuple[str, ...]:
    """Names of the option widgets that apply to a `cache_kind` (and quantization `backend`)."""
    names = kind_of(cache_kind).options
    if cache_kind == "quantized" and backend == "fp8":  # fp8 takes none of the group-wise options
        names = tuple(n for n in names if n not in QUANTIZED_OPTIONS)
    return names


def fitted(min_width: str = "") -> widgets.Layout:
    """A layout as wide as the widget's own text needs (ipywidgets' fixed widths cut a long label or button text with
    an ellipsis: pt-BR labels run longer than English ones), and at least `min_width`."""
    return widgets.Layout(width="max-content", min_width=min_width or None)


def _int_text(value: int, description: str) -> widgets.IntText:
    return widgets.IntText(
        value=value, description=description, style={"description_width": "initial"}, layout=fitted("190px")
    )


class Controls:
    """Every input of the explorer. `request()` turns the current values into a `RunRequest`."""

    def __init__(
        self,
        has_loaded_model: bool = False,
        model: str | None = None,
        prompt_presets: dict | None = None,
        has_chat_template: Callable[[str], bool] | None = None,
    ):
        wide = {"description_width": "initial"}
        self.has_chat_template = has_chat_template or (lambda name: CHAT_TEMPLATES.get(name, False))
        choices = model_choices(has_loaded_model)
        self.model = widgets.Dropdown(options=choices, value=model or choices[0], description=_("model"), style=wide)
        self.dtype = widgets.Dropdown(options=DTYPES, value="float32", description="dtype", style=wide)
        self.cache = widgets.Dropdown(
            options=[(kind.shown(), kind.name) for kind in kinds.KINDS],
            value="dynamic",
            description=_("cache"),
            style=wide,
        )
        self.backend = widgets.Dropdown(
            options=_compat.QUANTIZED_BACKENDS, value=DEFAULT_QUANTIZED_BACKEND, description="backend", style=wide
        )
        defaults = _compat.QUANTIZED_DEFAULTS
        self.nbits = widgets.Dropdown(
            options=sorted(set(_compat.HQQ_NBITS + _compat.QUANTO_NBITS)),
            value=defaults["nbits"],
            description="nbits",
            style=wide,
        )
        axes = sorted(set(_compat.HQQ_AXES + _compat.QUANTO_AXES))
        self.axis_key = widgets.Dropdown(options=axes, value=defaults["axis_key"], description="axis_key", style=wide)
        self.axis_value = widgets.Dropdown(
            options=axes, value=defaults["axis_value"], description="axis_value", style=wide
        )
        self.q_group_size = _int_text(defaults["q_group_size"], "q_group_size")
        self.residual_length = _int_text(defaults["residual_length"], "residual_length")
        self.max_cache_len = _int_text(256, "max_cache_len")
        self.offload_only_non_sliding = widgets.Checkbox(
            value=True, description="offload_only_non_sliding", indent=False, layout=fitted()
        )
        self.page_size = widgets.Dropdown(
            options=PAGE_SIZES,
            value=PAGED_DEFAULTS["page_size"],
            description=_("page_size (tokens per block)"),
            style=wide,
        )
        self.requests = widgets.BoundedIntText(
            value=PAGED_DEFAULTS["requests"],
            min=1,
            max=MAX_REQUESTS,
            description=_("requests"),
            style=wide,
            layout=fitted("150px"),
        )
        self.num_blocks = widgets.IntText(
            value=PAGED_DEFAULTS["num_blocks"],
            description=_("num_blocks (0 = room for all)"),
            style=wide,
            layout=fitted("260px"),
        )
        self.past_recording = widgets.Checkbox(
            value=False,
            description=_("past recording (keep evicted tokens until a crop)"),
            indent=False,
            layout=fitted(),
        )
        self.presets = dict(prompt_presets if prompt_presets is not None else presets())
        first = next(iter(self.presets), None)
        self.preset = widgets.Dropdown(
            options=[*((title(name), name) for name in self.presets), (_(CUSTOM), CUSTOM)],
            value=first or CUSTOM,
            description=_("preset"),
            style=wide,
        )
        self.prompt = widgets.Textarea(
            value=self.presets.get(first, ""),
            description=_("prompt"),
            layout=widgets.Layout(width="98%", height="70px"),
        )
        self.prompt_tokens = widgets.IntSlider(
            value=0,
            min=0,
            max=4096,
            step=16,
            style=wide,
            description=_("prompt tokens (0 = as typed)"),
            layout=widgets.Layout(width="420px"),
        )
        self.chat = widgets.Checkbox(value=False, description=_("chat template"), indent=False, layout=fitted())
        self._default_chat()
        self.max_new_tokens = widgets.IntSlider(
            value=16,
            min=1,
            max=512,
            description=_("max new tokens"),
            style=wide,
            layout=widgets.Layout(width="420px"),
        )
        for name in (
            "model",
            "dtype",
            "cache",
            "backend",
            "prompt",
            "preset",
            "max_new_tokens",
            "prompt_tokens",
            *OPTION_NAMES,
        ):
            getattr(self, name).add_class(f"kvlab-{name.replace('_', '-')}")
        for dropdown in (
            self.model,
            self.dtype,
            self.cache,
            self.backend,
            self.nbits,
            self.axis_key,
            self.axis_value,
            self.preset,
            self.page_size,
        ):
            dropdown.layout = fitted("150px")
        self.cache.observe(lambda _: self.sync_visibility(), names="value")
        self.backend.observe(lambda _: self.sync_visibility(), names="value")
        self.model.observe(lambda _: self.sync_visibility(), names="value")
        self.model.observe(lambda _: self._default_chat(), names="value")
        self.preset.observe(self._on_preset, names="value")
        self.prompt.observe(self._on_prompt_typed, names="value")
        self.sync_visibility()

    # -- rules --------------------------------------------------------------------------------------------------
    def visible_options(self) -> tuple[str, ...]:
        return options_for(self.cache.value, self.backend.value)

    def sync_visibility(self) -> None:
        """Show exactly the option widgets that apply to the chosen cache kind and backend."""
        shown = self.visible_options()
        for name in OPTION_NAMES:
            getattr(self, name).layout.display = None if name in shown else "none"
        for name in PROMPT_NAMES:
            getattr(self, name).layout.display = None if kind_of(self.cache.value).uses_prompt else "none"
        self.dtype.disabled = self.model.value == LOADED  # an already-loaded model keeps its dtype

    def _default_chat(self) -> None:
        """The chosen model's default: its chat template when it has one (a box it cannot tick otherwise)."""
        has = self.has_chat_template(self.model.value)
        self.chat.value, self.chat.disabled = has, not has

    def _on_preset(self, change) -> None:
        if change["new"] in self.presets:
            self.prompt.value = self.presets[change["new"]]

    def _on_prompt_typed(self, change) -> None:
        if self.preset.value in self.presets and change["new"] != self.presets[self.preset.value]:
            self.preset.value = CUSTOM

    # -- values -------------------------------------------------------------------------------------------------
    def options(self) -> dict:
        """The cache options that apply, with their current values (past recording is not a cache option)."""
        return {name: getattr(self, name).value for name in self.visible_options() if name != "past_recording"}

    def request(self) -> RunRequest:
        """The current values as a `session.RunRequest` (session imports torch: Run is pressed after the warm-up)."""
        from kvlab.explorer.session import RunRequest

        return RunRequest(
            model=self.model.value,
            dtype=self.dtype.value,
            cache=self.cache.value,
            options=self.options(),
            past_recording="past_recording" in self.visible_options() and self.past_recording.value,
            prompt=self.prompt.value,
            prompt_tokens=self.prompt_tokens.value,
            chat=self.chat.value,
            max_new_tokens=self.max_new_tokens.value,
        )

    def set(self, **values) -> Controls:
        """Set widgets by name, as a learner would (for scripts, tests and the notebook): `set(cache="static")`."""
        for name, value in values.items():
            widget = getattr(self, name, None)
            if not isinstance(widget, widgets.ValueWidget):
                raise ValueError(f"no control named {name!r}; controls: {', '.join(self.names())}")
            widget.value = value
        return self

    def names(self) -> list[str]:
        return [n for n, w in vars(self).items() if isinstance(w, widgets.ValueWidget)]

    # -- layout -------------------------------------------------------------------------------------------------
    def option_box(self) -> widgets.Widget:
        return widgets.HBox([getattr(self, n) for n in OPTION_NAMES], layout=widgets.Layout(flex_flow="row wrap"))

    def layout(self) -> widgets.Widget:
        return widgets.VBox(
            [
                widgets.HBox([self.model, self.dtype, self.cache], layout=widgets.Layout(flex_flow="row wrap")),
                self.option_box(),
                widgets.HBox([self.preset, self.chat]),
                self.prompt,
                widgets.HBox([self.prompt_tokens, self.max_new_tokens], layout=widgets.Layout(flex_flow="row wrap")),
            ]
        )
