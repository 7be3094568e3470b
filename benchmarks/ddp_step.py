"""Step time of DDP beside notebook 03's hand-written gradient averages, and the accuracy reached.

Prints figures, asserts nothing (timings depend on the machine and its load). For each model
(the course MLP, and the deeper one notebooks 03 and 04 time), the seconds per training step
of: no communication (the reference), DDP, one all_reduce per parameter, one flattened
all_reduce, with ratios to DDP; then the test accuracy that DDP and the hand-written average
reach after the same training.

    .venv/bin/python benchmarks/ddp_step.py [--ranks N] [--steps 200] [--timed 30]
"""

from __future__ import annotations

import argparse

import torch

from helpers import start_cluster

MODELS = {"course MLP (1 hidden layer of 64)": (64, 1),
          "deep MLP (8 hidden layers of 128)": (128, 8)}
BATCH = 32  # samples per rank and step


# The functions below run on the engines (sent by value; the two small ones are pushed to the
# engines first): they import what they use.
def _where_am_i():
    """On a rank: (rank, world size, its device, whether it computes on a GPU)."""
    import torch
    import torch.distributed as dist

    on_gpu = dist.get_backend() == "nccl"
    device = torch.device("cuda", torch.cuda.current_device()) if on_gpu else torch.device("cpu")
    return dist.get_rank(), dist.get_world_size(), device, on_gpu


def _average_per_parameter(model) -> None:
    """The hand-written average of notebook 03: one all_reduce per parameter, then / n."""
    import torch.distributed as dist

    for p in model.parameters():
        dist.all_reduce(p.grad)
        p.grad /= dist.get_world_size()

def _step_times(hidden: int, depth: int, n: int) -> list[tuple[str, float]]:
    """On every rank: seconds per step of each variant (slowest rank's median of n steps)."""
    import torch
    import torch.distributed as dist
    import torch.nn.functional as F
    from torch.nn.parallel import DistributedDataParallel as DDP

    from helpers.data import digits, mlp
    from helpers.step_timer import time_on_all_ranks

    rank, world_size, device, on_gpu = _where_am_i()

    def flattened(model):
        grads = [p.grad for p in model.parameters()]
        flat = torch.cat([g.reshape(-1) for g in grads])
        dist.all_reduce(flat)
        flat /= world_size
        offset = 0
        for g in grads:
            g.copy_(flat[offset:offset + g.numel()].view_as(g))
            offset += g.numel()

    x, y, _, _ = digits()
    mine = slice(rank * 32, (rank + 1) * 32)  # BATCH samples per rank
    x, y = x[mine].to(device), y[mine].to(device)

    def seconds(model, average=None):
        opt = torch.optim.SGD(model.parameters(), lr=0.01)

        def step():
            opt.zero_grad()
            F.cross_entropy(model(x), y).backward()
            if average is not None:
                average(model)
            opt.step()
        return time_on_all_ranks(step, device, n=n, warmup=5)

    def fresh():
        return mlp(hidden=hidden, depth=depth, seed=0).to(device)

    return [
        ("no communication (reference)", seconds(fresh())),
        ("DDP", seconds(DDP(fresh(), device_ids=[device] if on_gpu else None))),
        ("by hand: one all_reduce per parameter", seconds(fresh(), _average_per_parameter)),
        ("by hand: flattened, one all_reduce", seconds(fresh(), flattened)),
    ]


def _accuracies(steps: int) -> list[tuple[str, float]]:
    """On every rank: test accuracy after steps of SGD (batch 32 per rank, lr 0.3), both ways."""
    import torch
    import torch.nn.functional as F
    from torch.nn.parallel import DistributedDataParallel as DDP
    from torch.utils.data import DataLoader, DistributedSampler, TensorDataset

    from helpers.data import accuracy, digits, mlp

    rank, world_size, device, on_gpu = _where_am_i()

    x_train, y_train, x_test, y_test = (t.to(device) for t in digits())
    train_set = TensorDataset(x_train, y_train)

    def train(model, average=None):
        sampler = DistributedSampler(train_set, world_size, rank, shuffle=True, seed=0)
        loader = DataLoader(train_set, batch_size=32, sampler=sampler)  # BATCH
        opt = torch.optim.SGD(model.parameters(), lr=0.3)
        step, epoch = 0, 0
        while step < steps:
            sampler.set_epoch(epoch)
            for xb, yb in loader:
                opt.zero_grad()
                F.cross_entropy(model(xb), yb).backward()
                if average is not None:
                    average(model)
                opt.step()
                step += 1
                if step == steps:
                    break
            epoch += 1
        return model

    ddp = train(DDP(mlp(seed=0).to(device), device_ids=[device] if on_gpu else None))
    by_hand = train(mlp(seed=0).to(device), _average_per_parameter)
    return [("DDP", accuracy(ddp.module, x_test, y_test)),
            ("by hand, one all_reduce per parameter", accuracy(by_hand, x_test, y_test))]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--ranks", type=int, default=None, help="default: as start_cluster()")
    parser.add_argument("--steps", type=int, default=200, help="training steps for the accuracy")
    parser.add_argument("--timed", type=int, default=30, help="timed steps per variant")
    args = parser.parse_args()
    with start_cluster(n=args.ranks, activate=False) as cluster:
        # the engine-side functions look up these two in the engines' namespace
        cluster.view.push({"_where_am_i": _where_am_i,
                           "_average_per_parameter": _average_per_parameter})
        print(f"torch {torch.__version__}, {cluster.world_size} ranks, backend {cluster.backend}, "
              f"device {cluster.ranks[0].device}, batch {BATCH} per rank")
        for label, (hidden, depth) in MODELS.items():
            times = dict(cluster.view.apply_sync(_step_times, hidden, depth, args.timed)[0])
            print(f"\n{label}: ms per training step (slowest rank's median of {args.timed})")
            for name, s in times.items():
                print(f"  {name:<40} {s * 1e3:8.2f} ms   {s / times['DDP']:5.2f}x DDP")
        accs = cluster.view.apply_sync(_accuracies, args.steps)[0]
        print(f"\ntest accuracy after {args.steps} steps (global batch "
              f"{BATCH * cluster.world_size}):")
        for name, acc in accs:
            print(f"  {name:<40} {acc:.3f}")


if __name__ == "__main__":
    main()
