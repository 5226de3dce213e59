"""The explorer's input widgets, and which of them apply to which cache kind.

A learner sees only the options a kind takes (`options_for`). Values the rule allows but a backend refuses (quanto at
3 bits) stay selectable on purpose: the explorer's message about them is part of the lesson. A chat model's prompt
goes through its chat template by default (an instruct model given bare text answers off-topic). Torch-free.
"""

from __future__ import annotations

import ipywidgets as widgets

from kvlab.cache_kinds import OPTION_NAMES as CACHE_OPTION_NAMES
from kvlab.cache_kinds import PAGE_SIZES, PAGED_DEFAULTS, PAGED_OPTIONS, QUANTIZED_OPTIONS
from kvlab.explorer import kinds
from kvlab.explorer.kinds import kind_of
from kvlab.explorer.models import CHAT_TEMPLATES, DTYPES, LOADED, model_choices
from kvlab.explorer.prompts import presets, title
from kvlab.explorer.run_values import RunRequest
from kvlab.i18n import N_, _
from kvlab.quantized_backends import ANY_AXES, ANY_NBITS, BACKEND_NAMES, BACKENDS_BY_NAME, DEFAULT_BACKEND
from kvlab.serving.batch_run import MAX_REQUESTS

# The cache options, past recording (a run setting shown beside them), then the paged kind's own options.
OPTION_NAMES = (*CACHE_OPTION_NAMES, "past_recording", *PAGED_OPTIONS)
KINDS = tuple(kind.name for kind in kinds.KINDS)  # the cache menu's values: transformers' kinds, then paged
CUSTOM = N_("(your own text)")  # the preset dropdown's value for a typed prompt; shown as `_(CUSTOM)`
PROMPT_NAMES = ("preset", "chat", "prompt", "prompt_tokens")  # hidden for a kind that brings its own requests
STYLED = ("model", "dtype", "cache", "backend", "prompt", "preset", "max_new_tokens", "prompt_tokens", *OPTION_NAMES)
WIDE = {"description_width": "initial"}  # a label never cut to the widget's default description width


def options_for(cache_kind: str, backend: str = DEFAULT_BACKEND) -> tuple[str, ...]:
    """Names of the option widgets that apply to a `cache_kind` (and quantization `backend`: the group-wise options
    its row takes, none for fp8)."""
    names = kind_of(cache_kind).options
    row = BACKENDS_BY_NAME.get(backend)
    if "backend" in names and row is not None:
        names = tuple(n for n in names if n not in QUANTIZED_OPTIONS or n in row.options)
    return names


def fitted(min_width: str = "") -> widgets.Layout:
    """As wide as the widget's own text, at least `min_width`: ipywidgets' fixed widths cut long (pt-BR) labels."""
    return widgets.Layout(width="max-content", min_width=min_width or None)


def row(*children: widgets.Widget) -> widgets.HBox:
    """A row that wraps onto more lines in a narrow window."""
    return widgets.HBox(children, layout=widgets.Layout(flex_flow="row wrap"))


def _dropdown(options, value, description: str) -> widgets.Dropdown:
    return widgets.Dropdown(options=options, value=value, description=description, style=WIDE, layout=fitted("150px"))


def _number(value: int, description: str, min_width: str = "190px", **bounds) -> widgets.IntText:
    box = widgets.BoundedIntText if bounds else widgets.IntText
    return box(value=value, description=description, style=WIDE, layout=fitted(min_width), **bounds)


def _tick(value: bool, description: str) -> widgets.Checkbox:
    return widgets.Checkbox(value=value, description=description, indent=False, layout=fitted())


def _slider(value: int, low: int, high: int, description: str, step: int = 1) -> widgets.IntSlider:
    layout = widgets.Layout(width="420px")
    return widgets.IntSlider(
        value=value, min=low, max=high, step=step, description=description, style=WIDE, layout=layout
    )


