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


@pytest.mark.parametrize("code, says", [
    ("works = [dist.all_reduce(t, async_op=True)]\nfor w in works:\n    w.wait()\n"
     "assert all(w.is_completed() for w in works)", "is_completed() asserted after wait()"),
    ("work = dist.all_reduce(t, async_op=True)\nwork.wait()\nassert work.is_completed()",
     "is_completed() asserted after wait()"),
    ("begun = time.perf_counter()\nwork = dist.all_reduce(g, async_op=True)\n"
     "work.get_future().then(lambda _: log.append((begun, time.perf_counter())))",
     "a clock read in a Work future's callback"),
    ("def done(_):\n    ends.append(time.perf_counter())\n"
     "dist.all_reduce(g, async_op=True).get_future().then(done)",
     "a clock read in a Work future's callback"),
    ("t0 = time.perf_counter()\nfor _ in range(5):\n    dist.all_reduce(t)\n"
     "elapsed = time.perf_counter() - t0", "the clock is read after dist.all_reduce"),
    ("start = time.time()\nwork = dist.broadcast(t, src=0, async_op=True)\nwork.wait()\n"
     "took = time.time() - start", "the clock is read after dist.broadcast"),
])
def test_host_side_timing_that_holds_only_on_the_cpu_is_flagged(code, says):
    messages = [m for _, m in lint_source(code)]
    assert any(m.startswith(says) for m in messages), messages


@pytest.mark.parametrize("code", [
    "work = dist.all_reduce(t, async_op=True)\nwork.wait()\nsync(device)\n"
    "assert work.is_completed()",                                   # synchronised first
    "work = dist.all_reduce(t, async_op=True)\nassert work.wait()",  # nothing of is_completed
    "work = dist.all_reduce(g, async_op=True)\nwork.get_future().then(lambda f: f.value())",
    "t0 = time.perf_counter()\nfor _ in range(5):\n    dist.all_reduce(t)\nsync(device)\n"
    "elapsed = time.perf_counter() - t0",
    "t0 = time.perf_counter()\ndist.all_reduce(t)\nvalue = t.item()\n"
    "elapsed = time.perf_counter() - t0",                           # .item() waits for it
    "t0 = time.perf_counter()\ndist.all_reduce(t, group=gloo)\n"
    "elapsed = time.perf_counter() - t0",                           # a CPU group of its own
    "dist.all_reduce(t)\nt0 = time.perf_counter()\nx = f()\nelapsed = time.perf_counter() - t0",
])
def test_timing_that_waits_for_the_device_passes(code):
    assert lint_source(code) == []
