"""The exercises of notebook 05 (checkpointing):
their inputs, right answers and rules.

Beyond the value, the checkers hold an answer to what the exercises' text asks: a *model* is
returned and its file's folder left as it was (exercise 1); the directory is left as it was,
and the steps straddle 10**6 so that names sorted as strings mislead (exercise 2); only rank 0
reads the file, the weights travel by collectives, every async request is waited on, and the
model keeps its mode and device (exercise 3). Every ``torch.load`` of the exercise's file
keeps ``weights_only=True`` (an audit hook sees an unrestricted unpickler at work)."""

from __future__ import annotations

import hashlib
import os
import random
import sys
from pathlib import Path
from typing import Any

import torch
from torch import nn

from ..data import mlp
from . import trial
from .core import Calls, Exercise
from .means import collectives_only, no_communication

# ---- what the checks remember on a rank between writing the inputs and judging the answer ---
_file_weights: dict[str, dict[str, torch.Tensor]] = {}  # exercise 1: path -> the file's weights
_devices: dict[str, Any] = {}  # exercise 1: path -> the rank's device
_listings: dict[str, dict[str, str]] = {}  # file or directory -> {name: sha256} of its folder
_unsafe_loads: dict[str, int] = {}  # path -> torch.load calls that unpickled it unrestricted
_hooked: list[bool] = []


def _unsafe_audit(event: str, args: tuple) -> None:
    """Count loads of a watched file by torch.load(..., weights_only=False): only that path
    unpickles with pickle's own find_class (weights_only=True never calls it)."""
    if event != "pickle.find_class" or not _unsafe_loads:
        return
    frame = sys._getframe(1)
    while frame is not None:
        code = frame.f_code
        if code.co_name == "load" and code.co_filename == torch.serialization.__file__:
            f = frame.f_locals.get("f")
            name = f if isinstance(f, str | bytes | os.PathLike) else getattr(f, "name", None)
            if isinstance(name, str | bytes | os.PathLike):
                path = os.path.abspath(os.fsdecode(name))
                if path in _unsafe_loads:
                    _unsafe_loads[path] += 1
            return
        frame = frame.f_back


def _watch_unsafe(path: str | os.PathLike) -> None:
    """From now on, count the loads of path that do not keep weights_only=True."""
    if not _hooked:  # an audit hook cannot be removed: add it once per process
        sys.addaudithook(_unsafe_audit)
        _hooked.append(True)
    _unsafe_loads[os.path.abspath(os.fspath(path))] = 0


def _unsafe(path: str | os.PathLike, who: str) -> str | None:
    """What to say if path was loaded with weights_only=False since _watch_unsafe(path)."""
    if _unsafe_loads.get(os.path.abspath(os.fspath(path)), 0):
        return (f"{who} loaded the file with weights_only=False, which lets a file run code: "
                "keep weights_only=True (the default)")
    return None


def _folder(seed: int, rank: int) -> Path:
    """The folder of one rank's files for one check."""
    import tempfile

    return Path(tempfile.gettempdir()) / f"course-exercise-{seed}-{rank}"


def _checkpoint_dir(seed: int, rank: int) -> Path:
    path = _folder(seed, rank)
    path.mkdir(exist_ok=True)
    return path


def _remove_checkpoints(rank: int, seed: int) -> None:
    """Remove the files this rank's checks wrote (both runs: seed and seed + 1), and forget
    what the checks remembered about them."""
    import shutil

    for s in (seed, seed + 1):
        shutil.rmtree(_folder(s, rank), ignore_errors=True)
        folders = tuple(os.path.join(os.path.abspath(_folder(s, r)), "") for r in (rank, 0))
        for memory in (_file_weights, _devices, _listings, _unsafe_loads):  # (exercise 3 uses
            for key in [k for k in memory if os.path.abspath(k).startswith(folders)]:  # rank 0's)
                del memory[key]


