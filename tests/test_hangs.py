"""Each fault kind of notebook 06 on real engines: the error, the call record, the recovery.

One 3-rank cluster with a 2 s process group timeout serves the module; the last test leaves
a rank dead, and the fixture stops the cluster. Code runs on the engines as text.
"""

from __future__ import annotations

import pytest

from helpers import start_cluster
from helpers.calls.table import rows, table
from helpers.calls.trace import fetch
from helpers.faults import provoke

TIMEOUT = 2
WORKS = """
t = torch.tensor([rank + 1.0], device=device)
dist.all_reduce(t)
assert t.item() == world_size * (world_size + 1) / 2, f"rank {rank}: all_reduce gave {t.item()}"
"""


@pytest.fixture(scope="module")
def cluster():
    with start_cluster(n=3, timeout=TIMEOUT, activate=False, cell_timeout=20) as c:
        yield c


def timed_out(failed: dict[int, str]) -> bool:
    """Gloo errors on every rank, at least one of them a timeout (when the first rank times
    out it closes its connections, so the others may report a closed connection instead)."""
    return (all(m.startswith("RuntimeError") for m in failed.values())
            and any("Timed out" in m for m in failed.values()))


def problems(cluster) -> list[str]:
    return [row.problem for row in rows(fetch(cluster)) if row.problem]


def test_recorded_calls_keep_their_results_and_line_up(cluster):
    cluster.px("""
left, right = (rank - 1) % world_size, (rank + 1) % world_size
got = torch.zeros(1, device=device)
mine = torch.tensor([float(rank)], device=device)
for req in [dist.isend(mine, dst=right), dist.irecv(got, src=left)]:
    req.wait()
assert got.item() == left, f"rank {rank}: isend/irecv gave {got.item()}"
got.zero_()
ops = [dist.P2POp(dist.isend, mine, right), dist.P2POp(dist.irecv, got, left)]
for req in dist.batch_isend_irecv(ops):
    req.wait()
assert got.item() == left, f"rank {rank}: batch_isend_irecv gave {got.item()}"
names = [None] * world_size
dist.all_gather_object(names, f"r{rank}")
assert names == [f"r{r}" for r in range(world_size)], f"rank {rank}: {names}"
pair = dist.new_group([0, 1])
if rank < 2:
    one = torch.ones(1, device=device)
    dist.all_reduce(one, group=pair)
    assert one.item() == 2, f"rank {rank}: subgroup all_reduce gave {one.item()}"
dist.all_reduce(mine, async_op=True).wait()
assert mine.item() == sum(range(world_size)), f"rank {rank}: async all_reduce gave {mine.item()}"
""")
    traces = fetch(cluster)
    assert [e["op"] for e in traces[0]] == [
        "isend", "irecv", "batch_isend_irecv", "all_gather_object", "all_reduce", "all_reduce"]
    assert [e["op"] for e in traces[2]][-2:] == ["all_gather_object", "all_reduce"]
    assert not problems(cluster), table(traces)


def test_ddp_and_distributed_checkpoint_work_with_the_record(cluster, tmp_path):
    cluster.px(f"""
import torch.distributed.checkpoint as dcp
from torch.nn.parallel import DistributedDataParallel as DDP
torch.manual_seed(0)
model = DDP(torch.nn.Linear(4, 2).to(device))
x = torch.full((8, 4), float(rank + 1), device=device)
model(x).sum().backward()
grads = [None] * world_size
dist.all_gather_object(grads, model.module.weight.grad.cpu())
assert all(torch.equal(g, grads[0]) for g in grads), f"rank {{rank}}: DDP gradients differ"
dcp.save({{"model": model.module.state_dict()}}, checkpoint_id="{tmp_path}")
fresh = torch.nn.Linear(4, 2).to(device)
state = {{"model": fresh.state_dict()}}
dcp.load(state, checkpoint_id="{tmp_path}")
fresh.load_state_dict(state["model"])
assert torch.equal(fresh.weight, model.module.weight), f"rank {{rank}}: checkpoint differs"
""")
    traces = fetch(cluster)
    assert "all_gather_object" in [e["op"] for e in traces[0]]
    assert not problems(cluster), table(traces)


def test_a_skipped_collective_is_named_by_monitored_barrier_and_by_the_record(cluster):
    cluster.form_group()
    fault = provoke(cluster, """
from datetime import timedelta
for step in range(2 if rank == 1 else 3):
    dist.monitored_barrier(timeout=timedelta(seconds=1), wait_all_ranks=True)
    dist.all_reduce(torch.ones(2, device=device))
""")
    assert set(fault.error.failed) == {0, 2}, fault.error
    assert "Ranks 1 failed to pass monitoredBarrier" in fault.error.failed[0]
    assert problems(cluster) == ["rank(s) [1] never made this call"]
    cluster.form_group()
    cluster.px(WORKS)


def test_everyone_receiving_first_times_out_and_shows_as_unpaired(cluster):
    fault = provoke(cluster, """
got = torch.zeros(1, device=device)
dist.recv(got, src=(rank - 1) % world_size)
dist.send(got, dst=(rank + 1) % world_size)
""")
    assert set(fault.error.failed) == {0, 1, 2}, fault.error
    assert timed_out(fault.error.failed), fault.error.failed
    assert fault.seconds > TIMEOUT - 0.5, "it ended before the group's timeout could end it"
    assert problems(cluster) == ["rank 0 receives from rank 2, which makes no matching send"]
    cluster.form_group()
    cluster.px(WORKS)


def test_an_exception_on_one_rank_leaves_the_others_waiting_until_the_timeout(cluster):
    fault = provoke(cluster, """
x = torch.ones(2, device=device)
dist.all_reduce(x)
if rank == 2:
    raise ValueError("rank 2: a bad batch")
dist.all_reduce(x)
""")
    assert fault.error.failed[2] == "ValueError: rank 2: a bad batch"
    assert timed_out({r: fault.error.failed[r] for r in (0, 1)}), fault.error.failed
    assert problems(cluster) == ["rank(s) [2] never made this call"]
    cluster.form_group()
    cluster.px(WORKS)


def test_a_shape_mismatch_is_reported_with_detail_and_aborts_a_rank_without(cluster):
    cluster.px("import os\nos.environ['TORCH_DISTRIBUTED_DEBUG'] = 'DETAIL'\n"
               "dist.set_debug_level_from_env()")
    cluster.form_group()
    pids = [r.pid for r in cluster.ranks]
    mismatch = "t = torch.ones(4000 if rank == 1 else 4, device=device)\ndist.all_reduce(t)"
    fault = provoke(cluster, mismatch)
    assert set(fault.error.failed) == {0, 1, 2} and not fault.error.dead, fault.error
    assert all("Detected mismatch between collectives" in m for m in fault.error.failed.values())
    cluster.px(WORKS)  # the check ran before the collective: the group is still usable
    assert [r.pid for r in cluster.ranks] == pids
    cluster.px("os.environ['TORCH_DISTRIBUTED_DEBUG'] = 'OFF'\ndist.set_debug_level_from_env()")
    cluster.form_group()
    fault = provoke(cluster, mismatch, timeout=15)
    assert fault.error.dead == [0], fault.error  # rank 1 sent too much; rank 0 aborts on it
    assert problems(cluster) == ["different shapes: rank 1 [4000], rank 2 [4]"]
