"""helpers.taught does what the notebooks' own code does: both run on the same ranks and inputs.

The functions are taken from the notebooks' cells as they are, run on real engines beside the
promoted versions, and compared. A lesson edited in its notebook without its copy (or the
other way round) fails here.
"""

from __future__ import annotations

import ast
from pathlib import Path

import nbformat
import pytest

NOTEBOOKS = Path(__file__).resolve().parent.parent / "notebooks"


def taught_in(notebook: str, *names: str, kind: type = ast.FunctionDef) -> str:
    """The source of the named top-level functions (or classes), as the notebook's %%px cells
    define them."""
    found = {}
    for cell in nbformat.read(NOTEBOOKS / notebook, as_version=4).cells:
        if cell.cell_type != "code" or not cell.source.startswith("%%px"):
            continue
        code = cell.source.split("\n", 1)[1]
        for node in ast.parse(code).body:
            if isinstance(node, kind) and node.name in names:
                found[node.name] = ast.get_source_segment(code, node)
    missing = set(names) - set(found)
    assert not missing, f"{notebook} no longer defines {sorted(missing)}"
    return "\n\n".join(found[name] for name in names)


def test_ring_all_reduce_of_notebook_02(cluster3):
    cluster3.view.execute(taught_in("02_collectives.ipynb", "ring_all_reduce"), block=True)
    cluster3.px("""
from helpers import taught
for numel in [world_size, 10, 1001]:
    torch.manual_seed(rank + numel)
    x = torch.randn(numel, device=device)
    mine, theirs, mine_trace, their_trace = x.clone(), x.clone(), [], []
    ring_all_reduce(mine, mine_trace)
    taught.ring_all_reduce(theirs, their_trace)
    assert torch.equal(mine, theirs) and torch.equal(mine_trace[0], their_trace[0]), f"rank {rank}"
""")


def test_send_0_to_1_of_notebook_02(cluster3):
    cluster3.view.execute(taught_in("02_collectives.ipynb", "send_0_to_1"), block=True)
    cluster3.px("""
from helpers import taught
results = []
for send in (send_0_to_1, taught.send_0_to_1):
    t = torch.full((5,), float(rank + 1), device=device)
    send(t)
    results.append(t)
assert torch.equal(results[0], results[1]), f"rank {rank}: {results}"
assert results[1].tolist() == [1.0 if rank == 1 else rank + 1.0] * 5, f"rank {rank}: {results[1]}"
""")


def test_gradient_averages_of_notebook_03(cluster3):
    cluster3.view.execute(taught_in(
        "03_gradient_average.ipynb", "average_gradients", "average_bucket",
        "average_gradients_flat", "make_buckets", "average_gradients_bucketed"), block=True)
    cluster3.px("""
import torch.nn.functional as F
from helpers import taught
from helpers.data import digits, mlp
x, y, _, _ = digits()
def grads(average):
    model = mlp(hidden=32, depth=3, seed=rank)  # a different gradient on every rank
    F.cross_entropy(model(x[rank * 8:(rank + 1) * 8]), y[rank * 8:(rank + 1) * 8]).backward()
    average(model)
    return [p.grad for p in model.parameters()]
pairs = [(average_gradients, taught.average_gradients),
         (average_gradients_flat, taught.average_gradients_flat),
         (lambda m: average_gradients_bucketed(make_buckets(m, 4096)),
          lambda m: taught.average_gradients_bucketed(taught.make_buckets(m, 4096)))]
for mine, theirs in pairs:
    assert all(torch.equal(a, b) for a, b in zip(grads(mine), grads(theirs))), f"rank {rank}"
bucket_sizes = [len(b) for b in make_buckets(mlp(hidden=32, depth=3), 4096)]
assert bucket_sizes == [len(b) for b in taught.make_buckets(mlp(hidden=32, depth=3), 4096)]
""")


def test_training_loop_of_notebook_04(cluster3):
    cluster3.px("""
import torch.nn.functional as F
from torch.utils.data import DataLoader, DistributedSampler, TensorDataset
from helpers.data import digits, mlp
x_train, y_train, _, _ = digits()
train_set = TensorDataset(x_train, y_train)
b, lr = 32, 0.3
""")
    cluster3.view.execute(taught_in("04_ddp.ipynb", "train"), block=True)
    cluster3.px("""
from helpers import taught
mine = train(mlp(seed=0), 12)
theirs = taught.train(mlp(seed=0), train_set, 12, batch=b, lr=lr)
same = [torch.equal(p, q) for p, q in zip(mine.parameters(), theirs.parameters())]
assert all(same), f"rank {rank}: {same}"
""")


def test_a_missing_lesson_is_reported():
    with pytest.raises(AssertionError, match="no longer defines"):
        taught_in("02_collectives.ipynb", "no_such_function")


def test_overlapped_and_bucketed_averages_of_notebook_04(cluster3):
    cluster3.px("import time")
    cluster3.view.execute(taught_in("04_ddp.ipynb", "OverlappedAverage", "BucketedAverage",
                                    kind=ast.ClassDef), block=True)
    cluster3.px("""
import torch.nn.functional as F
from helpers import taught
from helpers.data import digits, mlp
x, y, _, _ = digits()
def grads(make):
    model = mlp(hidden=32, depth=3, seed=0)
    average = make(model)
    F.cross_entropy(model(x[rank * 8:(rank + 1) * 8]), y[rank * 8:(rank + 1) * 8]).backward()
    average.wait()
    return [p.grad for p in model.parameters()], average
pairs = [(OverlappedAverage, taught.OverlappedAverage),
         (lambda m: BucketedAverage(m, 2048), lambda m: taught.BucketedAverage(m, 2048))]
for mine, theirs in pairs:
    (a, avg_a), (b, avg_b) = grads(mine), grads(theirs)
    assert all(torch.equal(p, q) for p, q in zip(a, b)), f"rank {rank}"
assert [len(b) for b in avg_a.buckets] == [len(b) for b in avg_b.buckets], f"rank {rank}"
assert len(avg_b.buckets) > 1, f"rank {rank}: {len(avg_b.buckets)} bucket"
""")