def _file_model(seed: int) -> dict[str, torch.Tensor]:
    """The weights the checks save (mlp seeds the global generator: keep the caller's)."""
    with torch.random.fork_rng(devices=[]):
        return dict(mlp(seed=seed % 1000).state_dict())


def _on(tensors: Any, want: torch.device) -> bool:
    """Whether every tensor is on the device want ("cuda" without an index: any GPU)."""
    return all(t.device.type == want.type and want.index in (None, t.device.index)
               for t in tensors)


def _snapshot(directory: Path) -> dict[str, str]:
    """{name: sha256 of its bytes} of every file in the directory."""
    return {p.name: hashlib.sha256(p.read_bytes()).hexdigest()
            for p in sorted(directory.iterdir()) if p.is_file()}


def _changes(before: dict[str, str], now: dict[str, str]) -> str:
    """'removed [...], rewrote [...], added [...]', naming only what happened."""
    said = [f"{what} {names}" for what, names in (
        ("removed", sorted(set(before) - set(now))),
        ("rewrote", sorted(k for k in before if k in now and now[k] != before[k])),
        ("added", sorted(set(now) - set(before)))) if names]
    return ", ".join(said)


def _folder_changes(path: str, who: str, only: str) -> str | None:
    """What to say if the folder of path (snapshot in _listings[path]) changed."""
    before, now = _listings[path], _snapshot(Path(path).parent)
    if now == before:
        return None
    return f"{who} changed the folder of {Path(path).name} ({_changes(before, now)}): {only}, " \
           "write nothing"


# ---- exercise 1: a checkpoint saved the wrong way ------------------------------------------
def _wrong_way_args(rank: int, size: int, device: Any, group: Any, seed: int) -> tuple:
    path = str(_checkpoint_dir(seed, rank) / "wrong_way.pt")
    weights = _file_model(seed)  # saved the wrong way: with DDP's "module." on every key
    torch.save({f"module.{k}": v for k, v in weights.items()}, path)
    _file_weights[path], _devices[path] = weights, torch.device(device)
    _listings[path] = _snapshot(Path(path).parent)
    _watch_unsafe(path)
    return (path,)


def _returned_model(returned: Any) -> nn.Module | None:
    """The returned object if it is a plain model (not DDP), else None."""
    from torch.nn.parallel import DistributedDataParallel

    if isinstance(returned, nn.Module) and not isinstance(returned, DistributedDataParallel):
        return returned
    return None


def _state_of(args: tuple, returned: Any) -> Any:
    """The weights of a returned plain model, judged as values. Anything else is judged by
    _what_was_returned, whose message can say what came back (the value rule would only say
    "expected a dict"): it is given the file's weights here, so that that rule speaks."""
    model = _returned_model(returned)
    if model is None:
        return _file_weights[args[0]]
    return {k: v.detach().cpu() for k, v in model.state_dict().items()}


def _what_was_returned(args: tuple, returned: Any) -> str | None:
    """What is wrong with the returned object itself (a model, plain, on device), and with how
    the file was loaded; None if nothing."""
    from torch.nn.parallel import DistributedDataParallel

    if problem := _unsafe(args[0], "load_wrong_way"):
        return problem
    if problem := _folder_changes(args[0], "load_wrong_way", "read the file"):
        return problem
    want = _devices[args[0]]
    if isinstance(returned, DistributedDataParallel):
        return "load_wrong_way gave a DDP model: return the plain mlp() (no DDP wrapper)"
    if _returned_model(returned) is None:
        what = "None" if returned is None else f"a {type(returned).__name__}"
        return (f"load_wrong_way gave {what}, not a model: return a plain mlp() on {want} "
                "holding the file's weights")
    if not _on(returned.state_dict().values(), want):
        where = sorted({str(t.device) for t in returned.state_dict().values()})
        return f"load_wrong_way gave a model on {where}, expected it on {want}"
    return None


