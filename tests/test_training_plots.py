"""The training figures draw what they are given, and stay small."""

from __future__ import annotations

import matplotlib

matplotlib.use("Agg")

import matplotlib.pyplot as plt  # noqa: E402
import pytest  # noqa: E402

from helpers.training_plots import (  # noqa: E402
    DPI,
    plot_bucket_sweep,
    plot_digits,
    plot_loss,
    plot_shards,
    plot_step_times,
)


@pytest.fixture(autouse=True)
def _close_figures():
    yield
    plt.close("all")


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
