"""Step time of DDP beside notebook 03's hand-written gradient averages, and the accuracy reached.

Prints figures, asserts nothing (timings depend on the machine and its load). For each model
(the course MLP, and the deeper one notebooks 03 and 04 time), the seconds per training step
of: no communication (the reference), DDP, notebook 03's averages after backward() (one
all_reduce per parameter; one flattened all_reduce), and notebook 04's averages during
backward() (one async all_reduce per parameter; DDP's buckets at two caps: 1 MiB, one bucket for
these models, and 0.125 MiB, several), with ratios to DDP; then
the test accuracy that DDP and the hand-written average reach after the same training. The
averages and the training loop are the notebooks' own, imported from helpers.taught.

    .venv/bin/python benchmarks/ddp_step.py [--ranks N] [--steps 200] [--timed 30]
"""

from __future__ import annotations

import argparse

import torch

from helpers import start_cluster

MODELS = {"course MLP (1 hidden layer of 64)": (64, 1),
          "deep MLP (8 hidden layers of 128)": (128, 8)}
BATCH = 32  # samples per rank and step


DDP_DEFAULT = "DDP, default buckets (1 MiB first, then 25 MiB)"
DDP_SMALL = "DDP, bucket_cap_mb=0.125"
BY_HAND_SMALL = "during backward: DDP's buckets at 0.125 MiB"

def step_times(hidden: int, depth: int, repeats: int) -> list[tuple[str, float]]:
    """On every rank: seconds per step of each variant (slowest rank, median of repeats)."""
    import torch
    import torch.nn.functional as F
    from torch.nn.parallel import DistributedDataParallel as DDP

    from helpers.cluster.engine import whereami
    from helpers.data import digits, mlp
    from helpers.taught import (
        BucketedAverage,
        OverlappedAverage,
        average_gradients,
        average_gradients_flat,
    )
    from helpers.timing import time_on_all_ranks

    rank, _, device = whereami()
    x, y, _, _ = digits()
    mine = slice(rank * BATCH, (rank + 1) * BATCH)
    x, y = x[mine].to(device), y[mine].to(device)

    def seconds(model, average=None):
        opt = torch.optim.SGD(model.parameters(), lr=0.01)

        def step():
            opt.zero_grad()
            F.cross_entropy(model(x), y).backward()
            if average is not None:
                average(model)
            opt.step()
        return time_on_all_ranks(step, device, warmup=5, repeats=repeats)

    def fresh():
        return mlp(hidden=hidden, depth=depth, seed=0).to(device)

    def during_backward(average_class, *args):
        model = fresh()
        average = average_class(model, *args)
        return seconds(model, lambda m: average.wait())

    ddp_args = {"device_ids": [device] if device.type == "cuda" else None}

    return [
        ("no communication (reference)", seconds(fresh())),
        (DDP_DEFAULT, seconds(DDP(fresh(), **ddp_args))),
        (DDP_SMALL, seconds(DDP(fresh(), bucket_cap_mb=0.125, **ddp_args))),
        ("after backward: one all_reduce per parameter", seconds(fresh(), average_gradients)),
        ("after backward: flattened, one all_reduce", seconds(fresh(), average_gradients_flat)),
        ("during backward: one all_reduce per parameter", during_backward(OverlappedAverage)),
        ("during backward: DDP's buckets at 1 MiB", during_backward(BucketedAverage)),
        (BY_HAND_SMALL, during_backward(BucketedAverage, 128 * 1024)),
    ]


def accuracies(steps: int) -> list[tuple[str, float]]:
    """On every rank: test accuracy after `steps` of notebook 04's loop, DDP and by hand."""
    from torch.nn.parallel import DistributedDataParallel as DDP
    from torch.utils.data import TensorDataset

    from helpers.cluster.engine import whereami
    from helpers.data import accuracy, digits, mlp
    from helpers.taught import average_gradients, train

    _, _, device = whereami()
    x_train, y_train, x_test, y_test = (t.to(device) for t in digits())
    train_set = TensorDataset(x_train, y_train)
    ddp = DDP(mlp(seed=0).to(device), device_ids=[device] if device.type == "cuda" else None)
    train(ddp, train_set, steps, batch=BATCH, lr=0.3)
    by_hand = train(mlp(seed=0).to(device), train_set, steps, batch=BATCH, lr=0.3,
                    average=average_gradients)
    return [("DDP", accuracy(ddp.module, x_test, y_test)),
            ("by hand, one all_reduce per parameter", accuracy(by_hand, x_test, y_test))]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--ranks", type=int, default=None, help="default: as start_cluster()")
    parser.add_argument("--steps", type=int, default=200, help="training steps for the accuracy")
    parser.add_argument("--timed", type=int, default=30, help="timed steps per variant")
    args = parser.parse_args()
    with start_cluster(n=args.ranks, activate=False) as cluster:
        cluster.view.push({"BATCH": BATCH, "DDP_DEFAULT": DDP_DEFAULT, "DDP_SMALL": DDP_SMALL,
                           "BY_HAND_SMALL": BY_HAND_SMALL})
        print(f"torch {torch.__version__}, {cluster.world_size} ranks, backend {cluster.backend}, "
              f"device {cluster.ranks[0].device}, batch {BATCH} per rank")
        for label, (hidden, depth) in MODELS.items():
            times = dict(cluster.view.apply_sync(step_times, hidden, depth, args.timed)[0])
            print(f"\n{label}: ms per training step (slowest rank, median of {args.timed})")
            ddp = times[DDP_DEFAULT]
            for name, s in times.items():
                print(f"  {name:<48} {s * 1e3:8.2f} ms   {s / ddp:5.2f}x DDP")
            print(f"  by hand / DDP, both in DDP's buckets at 0.125 MiB: "
                  f"{times[BY_HAND_SMALL] / times[DDP_SMALL]:.2f}")
        accs = cluster.view.apply_sync(accuracies, args.steps)[0]
        print(f"\ntest accuracy after {args.steps} steps (global batch "
              f"{BATCH * cluster.world_size}):")
        for name, acc in accs:
            print(f"  {name:<40} {acc:.3f}")


if __name__ == "__main__":
    main()
