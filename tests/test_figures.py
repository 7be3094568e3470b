"""helpers.figures: every figure draws what it is given, from synthetic values."""

from __future__ import annotations

import matplotlib.pyplot as plt
import pytest
import torch
from fakes import same_on

from helpers.cluster.px import to_cpu
from helpers.figures import (
    DPI,
    draw_ranks,
    plot_bandwidth,
    plot_bucket_sweep,
    plot_calls,
    plot_digits,
    plot_loss,
    plot_shards,
    plot_step_times,
    plot_timings,
)


@pytest.fixture(autouse=True)
def _close_figures():
    yield
    plt.close("all")


def _cell_texts(ax) -> list[str]:
    return [t.get_text() for t in ax.texts]


def test_draw_ranks_draws_one_labelled_cell_per_value():
    before = [torch.tensor([1.0, 2.0]), torch.tensor([3.0, 4.0]), torch.tensor([5.0, 6.0])]
    after = [torch.tensor([9.0, 12.0])] * 3
    fig = draw_ranks({"before": before, "after": after}, title="all_reduce")
    left, right = fig.axes
    assert _cell_texts(left) == ["1", "2", "3", "4", "5", "6"]
    assert _cell_texts(right) == ["9", "12"] * 3
    assert [t.get_text() for t in left.get_yticklabels()] == ["rank 0", "rank 1", "rank 2"]
    assert left.get_title(loc="left") == "before" and fig._suptitle.get_text() == "all_reduce"
    # one colour scale for both panels: the same value has the same colour
    colours = {}
    for ax in fig.axes:
        for patch, text in zip(ax.patches, ax.texts):
            colours.setdefault(text.get_text(), set()).add(tuple(patch.get_facecolor()))
    assert all(len(c) == 1 for c in colours.values())
    plt.close(fig)


def test_draw_ranks_accepts_lists_of_tensors_nothing_and_floats():
    gathered = [[torch.tensor([1.0]), torch.tensor([2.5])], None]
    fig = draw_ranks({"gather_list": gathered})
    (ax,) = fig.axes
    assert _cell_texts(ax) == ["1", "2.5", "(nothing)"]
    assert len(ax.patches) == 2
    plt.close(fig)


def test_draw_ranks_rejects_panels_of_different_lengths():
    with pytest.raises(ValueError, match="different numbers of ranks"):
        draw_ranks({"a": [torch.zeros(1)], "b": [torch.zeros(1)] * 2})
    with pytest.raises(ValueError, match="at least one panel"):
        draw_ranks({})


def test_to_cpu_copies_nested_tensors_and_leaves_the_rest():
    t = torch.ones(2, requires_grad=True)
    out = to_cpu([t, (t, None), 3])
    assert not out[0].requires_grad and out[1][1] is None and out[2] == 3
    assert torch.equal(out[1][0], torch.ones(2))


def test_plot_bandwidth_draws_the_reference_dashed():
    curves = {"all_reduce": {8: 1e6, 1024: 1e8}, "point-to-point": {8: 2e6, 1024: 3e8}}
    fig = plot_bandwidth(curves, "bus bandwidth", reference="point-to-point")
    (ax,) = fig.axes
    lines = {ln.get_label(): ln for ln in ax.get_lines()}
    assert lines["point-to-point"].get_linestyle() == "--"
    assert list(lines["all_reduce"].get_ydata()) == [1.0, 100.0]  # MB/s
    assert ax.xaxis.get_major_formatter()(1024, 0) == "1 KiB"  # sizes read as sizes
    plt.close(fig)


def test_plot_shards_one_filled_cell_per_column():
    owner = [i % 3 for i in range(50)]
    fig = plot_shards(owner, 3, first=20)
    grid = fig.axes[0].images[0].get_array()
    assert grid.shape == (3, 20)
    assert (grid.sum(axis=0) == 1).all()
    assert fig.dpi == DPI


def test_plot_loss_draws_steps_running_mean_and_accuracy():
    fig = plot_loss([2.0 - 0.01 * i for i in range(50)], accuracy=0.953, window=10)
    ax = fig.axes[0]
    assert [len(line.get_xdata()) for line in ax.lines] == [50, 41]
    assert "95.3%" in ax.get_title()
    assert len(plot_loss([1.0, 0.5]).axes[0].lines) == 1  # too short for a running mean


def test_plot_step_times_bars_and_ratios():
    seconds = {"reference": 0.002, "per parameter": 0.010, "flat": 0.004}
    fig = plot_step_times(seconds, "reference")
    ax = fig.axes[0]
    widths = [bar.get_width() for bar in ax.patches]
    assert widths == pytest.approx([2.0, 10.0, 4.0])
    assert [t.get_text().strip() for t in ax.texts] == ["1.00x", "5.00x", "2.00x"]


def test_plot_bucket_sweep_line_and_references():
    fig = plot_bucket_sweep([0.1, 1, 25], [0.01, 0.008, 0.009], {"a": 0.02, "b": 0.005})
    ax = fig.axes[0]
    assert len(ax.lines) == 3 and ax.get_xscale() == "log"
    assert list(ax.lines[0].get_ydata()) == pytest.approx([10.0, 8.0, 9.0])


def test_plot_digits_one_panel_per_image():
    images = [[i / 64 for i in range(64)]] * 4
    fig = plot_digits(images, [1, 2, 3, 4], n=4)
    assert [ax.get_title() for ax in fig.axes] == ["1", "2", "3", "4"]


def test_plot_calls_draws_one_box_per_call_and_marks_mismatches():
    traces = same_on(range(3), "all_reduce", "all_reduce")
    traces[1].pop()
    fig = plot_calls(traces)
    ax = fig.axes[0]
    assert len(ax.patches) == 5 + 1  # five calls, and one band behind the mismatched row
    assert [t.get_text() for t in ax.get_yticklabels()] == ["rank 0", "rank 1", "rank 2"]


def test_plot_timings_two_bars_per_fault_and_the_timeout():
    times = {"skipped collective": (5.04, 0.03, "form_group"),
             "dead engine": (2.1, 11.5, "restart")}
    fig = plot_timings(times, timeout=5)
    assert len(fig.axes[0].patches) == 4 and fig.dpi == DPI


def test_a_wide_picture_of_ranks_fits_the_notebooks_width():
    import torch

    from helpers.figures import MAX_WIDTH, draw_ranks

    rows = [torch.arange(8.0) + r for r in range(4)]
    fig = draw_ranks({"input": rows, "after one phase": rows, "after the other": rows})
    width = fig.get_size_inches()[0]
    assert width <= MAX_WIDTH + 1e-6, f"{width:.2f} in wide"
    small = draw_ranks({"before": [torch.ones(2)] * 2})
    assert small.get_size_inches()[0] < MAX_WIDTH / 2  # few cells: drawn at the usual size
