"""Code the notebooks have already taught, promoted once so that others can import it.

The lessons stay typed out in their notebooks: the learner writes the ring all-reduce in
notebook 02 and the gradient averages in notebook 03. Once taught, a later notebook or a
benchmark imports the version here instead of keeping a copy of its own. These versions
ask the process group for the rank and the world size instead of reading the names that
``%%px`` cells see, and otherwise do exactly what the notebook's code does
(``tests/test_taught.py`` runs both on the same inputs and compares).
"""

from __future__ import annotations

from collections.abc import Callable

import torch
import torch.distributed as dist
import torch.nn.functional as F
from torch import nn
from torch.utils.data import DataLoader, Dataset, DistributedSampler

from .timing import mark


# ---- notebook 02 -------------------------------------------------------------------------
def ring_all_reduce(t: torch.Tensor, trace: list | None = None) -> torch.Tensor:
    """Sum t over all ranks, in place, with point-to-point calls only (notebook 02).

    Reduce-scatter then all-gather around the ring; `trace` (a list) receives a copy of t
    between the two phases.
    """
    rank, n = dist.get_rank(), dist.get_world_size()
    right, left = (rank + 1) % n, (rank - 1) % n
    chunks = list(t.view(-1).tensor_split(n))  # views into t

    def exchange(to_send: torch.Tensor, to_receive: torch.Tensor) -> None:
        ops = [dist.P2POp(dist.isend, to_send, right), dist.P2POp(dist.irecv, to_receive, left)]
        for req in dist.batch_isend_irecv(ops):
            req.wait()

    for s in range(n - 1):  # phase 1: reduce-scatter
        mine = chunks[(rank - s - 1) % n]
        incoming = torch.empty_like(mine)
        exchange(chunks[(rank - s) % n], incoming)
        mine += incoming
    if trace is not None:
        trace.append(t.clone())
    for s in range(n - 1):  # phase 2: all-gather
        exchange(chunks[(rank + 1 - s) % n], chunks[(rank - s) % n])
    return t


def send_0_to_1(t: torch.Tensor) -> None:
    """Rank 0 sends t to rank 1, which receives it into its t; the other ranks do nothing
    (notebook 02's bandwidth lab)."""
    rank = dist.get_rank()
    if rank == 0:
        dist.send(t, dst=1)
    elif rank == 1:
        dist.recv(t, src=0)


# ---- notebook 03 -------------------------------------------------------------------------
def average_gradients(model: nn.Module) -> None:
    """After backward(): replace each gradient by its mean over all ranks (notebook 03)."""
    world_size = dist.get_world_size()
    for p in model.parameters():
        dist.all_reduce(p.grad, op=dist.ReduceOp.SUM)
        p.grad /= world_size


def average_bucket(params: list[nn.Parameter]) -> None:
    """One all_reduce for the gradients of params: flatten, sum, divide, copy back (nb 03)."""
    grads = [p.grad for p in params]
    flat = torch.cat([g.reshape(-1) for g in grads])
    dist.all_reduce(flat, op=dist.ReduceOp.SUM)
    flat /= dist.get_world_size()
    offset = 0
    for g in grads:
        g.copy_(flat[offset:offset + g.numel()].view_as(g))
        offset += g.numel()


def average_gradients_flat(model: nn.Module) -> None:
    """One all_reduce over all gradients (notebook 03)."""
    average_bucket(list(model.parameters()))


def make_buckets(model: nn.Module, cap_bytes: int) -> list[list[nn.Parameter]]:
    """Consecutive parameters in buckets of at most cap_bytes; a larger one alone (nb 03)."""
    buckets, current, size = [], [], 0
    for p in model.parameters():
        nbytes = p.numel() * p.element_size()
        if current and size + nbytes > cap_bytes:
            buckets.append(current)
            current, size = [], 0
        current.append(p)
        size += nbytes
    return buckets + [current] if current else buckets


def average_gradients_bucketed(buckets: list[list[nn.Parameter]]) -> None:
    """One all_reduce per bucket (notebook 03)."""
    for bucket in buckets:
        average_bucket(bucket)