class Controls:
    """Every input of the explorer; `request()` is their values as a `RunRequest`."""

    def __init__(self, has_loaded_model=False, model: str | None = None, prompt_presets=None, has_chat_template=None):
        self.has_chat_template = has_chat_template or (lambda name: CHAT_TEMPLATES.get(name, False))
        choices = model_choices(has_loaded_model)
        self.model = _dropdown(choices, model or choices[0], _("model"))
        self.dtype = _dropdown(DTYPES, "float32", "dtype")
        self.cache = _dropdown([(kind.shown(), kind.name) for kind in kinds.offered()], "dynamic", _("cache"))
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
        defaults = BACKENDS_BY_NAME[DEFAULT_BACKEND].defaults
        self.backend = _dropdown(BACKEND_NAMES, DEFAULT_BACKEND, "backend")
        self.nbits = _dropdown(ANY_NBITS, defaults["nbits"], "nbits")  # every backend's: one refuses what it lacks
        for name in ("axis_key", "axis_value"):  # read by name (`options`), as every option widget
            setattr(self, name, _dropdown(ANY_AXES, defaults[name], name))
        self.q_group_size = _number(defaults["q_group_size"], "q_group_size")
        self.residual_length = _number(defaults["residual_length"], "residual_length")
        self.max_cache_len = _number(256, "max_cache_len")
        self.offload_only_non_sliding = _tick(True, "offload_only_non_sliding")
        self.past_recording = _tick(False, _("past recording (keep evicted tokens until a crop)"))
        self.page_size = _dropdown(PAGE_SIZES, PAGED_DEFAULTS["page_size"], _("page_size (tokens per block)"))
        self.requests = _number(PAGED_DEFAULTS["requests"], _("requests"), "150px", min=1, max=MAX_REQUESTS)
        self.num_blocks = _number(PAGED_DEFAULTS["num_blocks"], _("num_blocks (0 = room for all)"), "260px")

    def _prompt_widgets(self, prompt_presets: dict) -> None:
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

    def visible_options(self) -> tuple[str, ...]:
        return options_for(self.cache.value, self.backend.value)

    def sync_visibility(self) -> None:
        shown = self.visible_options()
        for name in OPTION_NAMES:
            getattr(self, name).layout.display = None if name in shown else "none"
        prompted = kind_of(self.cache.value).uses_prompt
        for name in PROMPT_NAMES:
            getattr(self, name).layout.display = None if prompted else "none"
        self.dtype.disabled = self.model.value == LOADED  # an already-loaded model keeps its dtype

    def _default_chat(self) -> None:
        """The chat template when the chosen model has one; otherwise the box cannot be ticked."""
        has = self.has_chat_template(self.model.value)
        self.chat.value, self.chat.disabled = has, not has

    def _on_preset(self, change) -> None:
        if change["new"] in self.presets:
            self.prompt.value = self.presets[change["new"]]

    def _on_prompt_typed(self, change) -> None:
        if self.preset.value in self.presets and change["new"] != self.presets[self.preset.value]:
            self.preset.value = CUSTOM

    def options(self) -> dict:
        """The cache options that apply, with their current values (past recording is not a cache option)."""
        return {name: getattr(self, name).value for name in self.visible_options() if name != "past_recording"}

    def request(self) -> RunRequest:
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
        """Set widgets by name, as a learner would: `set(cache="static")`."""
        for name, value in values.items():
            widget = getattr(self, name, None)
            if not isinstance(widget, widgets.ValueWidget):
                names = [n for n, w in vars(self).items() if isinstance(w, widgets.ValueWidget)]
                raise ValueError(
                    _("no control named {name!r}; controls: {controls}").format(name=name, controls=", ".join(names))
                )
            widget.value = value
        return self

    def layout(self) -> widgets.Widget:
        options = row(*(getattr(self, n) for n in OPTION_NAMES))
        prompt = (widgets.HBox([self.preset, self.chat]), self.prompt, row(self.prompt_tokens, self.max_new_tokens))
        return widgets.VBox([row(self.model, self.dtype, self.cache), options, *prompt])
