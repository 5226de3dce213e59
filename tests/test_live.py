"""`kvlab.live`: a control re-runs its measurement and redraws; the cell output carries a static PNG too."""

import ipywidgets as widgets
import pytest

from kvlab.live import live
from kvlab.plots._figure import subplots


def measure(n: int):
    fig, ax = subplots()
    ax.bar(range(n), range(n))
    return fig


def make():
    return live(measure, n=widgets.IntSlider(value=3, min=1, max=12, continuous_update=False))


def test_moving_the_control_redraws_the_image():
    control = make()
    first = control.image.value
    control.controls["n"].value = 9  # as a browser would
    assert control.image.value != first
    assert len(control.figure.axes[0].patches) == 9
    assert control.update(n=4) is control.figure and control.controls["n"].value == 4


def test_the_output_holds_the_widget_and_a_static_png_of_the_default():
    bundle = make()._repr_mimebundle_()
    assert "application/vnd.jupyter.widget-view+json" in bundle
    assert bundle["image/png"].startswith(b"\x89PNG")
    assert bundle["text/plain"] == "live control (n=3)"


def test_an_error_is_shown_and_the_last_figure_kept():
    control = live(lambda n: 1 / (n - 2) and measure(n), n=widgets.IntSlider(value=3, min=1, max=5))
    image = control.image.value
    assert control.update(n=2) is None
    assert "ZeroDivisionError" in control.status.value and control.image.value == image
    with pytest.raises(KeyError, match="controls: n"):
        control.update(m=1)
