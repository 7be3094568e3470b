"""The exercises of notebook 05 (checkpointing):
their inputs, right answers and rules."""

from __future__ import annotations

import random
from typing import Any

import torch
from torch import nn

from ..data import mlp
from . import trial
from .core import Calls, Exercise
from .means import (
    no_communication,
    ops,
)


def _checkpoint_dir(seed: int, rank: int) -> Any:
    import tempfile
    from pathlib import Path

    path = Path(tempfile.gettempdir()) / f"course-exercise-{seed}-{rank}"
    path.mkdir(exist_ok=True)
    return path


def _remove_checkpoints(rank: int, seed: int) -> None:
    """Remove the files this rank's checks wrote (both runs: seed and seed + 1)."""
    import shutil
    import tempfile
    from pathlib import Path

    for s in (seed, seed + 1):
        shutil.rmtree(Path(tempfile.gettempdir()) / f"course-exercise-{s}-{rank}",
                      ignore_errors=True)


def _wrong_way_args(rank: int, size: int, device: Any, group: Any, seed: int) -> tuple:
    path = _checkpoint_dir(seed, rank) / "wrong_way.pt"
    model = mlp(seed=seed % 1000)  # saved the wrong way: with DDP's "module." on every key
    torch.save({f"module.{k}": v for k, v in model.state_dict().items()}, path)
    return (str(path),)


def _state_of(args: tuple, returned: Any) -> Any:
    if not isinstance(returned, nn.Module):
        return returned
    return {k: v.detach().cpu() for k, v in returned.state_dict().items()}


def _wrong_way_expected(rank: int, size: int, seed: int) -> dict[str, torch.Tensor]:
    return dict(mlp(seed=seed % 1000).state_dict())


LOAD_WRONG_WAY = Exercise("load_wrong_way", _wrong_way_args, _wrong_way_expected,
                          no_communication, "the weights of the file", collect=_state_of,
                          cleanup=_remove_checkpoints)


def _newest_setup(seed: int) -> list[tuple[int, str]]:
    """(step, kind) of the files the directory holds; kind: good, torn, temporary, corrupt."""
    gen = random.Random(seed)
    steps = sorted(gen.sample(range(1, 90), 5))
    kinds = ["good", "good"] + gen.sample(["torn", "corrupt", "temporary"], 3)
    gen.shuffle(kinds)
    if "good" not in kinds[:3]:
        kinds[gen.randrange(3)] = "good"
    return list(zip(steps, kinds))


def _newest_args(rank: int, size: int, device: Any, group: Any, seed: int) -> tuple:
    from ..checkpoint import atomic_save, checkpoint_path

    directory = _checkpoint_dir(seed, rank) / "run"
    directory.mkdir(exist_ok=True)
    for step, kind in _newest_setup(seed):
        path = checkpoint_path(directory, step)
        atomic_save({"step": step, "w": torch.full((4000,), float(step))}, path)
        data = path.read_bytes()
        if kind == "torn":
            path.write_bytes(data[: len(data) // 2])
        elif kind == "corrupt":
            flipped = bytearray(data)
            flipped[len(flipped) // 2] ^= 0xFF
            path.write_bytes(bytes(flipped))
        elif kind == "temporary":
            path.rename(directory / f".{path.name}.x1y2z3.partial")
    return (str(directory),)


def _newest_expected(rank: int, size: int, seed: int) -> str:
    import tempfile
    from pathlib import Path

    step = max(s for s, kind in _newest_setup(seed) if kind == "good")
    return str(Path(tempfile.gettempdir()) / f"course-exercise-{seed}-{rank}" / "run"
               / f"step-{step:06d}.pt")


def _as_str(args: tuple, returned: Any) -> Any:
    from pathlib import Path

    return str(returned) if isinstance(returned, Path) else returned


NEWEST_LOADABLE = Exercise("newest_loadable", _newest_args, _newest_expected, no_communication,
                           "", collect=_as_str, cases=3, cleanup=_remove_checkpoints)


def _share_args(rank: int, size: int, device: Any, group: Any, seed: int) -> tuple:
    import torch.distributed as dist

    path = _checkpoint_dir(seed, 0) / "shared.pt"
    if rank == 0:
        torch.save({k: v for k, v in mlp(seed=seed % 1000).state_dict().items()}, path)
    dist.barrier(group=group)
    trial.watch(path)
    return str(path), mlp(seed=(seed + 1 + rank) % 1000).to(device)


def _share_state(args: tuple, returned: Any) -> dict[str, torch.Tensor]:
    return {k: v.detach().cpu() for k, v in args[1].state_dict().items()}


def _share_opened(args: tuple, returned: Any) -> int:
    return trial.opened(args[0])


def _share_means(calls: Calls, rank: int, size: int, observed: Any) -> str | None:
    if rank != 0 and observed:
        return f"rank {rank} opened the file itself: only rank 0 may read it"
    if rank == 0 and not observed:
        return "rank 0 never opened the file"
    if not ops(calls, "collective"):
        return "made no collective call: the weights must reach the other ranks from rank 0"
    return None


LOAD_AND_SHARE = Exercise(
    "load_and_share", _share_args, _wrong_way_expected, _share_means,
    "only rank 0 reads the file", collect=_share_state, observe=_share_opened,
    cleanup=_remove_checkpoints)