# ---- notebook 04 -------------------------------------------------------------------------
def train(
    model: nn.Module,
    train_set: Dataset,
    steps: int,
    *,
    batch: int,
    lr: float,
    average: Callable[[nn.Module], None] | None = None,
) -> nn.Module:
    """SGD for `steps` batches of this rank's DistributedSampler (seed 0, set_epoch every
    epoch); average(model) after backward() if given (notebook 04's loop)."""
    sampler = DistributedSampler(train_set, num_replicas=dist.get_world_size(),
                                 rank=dist.get_rank(), shuffle=True, seed=0)
    loader = DataLoader(train_set, batch_size=batch, sampler=sampler)
    opt = torch.optim.SGD(model.parameters(), lr=lr)
    step, epoch = 0, 0
    while step < steps:
        sampler.set_epoch(epoch)
        for x, y in loader:
            opt.zero_grad()
            out = model(x)
            F.cross_entropy(out, y.to(out.device)).backward()
            if average is not None:
                average(model)
            opt.step()
            step += 1
            if step == steps:
                break
        epoch += 1
    return model


# ---- notebook 04, step 10 ----------------------------------------------------------------
class OverlappedAverage:
    """Average each gradient over the ranks while backward() runs: an async all_reduce per
    parameter, started by a hook; wait() before the optimizer step (notebook 04)."""

    def __init__(self, model: nn.Module):
        self.pending: list = []
        self.log: list | None = None
        self.device = next(model.parameters()).device
        for p in model.parameters():
            p.register_post_accumulate_grad_hook(self.ready)

    def ready(self, p: nn.Parameter) -> None:
        """Autograd calls this as soon as p.grad is complete: start its all_reduce."""
        self.started(dist.all_reduce(p.grad, async_op=True), [p])

    def started(self, work: dist.Work, grads: object) -> None:
        self.pending.append((work, grads))
        if self.log is not None:
            begun, log = mark(self.device), self.log
            # gloo: called once the all-reduce has completed; NCCL: called at once, with a
            # current stream that waits for the all-reduce, so the CUDA event recorded there
            # completes with it
            work.get_future().then(lambda _: log.append(("all_reduce", begun,
                                                          mark(self.device))))

    def wait(self) -> None:
        """Before the optimizer step: wait for every all_reduce started during backward()."""
        world_size = dist.get_world_size()
        for work, grads in self.pending:
            work.wait()
            for p in grads:
                p.grad /= world_size
        self.pending.clear()


class BucketedAverage(OverlappedAverage):
    """Gradients in DDP's buckets for cap_bytes, in the order backward() produces them; one
    async all_reduce per bucket, started when its last gradient is in (notebook 04)."""

    def __init__(self, model: nn.Module, cap_bytes: int = 1 << 20):
        self.pending, self.log = [], None
        self.device = next(model.parameters()).device
        self.buckets = self.ddp_buckets(model, cap_bytes)
        self.bucket_of = {p: i for i, bucket in enumerate(self.buckets) for p in bucket}
        self.missing = [len(bucket) for bucket in self.buckets]
        for p in model.parameters():
            p.register_post_accumulate_grad_hook(self.ready)

    @staticmethod
    def ddp_buckets(model: nn.Module, cap_bytes: int) -> list[list[nn.Parameter]]:
        """DDP's rule: the parameters in the order backward() produces their gradients, each
        bucket closed at the one that brings it to cap_bytes (notebook 04)."""
        buckets: list[list[nn.Parameter]] = []
        current: list[nn.Parameter] = []
        size = 0
        for p in reversed(list(model.parameters())):  # the last layer's gradients come first
            current.append(p)
            size += p.numel() * p.element_size()
            if size >= cap_bytes:
                buckets.append(current)
                current, size = [], 0
        return buckets + [current] if current else buckets

    def ready(self, p: nn.Parameter) -> None:
        i = self.bucket_of[p]
        self.missing[i] -= 1
        if self.missing[i] == 0:  # the bucket's last gradient is in: all-reduce the bucket
            self.missing[i] = len(self.buckets[i])
            flat = torch.cat([q.grad.reshape(-1) for q in self.buckets[i]])
            self.started(dist.all_reduce(flat, async_op=True), (self.buckets[i], flat))

    def wait(self) -> None:
        world_size = dist.get_world_size()
        for work, (bucket, flat) in self.pending:
            work.wait()
            flat /= world_size
            offset = 0
            for q in bucket:
                q.grad.copy_(flat[offset:offset + q.numel()].view_as(q.grad))
                offset += q.numel()
        self.pending.clear()
