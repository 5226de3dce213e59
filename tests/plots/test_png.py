"""`kvlab.plots.png`: the one way the explorer and `kvlab.live` turn a figure into an image widget's bytes."""

import io

import matplotlib
from matplotlib.figure import Figure
from matplotlib.image import imread

from kvlab.plots.png import png_bytes


def test_the_png_paints_its_own_opaque_white_background_whatever_the_style_and_the_figure():
    """JupyterLab's dark theme shows a transparent PNG's black text on black: the image carries its own white."""
    dark = {"figure.facecolor": "#111111", "savefig.facecolor": "none", "savefig.transparent": True}
    with matplotlib.rc_context(dark):
        fig = Figure(figsize=(2, 1), facecolor="#222222")
        fig.add_subplot().plot([0, 1], [1, 0])
        png = png_bytes(fig, dpi=50)
    assert png[:8] == b"\x89PNG\r\n\x1a\n"
    pixels = imread(io.BytesIO(png))  # (height, width, RGBA) floats
    assert pixels.shape == (50, 100, 4)  # 2 x 1 inches at 50 dpi
    assert (pixels[..., 3] == 1.0).all()  # opaque everywhere
    assert pixels[0, 0].tolist() == [1.0, 1.0, 1.0, 1.0] and pixels[-1, -1].tolist() == [1.0, 1.0, 1.0, 1.0]
