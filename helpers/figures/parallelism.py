"""What a split model holds on each rank: memory per rank (08), each rank's slice of a split
layer and a 2-D mesh's groups (09), which positions of a sequence and which tokens of the
experts each rank holds (10)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import matplotlib.pyplot as plt
import numpy as np
import torch
from matplotlib.figure import Figure
from matplotlib.patches import Rectangle

from .style import DPI


def plot_memory(held: Mapping[str, Sequence[Sequence[int]]]) -> Figure:
    """Bytes per rank (notebook 08): for each strategy, one stacked bar per rank of its
    parameters, gradients and optimizer state, as counted from the tensors."""
    parts, colours = ("parameters", "gradients", "moments (Adam)"), ("C0", "C1", "C2")
    fig, axes = plt.subplots(1, len(held), figsize=(7, 2.4), dpi=DPI, sharey=True)
    for ax, (name, ranks) in zip(np.atleast_1d(axes), held.items()):
        bottom = np.zeros(len(ranks))
        for k, (part, colour) in enumerate(zip(parts, colours)):
            kib = np.array([r[k] for r in ranks]) / 1024
            ax.bar(range(len(ranks)), kib, bottom=bottom, color=colour, label=part)
            bottom += kib
        ax.set_title(name, fontsize=9)
        ax.set_xticks(range(len(ranks)), [f"r{r}" for r in range(len(ranks))], fontsize=7)
    np.atleast_1d(axes)[0].set_ylabel("KiB held per rank")
    handles, labels = np.atleast_1d(axes)[0].get_legend_handles_labels()
    fig.legend(handles, labels, fontsize=7, loc="upper center", ncol=3, frameon=False)
    fig.tight_layout(rect=(0, 0, 1, 0.9))  # the legend above the panels, not over a bar


def plot_weight_slices(d: int, h: int, world_size: int) -> Figure:
    """Notebook 09: W1 (h x d) cut by rows and W2 (d x h) by columns, one colour per rank."""
    fig, axes = plt.subplots(1, 2, figsize=(7, 2.6), dpi=DPI, width_ratios=[d, h])
    rows = torch.arange(h) * world_size // h  # the rank holding each hidden unit
    cmap, top = ("tab10", 9) if world_size <= 10 else ("tab20", 19)
    for ax, grid, title in ((axes[0], rows[:, None].expand(h, d), f"W1 ({h} x {d}): rows"),
                            (axes[1], rows[None, :].expand(d, h), f"W2 ({d} x {h}): columns")):
        ax.imshow(grid, cmap=cmap, vmin=0, vmax=top, interpolation="nearest", aspect="auto")
        ax.set_title(f"{title} by rank", fontsize=9)
        ax.set_xticks([])
        ax.set_yticks([])
    handles = [Rectangle((0, 0), 1, 1, color=plt.get_cmap(cmap)(r / top), label=f"rank {r}")
               for r in range(world_size)]
    fig.legend(handles=handles, fontsize=7, loc="lower center", ncol=min(world_size, 8))
    fig.tight_layout(rect=(0, 0.1, 1, 1))
    return fig


def plot_mesh(groups: Sequence[tuple[Sequence[int], Sequence[int]]]) -> Figure:
    """Notebook 09: a dp x tp mesh; each rank's tensor-parallel partners (its row) and
    data-parallel partners (its column). groups[r] is rank r's (tp ranks, dp ranks)."""
    place = {r: (list(tp).index(r), -list(dp).index(r)) for r, (tp, dp) in enumerate(groups)}
    cols, rows = len(groups[0][0]), len(groups[0][1])
    fig, ax = plt.subplots(figsize=(1.2 + 1.3 * cols, 1.4 + 0.8 * rows), dpi=DPI)
    for r, (tp, dp) in enumerate(groups):
        for partners, colour, label in ((tp, "C0", "tensor parallel"), (dp, "C1", "data parallel")):
            (x0, y0), (x1, y1) = place[partners[0]], place[partners[-1]]
            ax.plot([x0, x1], [y0, y1], color=colour, linewidth=3, label=label if r == 0 else None)
    for r, (x, y) in place.items():
        ax.text(x, y, f"rank {r}", ha="center", va="center", fontsize=9,
                bbox={"boxstyle": "round", "facecolor": "white"})
    ax.set_xlim(-0.5, cols - 0.5)
    ax.set_ylim(-rows + 0.5, 0.5)
    ax.axis("off")
    ax.legend(fontsize=7, loc="upper center", bbox_to_anchor=(0.5, 0.02), ncol=2)
    fig.tight_layout()
    return fig


