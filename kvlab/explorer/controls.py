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

import ipywidgets as widgets

from kvlab import _compat
from kvlab.cache_kinds import DEFAULT_QUANTIZED_BACKEND, PAGE_SIZES, PAGED_DEFAULTS, PAGED_OPTIONS, QUANTIZED_OPTIONS
from kvlab.cache_kinds import OPTION_NAMES as CACHE_OPTION_NAMES
from kvlab.explorer import kinds
from kvlab.explorer.kinds import kind_of
from kvlab.explorer.models import CHAT_TEMPLATES, DTYPES, LOADED, model_choices
from kvlab.explorer.prompts import presets, title
from kvlab.explorer.run_values import RunRequest
from kvlab.i18n import N_, _
from kvlab.serving.batch_run import MAX_REQUESTS

# The cache options, past recording (a run setting shown beside them), then the paged kind's own options.
OPTION_NAMES = (*CACHE_OPTION_NAMES, "past_recording", *PAGED_OPTIONS)
KINDS = tuple(kind.name for kind in kinds.KINDS)  # the cache menu's values: transformers' kinds, then paged
CUSTOM = N_("(your own text)")  # the preset dropdown's value for a typed prompt; shown as `_(CUSTOM)`
PROMPT_NAMES = ("preset", "chat", "prompt", "prompt_tokens")  # hidden for a kind that brings its own requests
STYLED = ("model", "dtype", "cache", "backend", "prompt", "preset", "max_new_tokens", "prompt_tokens", *OPTION_NAMES)
WIDE = {"description_width": "initial"}  # a label never cut to the widget's default description width


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


def _dropdown(options, value, description: str) -> widgets.Dropdown:
    return widgets.Dropdown(options=options, value=value, description=description, style=WIDE, layout=fitted("150px"))


def _number(value: int, description: str, min_width: str = "190px", **bounds) -> widgets.IntText:
    """An integer box; with `min` and `max`, one that keeps its value between them."""
    box = widgets.BoundedIntText if bounds else widgets.IntText
    return box(value=value, description=description, style=WIDE, layout=fitted(min_width), **bounds)


def _tick(value: bool, description: str) -> widgets.Checkbox:
    return widgets.Checkbox(value=value, description=description, indent=False, layout=fitted())


def _slider(value: int, low: int, high: int, description: str, step: int = 1) -> widgets.IntSlider:
    return widgets.IntSlider(
        value=value,
        min=low,
        max=high,
        step=step,
        description=description,
        style=WIDE,
        layout=widgets.Layout(width="420px"),
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
        self.has_chat_template = has_chat_template or (lambda name: CHAT_TEMPLATES.get(name, False))
        choices = model_choices(has_loaded_model)
        self.model = _dropdown(choices, model or choices[0], _("model"))
        self.dtype = _dropdown(DTYPES, "float32", "dtype")
        self.cache = _dropdown([(kind.shown(), kind.name) for kind in kinds.KINDS], "dynamic", _("cache"))
        self._option_widgets()
        self._prompt_widgets(prompt_presets if prompt_presets is not None else presets())
        for name in STYLED:
            getattr(self, name).add_class(f"kvlab-{name.replace('_', '-')}")
        for widget in (self.cache, self.backend, self.model):
            widget.observe(lambda _: self.sync_visibility(), names="value")
        self.model.observe(lambda _: self._default_chat(), names="value")
        self.preset.observe(self._on_preset, names="value")
        self.prompt.observe(self._on_prompt_typed, names="value")
        self._default_chat()
        self.sync_visibility()

    def _option_widgets(self) -> None:
        """The cache options at their defaults, past recording, and the paged kind's options."""
        defaults, axes = _compat.QUANTIZED_DEFAULTS, sorted(set(_compat.HQQ_AXES + _compat.QUANTO_AXES))
        self.backend = _dropdown(_compat.QUANTIZED_BACKENDS, DEFAULT_QUANTIZED_BACKEND, "backend")
        self.nbits = _dropdown(sorted(set(_compat.HQQ_NBITS + _compat.QUANTO_NBITS)), defaults["nbits"], "nbits")
        self.axis_key = _dropdown(axes, defaults["axis_key"], "axis_key")
        self.axis_value = _dropdown(axes, defaults["axis_value"], "axis_value")
        self.q_group_size = _number(defaults["q_group_size"], "q_group_size")
        self.residual_length = _number(defaults["residual_length"], "residual_length")
        self.max_cache_len = _number(256, "max_cache_len")
        self.offload_only_non_sliding = _tick(True, "offload_only_non_sliding")
        self.past_recording = _tick(False, _("past recording (keep evicted tokens until a crop)"))
        self.page_size = _dropdown(PAGE_SIZES, PAGED_DEFAULTS["page_size"], _("page_size (tokens per block)"))
        self.requests = _number(PAGED_DEFAULTS["requests"], _("requests"), "150px", min=1, max=MAX_REQUESTS)
        self.num_blocks = _number(PAGED_DEFAULTS["num_blocks"], _("num_blocks (0 = room for all)"), "260px")

    def _prompt_widgets(self, prompt_presets: dict) -> None:
        """The preset menu (its first preset in the prompt box), the prompt, its length, chat and new tokens."""
        self.presets = dict(prompt_presets)
        first = next(iter(self.presets), None)
        named = [*((title(name), name) for name in self.presets), (_(CUSTOM), CUSTOM)]
        self.preset = _dropdown(named, first or CUSTOM, _("preset"))
        self.prompt = widgets.Textarea(
            value=self.presets.get(first, ""),
            description=_("prompt"),
            layout=widgets.Layout(width="98%", height="70px"),
        )
        self.prompt_tokens = _slider(0, 0, 4096, _("prompt tokens (0 = as typed)"), step=16)
        self.chat = _tick(False, _("chat template"))
        self.max_new_tokens = _slider(16, 1, 512, _("max new tokens"))

    # -- rules --------------------------------------------------------------------------------------------------
    def visible_options(self) -> tuple[str, ...]:
        return options_for(self.cache.value, self.backend.value)

    def sync_visibility(self) -> None:
        """Show exactly the option widgets that apply to the chosen cache kind and backend."""
        shown = self.visible_options()
        for name in OPTION_NAMES:
            getattr(self, name).layout.display = None if name in shown else "none"
        prompted = kind_of(self.cache.value).uses_prompt
        for name in PROMPT_NAMES:
            getattr(self, name).layout.display = None if prompted else "none"
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
        """The current values as a `RunRequest`."""
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
