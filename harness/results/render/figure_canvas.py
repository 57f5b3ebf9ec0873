"""The canvas every stampede figure is drawn on: matplotlib without a display (Agg), one look, PNG bytes out.

`report`'s figures (plots.py) and `compare`'s (compare_plots.py) share it, so they look alike side by side.
"""

from __future__ import annotations

import io
import math

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt

plt.rcParams.update({"figure.dpi": 100, "font.size": 9, "axes.grid": True, "grid.alpha": 0.3})


def png_bytes(fig: plt.Figure) -> bytes:
    """The figure as PNG, then closed (a report draws dozens; open figures would pile up)."""
    buffer = io.BytesIO()
    fig.savefig(buffer, format="png", bbox_inches="tight")
    plt.close(fig)
    return buffer.getvalue()


def panels(count: int, width: float = 5.5, height: float = 3.6) -> tuple[plt.Figure, list[plt.Axes]]:
    """`count` axes, two to a row, each width x height inches; unused cells hidden."""
    count = max(count, 1)
    cols = min(count, 2)
    rows = math.ceil(count / cols)
    fig, axes = plt.subplots(rows, cols, figsize=(width * cols, height * rows), squeeze=False, layout="constrained")
    flat = list(axes.ravel())
    for extra in flat[count:]:
        extra.set_visible(False)
    return fig, flat[:count]


__all__ = ["panels", "plt", "png_bytes"]
