"""Live controls for the notebooks: move a control, a small real measurement `measure(**values)` re-runs, and the
Figure it returns is redrawn as PNG frames of one `ipywidgets.Image` (no pyplot state, no stacked outputs):

    control = live(measure_tokens, new_tokens=IntSlider(value=16, min=4, max=64, continuous_update=False))

The cell's output bundles the widget with a PNG of the default setting: a page without a kernel (GitHub,
nbviewer) shows the image.
"""

from __future__ import annotations

import traceback
from collections.abc import Callable

import ipywidgets as widgets
from matplotlib.figure import Figure

from kvlab.i18n import _, number
from kvlab.measure.timing import Stopwatch
from kvlab.plots._figure import png_bytes

DPI = 80


class LiveControl:
    """Controls, a status line and the figure `measure` draws for their values."""

    def __init__(self, measure: Callable[..., Figure], controls: dict[str, widgets.ValueWidget], dpi: int = DPI):
        self.measure = measure
        self.controls = controls
        self.dpi = dpi
        self.status = widgets.HTML()
        self.image = widgets.Image(format="png")
        self.figure: Figure | None = None
        for control in controls.values():
            control.observe(self._on_change, names="value")
        self.widget = widgets.VBox([widgets.HBox(list(controls.values())), self.status, self.image])
        self.update()

    @property
    def values(self) -> dict:
        return {name: control.value for name, control in self.controls.items()}

    def update(self, **values) -> Figure | None:
        """Set the controls to `values`, run the measurement and redraw; an error shows as a message."""
        for name, value in values.items():
            if name not in self.controls:
                raise KeyError(
                    _("no control named {name!r}; controls: {controls}").format(
                        name=name, controls=", ".join(self.controls)
                    )
                )
            self.controls[name].unobserve(self._on_change, names="value")
            self.controls[name].value = value
            self.controls[name].observe(self._on_change, names="value")
        self.status.value = "<i>" + _("running…") + "</i>"
        watch = Stopwatch().__enter__()  # a status line's "measured in 1.2 s", not a comparison
        try:
            self.figure = self.measure(**self.values)
        except Exception as err:  # a live control must stay usable: show the error, keep the last figure
            details = f"<details><pre>{traceback.format_exc()}</pre></details>"
            self.status.value = "<b>" + _("error:") + f"</b> {type(err).__name__}: {err}{details}"
            return None
        self.image.value = png_bytes(self.figure, dpi=self.dpi)
        seconds = number(watch.elapsed(), 1, grouping=False)
        self.status.value = "<small>" + _("measured in {seconds} s").format(seconds=seconds) + "</small>"
        return self.figure

    def _on_change(self, change) -> None:
        self.update()

    def _repr_mimebundle_(self, include=None, exclude=None):
        bundle = dict(self.widget._repr_mimebundle_(include=include, exclude=exclude) or {})
        bundle["image/png"] = png_bytes(self.figure, dpi=self.dpi) if self.figure is not None else b""
        values = ", ".join(f"{k}={v!r}" for k, v in self.values.items())
        bundle["text/plain"] = _("live control ({values})").format(values=values)
        return bundle


def live(measure: Callable[..., Figure], **controls: widgets.ValueWidget) -> LiveControl:
    """A `LiveControl` running `measure(**values)`; each keyword names the argument a control sets."""
    return LiveControl(measure, controls)
