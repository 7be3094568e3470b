"""helpers.plots: per-rank pictures and bandwidth plots, drawn from synthetic tensors."""

from __future__ import annotations

import matplotlib

matplotlib.use("Agg")

import matplotlib.pyplot as plt  # noqa: E402
import pytest  # noqa: E402
import torch  # noqa: E402

from helpers.plots import draw_ranks, plot_bandwidth, to_cpu  # noqa: E402


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