def _wrong_way_expected(rank: int, size: int, seed: int) -> dict[str, torch.Tensor]:
    return _file_model(seed)


def _wrong_way_means(calls: Calls, rank: int, size: int, observed: Any) -> str | None:
    return observed or no_communication(calls, rank, size, observed)


LOAD_WRONG_WAY = Exercise("load_wrong_way", _wrong_way_args, _wrong_way_expected,
                          _wrong_way_means, "a plain model on the rank's device, the weights "
                          "of the file, loaded with weights_only=True", collect=_state_of,
                          observe=_what_was_returned, cleanup=_remove_checkpoints, again=False)


# ---- exercise 2: the newest checkpoint that loads ------------------------------------------
def _newest_setup(seed: int) -> list[tuple[int, str]]:
    """(step, kind) of the files the directory holds; kind: good, torn, temporary, corrupt.

    Every bad kind sits above the newest good checkpoint, so that an answer which skips one
    of the checks (opens nothing, or trusts torch.load without the checksum) is wrong in
    every case. The steps are irregular and straddle 10**6, where the names grow from six
    digits to seven: the newest good step has seven, the older good ones six, so that an
    answer that sorts the names as strings, or reads six digits, picks an older one. One seed
    in three has no good file at all: the answer is then None (the seeds of one check's
    cases, and of its run on fewer ranks, cover every remainder)."""
    gen = random.Random(seed)
    good = 0 if seed % 3 == 0 else gen.randint(2, 4)
    top = gen.randrange(10**6, 10**6 + 5000)  # the newest good step (or where the bad start)
    older = sorted(gen.sample(range(10**6 - 5000, 10**6), max(good - 1, 0)))
    bad = ["torn", "corrupt", "temporary"]
    gen.shuffle(bad)
    above = sorted(gen.sample(range(top + 1, top + 5000), len(bad)))
    steps = [*older, top] if good else []
    return list(zip(steps + above, ["good"] * len(steps) + bad))


