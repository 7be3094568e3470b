"""What every figure of the course shares: one resolution, one width, sharp in notebooks."""

from __future__ import annotations

DPI = 100  # one size for every figure of the course: 100 pixels per inch of figure size
MAX_WIDTH = 9.0  # inches: 900 pixels, the width of a notebook's output area (JupyterLab, GitHub)


def crisp_in_notebooks() -> None:
    """Show figures in a notebook as PNGs of twice the pixels, displayed at the same size
    ('retina'): sharp on high-density screens, about twice the bytes, one format for all."""
    try:
        from IPython import get_ipython
        from matplotlib_inline.backend_inline import set_matplotlib_formats
    except ImportError:  # not in IPython: nothing to configure
        return
    if get_ipython() is not None:
        set_matplotlib_formats("retina")

crisp_in_notebooks()
