"""Every %%px cell reads right under nccl: no CPU tensor on the default group, no ungrouped
isend/irecv (tests/pxlint.py); and the lint itself catches the bugs it is there for."""

from __future__ import annotations

from pathlib import Path

import pytest
from pxlint import lint_notebook, lint_source

NOTEBOOKS = Path(__file__).resolve().parent.parent / "notebooks"


@pytest.mark.parametrize("path", sorted(NOTEBOOKS.rglob("*.ipynb")), ids=lambda p: p.name)
def test_every_px_cell_reads_right_under_nccl(path):
    findings = lint_notebook(path)
    assert not findings, "\n".join(map(str, findings))


@pytest.mark.parametrize("code", [
    "t = torch.tensor([float(rank)])\ndist.all_reduce(t)",                 # 00's old sum
    "dist.broadcast(torch.zeros(4), src=0)",                               # made in the call
    "out = [torch.zeros(1) for _ in range(world_size)]\n"
    "dist.all_gather(out, torch.ones(1, device=device))",                 # a list of them
    "x = torch.ones(2, device=device)\nx = torch.ones(2)\ndist.send(x, dst=1)",  # reassigned
    "ops = [dist.P2POp(dist.isend, torch.ones(1), 1)]",
])
def test_a_cpu_tensor_on_the_default_group_is_flagged(code):
    assert [m for _, m in lint_source(code)] and "without a device" in lint_source(code)[0][1]


@pytest.mark.parametrize("code", [
    "t = torch.ones(4, device=device)\ndist.all_reduce(t)",
    't = torch.ones(4, device="cpu")\ndist.all_reduce(t)',                 # says so: deliberate
    "t = torch.ones(4)\ndist.all_reduce(t, group=gloo_group)",             # a group of its own
    "t = torch.ones(4).to(device)\ndist.all_reduce(t)",
    "t = torch.ones(4)\nt = torch.ones(4, device=device)\ndist.all_reduce(t)",
    "x = shift_input(rank).to(device)\ndist.send(x, dst=1)",
])
def test_tensors_on_device_or_said_to_be_on_the_cpu_pass(code):
    assert lint_source(code) == []


def test_an_ungrouped_isend_irecv_pair_is_flagged_and_exclusive_branches_are_not():
    ring = ("reqs = [dist.isend(a, dst=right), dist.irecv(b, src=left)]\n"
            "for r in reqs:\n    r.wait()")
    assert [m for _, m in lint_source(ring)] == [
        "an isend and an irecv posted one by one on the same rank can deadlock under NCCL: "
        "post them together with dist.batch_isend_irecv"]
    tags = ("if rank == 0:\n    reqs = [dist.isend(a, dst=1), dist.isend(b, dst=1)]\n"
            "elif rank == 1:\n    reqs = [dist.irecv(b, src=0), dist.irecv(a, src=0)]")
    assert lint_source(tags) == []
    grouped = "ops = [dist.P2POp(dist.isend, a, right), dist.P2POp(dist.irecv, b, left)]"
    assert lint_source(grouped) == []
    same_branch = ("if rank < 2:\n    dist.isend(a, dst=1 - rank).wait()\n"
                   "    dist.irecv(b, src=1 - rank).wait()")
    assert len(lint_source(same_branch)) == 1