_EPOCH = 1_700_000_000  # a file time, in seconds, from which the steps count back


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
        elif kind == "corrupt":  # a flipped byte inside the tensor: torch.load does not notice
            flipped = bytearray(data)
            flipped[len(flipped) // 2] ^= 0xFF
            path.write_bytes(bytes(flipped))
        elif kind == "temporary":  # a complete file, under the name of a save in progress
            path = path.rename(directory / f".{path.name}.x1y2z3.partial")
        # the higher the step, the older the file looks (as after a copy, or a restore from
        # a backup): "the newest" is the highest step, not the latest modification time
        os.utime(path, (_EPOCH - step, _EPOCH - step))
    _listings[str(directory)] = _snapshot(directory)
    return (str(directory),)


def _in_directory(args: tuple, returned: Any) -> Any:
    """A returned str as '<directory>/name' (the rank's own folder, wherever its /tmp is);
    anything else as it is, so that a Path or a bare name is judged as given."""
    if isinstance(returned, str):
        folder, full = os.path.realpath(args[0]), os.path.realpath(returned)
        if os.path.dirname(full) == folder:
            return f"<directory>/{os.path.basename(full)}"
    return returned


def _directory_changes(args: tuple, returned: Any) -> str | None:
    before, now = _listings[args[0]], _snapshot(Path(args[0]))
    if now == before:
        return None
    return f"newest_loadable changed the directory ({_changes(before, now)}): it must only read it"


def _newest_expected(rank: int, size: int, seed: int) -> str | None:
    steps = [s for s, kind in _newest_setup(seed) if kind == "good"]
    return f"<directory>/step-{max(steps):06d}.pt" if steps else None


def _newest_means(calls: Calls, rank: int, size: int, observed: Any) -> str | None:
    return no_communication(calls, rank, size, observed) or observed


NEWEST_LOADABLE = Exercise("newest_loadable", _newest_args, _newest_expected, _newest_means,
                           "None where no checkpoint is good, the directory left as it was",
                           collect=_in_directory, observe=_directory_changes, cases=3,
                           cleanup=_remove_checkpoints, again=False)


# ---- exercise 3: read once, share with everyone --------------------------------------------
_models: dict[str, dict[str, Any]] = {}  # path -> what the rank's model was: its mode, device


def _share_args(rank: int, size: int, device: Any, group: Any, seed: int) -> tuple:
    import torch.distributed as dist

    path = _folder(seed, 0) / "shared.pt"  # rank 0's folder: only rank 0 writes (and reads) it
    if rank == 0:
        torch.save(_file_model(seed), _checkpoint_dir(seed, 0) / "shared.pt")
    dist.barrier(group=group)
    trial.watch(path)
    _watch_unsafe(path)
    model = mlp(seed=(seed + 1 + rank) % 1000).to(device)
    if (seed + rank) % 2:  # every other rank's model arrives in eval mode
        model.eval()
    _models[str(path)] = {"modes": [m.training for m in model.modules()],
                          "device": torch.device(device)}
    if rank == 0:
        _listings[str(path)] = _snapshot(path.parent)
    return str(path), model


def _share_state(args: tuple, returned: Any) -> dict[str, torch.Tensor]:
    """The model's weights as they are when load_and_share returns (an answer that never
    waits for its broadcasts is named by the rule every exercise shares, in core.verdict)."""
    path, model = args
    return {f"the model's {k}": v.detach().cpu() for k, v in model.state_dict().items()}


def _share_expected(rank: int, size: int, seed: int) -> dict[str, torch.Tensor]:
    return {f"the model's {k}": v for k, v in _file_model(seed).items()}


def _share_opened(args: tuple, returned: Any) -> tuple[int, str | None]:
    """How often this rank opened the file, and what else is wrong (None if nothing)."""
    return trial.opened(args[0]), _share_problem(*args)


def _share_problem(path: str, model: nn.Module) -> str | None:
    """weights_only, the model's mode and device, rank 0's folder."""
    if problem := _unsafe(path, "rank 0"):
        return problem
    was = _models[path]
    if (modes := [m.training for m in model.modules()]) != was["modes"]:
        return (f"load_and_share left the model in {'training' if modes[0] else 'eval'} mode;"
                f" it was in {'training' if was['modes'][0] else 'eval'} mode: leave the mode "
                "as it was (load_state_dict does not change it)")
    if not _on(model.state_dict().values(), was["device"]):
        where = sorted({str(t.device) for t in model.state_dict().values()})
        return (f"load_and_share moved the model to {where}: it was on {was['device']}; load "
                "the weights into its own tensors (load_state_dict copies them there)")
    if path in _listings:
        return _folder_changes(path, "load_and_share", "only read the file")
    return None


def _share_means(calls: Calls, rank: int, size: int, observed: Any) -> str | None:
    opened, problem = observed
    if rank != 0 and opened:
        return f"rank {rank} opened the file itself: only rank 0 may read it"
    if rank == 0 and not opened:
        return "rank 0 never opened the file"
    if problem:
        return problem
    if problem := collectives_only(calls, rank, size, observed):
        return problem.replace("the values must come from the other ranks",
                               "the weights must reach the other ranks from rank 0")
    return None


def _share_cleanup(rank: int, seed: int) -> None:
    """_remove_checkpoints, and what was noted of the models."""
    for s in (seed, seed + 1):
        _models.pop(str(_folder(s, 0) / "shared.pt"), None)
    _remove_checkpoints(rank, seed)


LOAD_AND_SHARE = Exercise(
    "load_and_share", _share_args, _share_expected, _share_means,
    "only rank 0 reads the file (weights_only=True), the weights travel by collectives, "
    "every request is waited on, the model keeps its mode and device",
    collect=_share_state, observe=_share_opened, cleanup=_share_cleanup, again=False)
