"""Every figure of the course, drawn from real values pulled from the ranks.

Per-rank pictures (notebooks 01 and 02: ``ranks``). Bandwidth curves (02), the call record
and fault timings (06), per-rank timelines (08, 09: ``communication``). Shards, loss curves,
step times and a bucket sweep for the training notebooks (03, 04: ``training``). Memory per
rank, each rank's slice of a split layer, a 2-D mesh's groups, who holds which positions of a
sequence and which expert got which tokens (08, 09, 10: ``parallelism``).
Each function takes plain values (tensors, numbers) and returns the matplotlib Figure, drawn
at one resolution (``style.DPI``) with one font size scale, so every figure looks alike.
"""

from .communication import plot_bandwidth, plot_calls, plot_timeline, plot_timings
from .parallelism import (
    plot_memory,
    plot_mesh,
    plot_mesh_axes,
    plot_positions,
    plot_routing,
    plot_weight_slices,
)
from .ranks import draw_ranks, show_ranks
from .style import DPI, MAX_WIDTH
from .training import (
    plot_bucket_sweep,
    plot_digits,
    plot_loss,
    plot_losses,
    plot_shards,
    plot_step_times,
)

__all__ = ["DPI", "MAX_WIDTH", "draw_ranks", "plot_bandwidth", "plot_bucket_sweep",
           "plot_calls", "plot_digits", "plot_loss", "plot_losses", "plot_memory", "plot_mesh",
           "plot_mesh_axes", "plot_positions", "plot_routing", "plot_shards", "plot_step_times",
           "plot_timeline", "plot_timings", "plot_weight_slices", "show_ranks"]