def plot_mesh_axes(shape: Sequence[int]) -> Figure:
    """Notebook 11: a (pp, dp, tp) mesh, one panel per pipeline rank, dp down and tp across;
    lines join the ranks of each group: tp (along a row), dp (down a column), pp (across
    panels). Ranks are numbered as init_device_mesh lays them out (row-major)."""
    pp, dp, tp = shape
    fig, ax = plt.subplots(figsize=(1.0 + 1.25 * pp * (tp + 0.6), 1.3 + 0.75 * dp), dpi=DPI)
    place = {}
    for p in range(pp):
        for d in range(dp):
            for t in range(tp):
                place[(p * dp + d) * tp + t] = (p * (tp + 0.6) + t, -d)
    for p in range(pp):
        for d in range(dp):
            row = [place[(p * dp + d) * tp + t] for t in range(tp)]
            ax.plot([row[0][0], row[-1][0]], [row[0][1], row[-1][1]], color="C0", lw=3,
                    label="tp group" if (p, d) == (0, 0) and tp > 1 else None)
        for t in range(tp):
            col = [place[(p * dp + d) * tp + t] for d in range(dp)]
            ax.plot([col[0][0], col[-1][0]], [col[0][1], col[-1][1]], color="C1", lw=3,
                    label="dp group" if (p, t) == (0, 0) and dp > 1 else None)
    for d in range(dp):
        for t in range(tp):
            line = [place[(p * dp + d) * tp + t] for p in range(pp)]
            ax.plot([x for x, _ in line], [y + 0.16 + 0.09 * t for _, y in line], color="C2", lw=1,
                    ls="--", label="pp group" if (d, t) == (0, 0) and pp > 1 else None)
    for r, (x, y) in place.items():
        ax.text(x, y, f"rank {r}", ha="center", va="center", fontsize=8,
                bbox={"boxstyle": "round", "facecolor": "white"})
    for p in range(pp):
        ax.text(p * (tp + 0.6) + (tp - 1) / 2, 0.6, f"pipeline rank {p}", ha="center", fontsize=8)
    ax.set_xlim(-0.6, pp * (tp + 0.6) - 0.9)
    ax.set_ylim(-dp + 0.4, 0.9)
    ax.axis("off")
    ax.legend(fontsize=7, loc="upper center", bbox_to_anchor=(0.5, 0.02), ncol=3)
    ax.set_title(f"mesh (pp, dp, tp) = {tuple(shape)}", fontsize=9)
    fig.tight_layout()
    return fig


def plot_positions(layouts: Mapping[str, Sequence[int]]) -> Figure:
    """Notebook 10: which rank holds each position of the sequence, one row per layout
    (layouts maps a name to the owner of each position)."""
    world_size = max(max(o) for o in layouts.values()) + 1
    cmap, top = ("tab10", 9) if world_size <= 10 else ("tab20", 19)
    fig, axes = plt.subplots(len(layouts), 1, figsize=(7, 0.55 * len(layouts) + 0.7), dpi=DPI,
                             squeeze=False)
    for ax, (name, owner) in zip(axes[:, 0], layouts.items()):
        ax.imshow(np.array(owner)[None, :], cmap=cmap, vmin=0, vmax=top, aspect="auto",
                  interpolation="nearest")
        ax.set_yticks([])
        ax.set_xticks([])
        ax.set_title(name, fontsize=8, loc="left")
    axes[-1, 0].set_xlabel(f"position in the sequence (0 to {len(owner) - 1})", fontsize=8)
    handles = [Rectangle((0, 0), 1, 1, color=plt.get_cmap(cmap)(r / top), label=f"rank {r}")
               for r in range(world_size)]
    fig.legend(handles=handles, fontsize=7, loc="lower center", ncol=min(world_size, 8))
    fig.tight_layout(rect=(0, 0.12, 1, 1))
    return fig


def plot_routing(routes: Mapping[str, Sequence[Sequence[int]]], per_rank: int) -> Figure:
    """Notebook 10: tokens sent by each rank (rows) to each expert (columns), one panel per
    router, on one colour scale; the experts of one rank sit between two white lines."""
    fig, axes = plt.subplots(1, len(routes), figsize=(7, 2.6), dpi=DPI, squeeze=False)
    top = max(max(max(row) for row in counts) for counts in routes.values())
    for ax, (name, counts) in zip(axes[0], routes.items()):
        grid = np.array(counts)
        image = ax.imshow(grid, cmap="viridis", aspect="auto", interpolation="nearest",
                          vmin=0, vmax=max(top, 1))
        for edge in range(per_rank, grid.shape[1], per_rank):
            ax.axvline(edge - 0.5, color="white", linewidth=2)
        ax.set_title(name, fontsize=9)
        ax.set_xlabel("expert", fontsize=8)
        ax.set_ylabel("sent by rank", fontsize=8)
        fig.colorbar(image, ax=ax, label="tokens")
    fig.tight_layout()
    return fig
