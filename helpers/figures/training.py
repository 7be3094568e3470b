"""Training pictures: which rank holds which samples, loss curves, step times, a bucket sweep
(notebooks 03 and 04) and the digits themselves."""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import matplotlib.pyplot as plt
from matplotlib.figure import Figure

from .style import DPI


def plot_shards(owner: Sequence[int], world_size: int, first: int = 80) -> Figure:
    """Grid of ranks x the first samples: a filled cell where that rank holds that sample.

    Shards are disjoint and cover the data when every column has exactly one filled cell.
    """
    cols = list(owner)[:first]
    fig, ax = plt.subplots(figsize=(7, 0.3 * world_size + 0.9), dpi=DPI)
    grid = [[1 if o == r else 0 for o in cols] for r in range(world_size)]
    ax.imshow(grid, aspect="auto", cmap="Blues", vmin=0, vmax=1.3, interpolation="nearest")
    ax.set_yticks(range(world_size), [f"rank {r}" for r in range(world_size)])
    ax.set_xlabel(f"sample index (first {len(cols)} of {len(owner)})")
    fig.tight_layout()
    return fig


def plot_loss(losses: Sequence[float], accuracy: float | None = None, window: int = 10) -> Figure:
    """Loss per step, with a running mean over window steps; the test accuracy in the title."""
    fig, ax = plt.subplots(figsize=(5.5, 3), dpi=DPI)
    ax.plot(range(len(losses)), losses, lw=0.8, alpha=0.5, label="loss per step")
    if len(losses) >= window:
        mean = [sum(losses[i - window:i]) / window for i in range(window, len(losses) + 1)]
        ax.plot(range(window - 1, len(losses)), mean, lw=1.8, label=f"mean of {window} steps")
    ax.set_xlabel("step")
    ax.set_ylabel("cross-entropy loss")
    title = "training loss"
    if accuracy is not None:
        title += f" (test accuracy {accuracy:.1%})"
    ax.set_title(title)
    ax.legend()
    fig.tight_layout()
    return fig


def plot_losses(curves: Mapping[str, Sequence[float]], marks: Mapping[str, int] | None = None
                ) -> Figure:
    """Notebook 11: several loss curves over the same steps (a run and its reference, a
    resumed run), each drawn with its own marker; marks names steps to draw a line at."""
    fig, ax = plt.subplots(figsize=(5.5, 3), dpi=DPI)
    for (name, losses), marker, width in zip(curves.items(), "o.x+", (3, 1.2, 1, 1)):
        ax.plot(range(len(losses)), losses, marker=marker, lw=width, ms=4, label=name)
    for name, step in (marks or {}).items():
        ax.axvline(step, color="grey", lw=0.8, ls="--")
        ax.annotate(name, (step, ax.get_ylim()[1]), fontsize=7, ha="left", va="top")
    ax.set_xlabel("step")
    ax.set_ylabel("cross-entropy loss")
    ax.legend(fontsize=7)
    fig.tight_layout()
    return fig


def plot_step_times(seconds: Mapping[str, float], reference: str) -> Figure:
    """Bars: milliseconds per step of each variant, labelled with its ratio to reference."""
    names = list(seconds)
    ms = [seconds[name] * 1e3 for name in names]
    fig, ax = plt.subplots(figsize=(6, 0.45 * len(names) + 1), dpi=DPI)
    bars = ax.barh(names, ms, color=["0.6" if n == reference else "C0" for n in names])
    for bar, name in zip(bars, names):
        ax.text(bar.get_width(), bar.get_y() + bar.get_height() / 2,
                f" {seconds[name] / seconds[reference]:.2f}x", va="center")
    ax.invert_yaxis()
    ax.set_xlabel("milliseconds per training step (label: ratio to the grey bar)")
    ax.set_xlim(0, max(ms) * 1.25)
    fig.tight_layout()
    return fig


def plot_bucket_sweep(
    caps_mb: Sequence[float], seconds: Sequence[float], others: Mapping[str, float]
) -> Figure:
    """DDP's step time against bucket_cap_mb (log scale), other variants as horizontal lines."""
    fig, ax = plt.subplots(figsize=(6, 3.2), dpi=DPI)
    ax.plot(caps_mb, [s * 1e3 for s in seconds], "o-", color="C3", label="DDP")
    for i, (name, s) in enumerate(others.items()):
        ax.axhline(s * 1e3, ls="--", color=f"C{i}", label=name)
    ax.set_xscale("log")
    ax.set_xlabel("bucket_cap_mb")
    ax.set_ylabel("ms per training step")
    ax.set_ylim(bottom=0)
    ax.legend(fontsize=8)
    fig.tight_layout()
    return fig


def plot_digits(images: Sequence, labels: Sequence[int], n: int = 10) -> Figure:
    """The first n 8x8 digit images (64 values in [0, 1] each) with their labels."""
    fig, axes = plt.subplots(1, n, figsize=(0.8 * n, 1.1), dpi=DPI)
    for ax, image, label in zip(axes, images, labels):
        ax.imshow([list(image[i:i + 8]) for i in range(0, 64, 8)], cmap="gray_r", vmin=0, vmax=1)
        ax.set_title(str(int(label)), fontsize=9)
        ax.axis("off")
    fig.tight_layout()
    return fig


# ---- debugging (notebook 06) -----------------------------------------------------
