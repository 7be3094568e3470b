"""Checkpoints that survive a crash: atomic saves, the latest complete one, clear load errors.

Introduced in notebook 05, after the notebook has written the save-on-rank-0 / barrier /
load-everywhere pattern with plain ``torch.save`` and ``torch.load``. A save goes to a
temporary file in the checkpoint's directory (name starting with "." and ending in
".partial") and replaces the checkpoint in one step, so a crash leaves the previous
checkpoint whole. Loaders raise ``CheckpointError`` naming the file and the problem, and
change nothing (no model, no file) when they fail.
"""

from __future__ import annotations

import errno
import hashlib
import os
import re
import shutil
import tempfile
from pathlib import Path
from typing import Any

import torch
from torch import nn

from .cluster.topology import shared_folder
from .text import first_line

TEMP_SUFFIX = ".partial"
CHECKSUM_KEY = "_sha256"
ZIP_MAGIC = b"PK\x03\x04"  # torch.save writes a zip archive
_NAME = re.compile(r"^step-(\d{6,})\.(pt|dcp)$")


class CheckpointError(RuntimeError):
    """A checkpoint could not be saved or loaded; the message names the file and the problem."""


# ---- where -----------------------------------------------------------------------------
def scratch_directory(prefix: str, shared: bool = False) -> Path:
    """A new private folder for a notebook's files. On one machine it is in /tmp; with
    shared=True (ranks on other hosts must read what is written there: the Slurm launcher) it
    is in $COURSE_SHARED_DIR, else the notebook's folder, which the nodes see and /tmp is not."""
    where = shared_folder() if shared else None
    return Path(tempfile.mkdtemp(prefix=f".{prefix}" if shared else prefix, dir=where))


# ---- names -----------------------------------------------------------------------------
def checkpoint_path(directory: str | Path, step: int, kind: str = "pt") -> Path:
    """Where the checkpoint of a step goes: step-000042.pt (a file) or step-000042.dcp (sharded)."""
    return Path(directory) / f"step-{step:06d}.{kind}"


def checkpoint_step(path: str | Path) -> int | None:
    """The step in a checkpoint's name, or None if the name is not a checkpoint's."""
    match = _NAME.match(Path(path).name)
    return int(match.group(1)) if match else None


def is_temporary(path: str | Path) -> bool:
    """True for the temporary file of a save that has not finished (or never will)."""
    return Path(path).name.endswith(TEMP_SUFFIX)


def latest_checkpoint(directory: str | Path, kind: str = "pt") -> Path | None:
    """The complete checkpoint with the highest step; temporary files never match the name."""
    found = [p for p in Path(directory).glob(f"step-*.{kind}") if checkpoint_step(p) is not None]
    if kind == "dcp":  # a sharded save is complete once its .metadata exists (written last)
        found = [p for p in found if (p / ".metadata").is_file()]
    return max(found, key=checkpoint_step, default=None)


def temporary_files(directory: str | Path) -> list[Path]:
    """Leftovers of saves that were killed; safe to delete once no process is saving."""
    return sorted(p for p in Path(directory).iterdir() if is_temporary(p))


def remove_old_checkpoints(directory: str | Path, keep: int = 2, kind: str = "pt") -> list[Path]:
    """Delete all but the `keep` newest checkpoints (oldest first, so a crash keeps the newest)."""
    found = sorted((p for p in Path(directory).glob(f"step-*.{kind}") if checkpoint_step(p)
                    is not None), key=checkpoint_step)
    old = found[:-keep] if keep > 0 else found
    for p in old:
        p.unlink()
    return old


# ---- atomic save -----------------------------------------------------------------------
def state_checksum(state: Any) -> str:
    """SHA-256 of every tensor's bytes (and every other value's repr), in a fixed order."""
    digest = hashlib.sha256()

    def visit(obj: Any) -> None:
        if isinstance(obj, torch.Tensor):
            t = obj.detach().cpu().contiguous().reshape(-1)
            digest.update(f"{t.dtype}{tuple(obj.shape)}".encode())
            digest.update(t.view(torch.uint8).numpy().tobytes())
        elif isinstance(obj, dict):
            for key in sorted(obj, key=repr):
                digest.update(repr(key).encode())
                visit(obj[key])
        elif isinstance(obj, (list, tuple)):
            digest.update(f"{type(obj).__name__}{len(obj)}".encode())
            for item in obj:
                visit(item)
        else:
            digest.update(repr(obj).encode())

    visit(state)
    return digest.hexdigest()


def fsync_directory(directory: str | Path) -> None:
    """Flush a directory entry to disk, so that a rename in it survives a power cut (POSIX)."""
    if os.name != "posix":
        return
    fd = os.open(directory, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def new_file_mode() -> int:
    """The permissions open() gives a new file: 0o666 less the umask (mkstemp's are 0o600)."""
    try:
        with open("/proc/self/status") as f:  # Linux: the umask, read without changing it
            umask = next(int(line.split()[1], 8) for line in f if line.startswith("Umask:"))
    except (OSError, StopIteration, ValueError):
        umask = os.umask(0o022)  # elsewhere: set and put back (the only way to read it)
        os.umask(umask)
    return 0o666 & ~umask


def atomic_save(state: dict[str, Any], path: str | Path) -> Path:
    """torch.save `state` (with its checksum) to a temporary file, then rename it over `path`.

    A crash at any moment leaves either the old file or the new one, never a torn file; on
    an error the temporary file is removed and `path` is left as it was.
    """
    path = Path(path)
    if is_temporary(path):
        raise CheckpointError(f"checkpoint {path}: names ending in {TEMP_SUFFIX} are reserved "
                              "for temporary files")
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=TEMP_SUFFIX)
    try:
        with os.fdopen(fd, "wb") as f:
            if hasattr(os, "fchmod"):  # readable by whoever could read a torch.save file here
                os.fchmod(f.fileno(), new_file_mode())
            torch.save({**state, CHECKSUM_KEY: state_checksum(state)}, f)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException as e:
        Path(tmp).unlink(missing_ok=True)
        if disk_full(e, path.parent, tensor_bytes(state)):
            raise CheckpointError(_disk_full_message(path, tensor_bytes(state))) from e
        raise
    fsync_directory(path.parent)
    return path


def tensor_bytes(state: Any) -> int:
    """Bytes of all the tensors in a state (nested dicts and lists): about what a save writes."""
    if isinstance(state, torch.Tensor):
        return state.numel() * state.element_size()
    values = state.values() if isinstance(state, dict) else state if isinstance(
        state, list | tuple) else ()
    return sum(tensor_bytes(v) for v in values)


def disk_full(error: BaseException, directory: Path, needed: int) -> bool:
    """Whether a failed save failed for lack of space. PyTorch's writer reports that as
    "unexpected pos", without the reason, so the free space is checked too."""
    if isinstance(error, OSError):
        return error.errno in (errno.ENOSPC, errno.EDQUOT)
    writer = isinstance(error, RuntimeError) and any(
        word in str(error) for word in ("unexpected pos", "inline_container", "file write failed"))
    return writer and shutil.disk_usage(directory).free < needed + 64 * 1024


def _disk_full_message(path: Path, needed: int) -> str:
    """Say that the disk is full, which file was being written, and what is still safe."""
    usage = shutil.disk_usage(path.parent)
    kept = (f"{path.name} still holds the checkpoint it held before" if path.exists() else
            f"the checkpoints already in {path.parent} are untouched")
    return (f"checkpoint {path}: the disk is full ({usage.free / 2**20:.1f} MiB free of "
            f"{usage.total / 2**20:.0f} MiB; this save needs about {needed / 2**20:.1f} MiB). "
            f"Nothing was written: {kept}. Free some space (remove_old_checkpoints(directory, "
            "keep=1) deletes older ones) or save to another disk, then save again.")


# ---- loading with clear errors ---------------------------------------------------------
def _why_unreadable(path: Path, err: BaseException) -> str:
    """Turn torch.load's error into a sentence about the file."""
    text = str(err)
    if "GLOBAL" in text or "global" in text:
        blocked = next((ln.strip() for ln in text.splitlines() if "GLOBAL" in ln), "")
        return ("holds Python objects that torch.load(weights_only=True) refuses to unpickle "
                f"({blocked or type(err).__name__}); weights_only=False would run code "
                "from the file: use it only for a file you wrote yourself")
    return (f"is truncated or corrupt ({path.stat().st_size} bytes; torch.load says: "
            f"{first_line(text) or type(err).__name__})")


def load_checkpoint(path: str | Path, map_location: Any = None) -> dict[str, Any]:
    """torch.load(path, weights_only=True) with its checksum checked; CheckpointError if bad."""
    path = Path(path)
    if is_temporary(path):
        raise CheckpointError(f"checkpoint {path}: is the temporary file of an unfinished save, "
                              "not a checkpoint")
    if path.is_dir():
        raise CheckpointError(f"checkpoint {path}: is a directory (a sharded checkpoint? "
                              "use load_sharded)")
    if not path.is_file():
        raise CheckpointError(f"checkpoint {path}: no such file")
    with open(path, "rb") as f:
        head = f.read(4)
    if head != ZIP_MAGIC:
        what = "is empty (0 bytes)" if not head else "is not a torch.save file (corrupt?)"
        raise CheckpointError(f"checkpoint {path}: {what}")
    try:
        state = torch.load(path, map_location=map_location, weights_only=True)
    except Exception as e:
        raise CheckpointError(f"checkpoint {path}: {_why_unreadable(path, e)}") from e
    if isinstance(state, dict) and CHECKSUM_KEY in state:
        stored = state.pop(CHECKSUM_KEY)
        if state_checksum(state) != stored:
            raise CheckpointError(f"checkpoint {path}: is corrupt: its contents do not match "
                                  "the checksum stored when it was saved")
    return state


def shape_problems(module: nn.Module, state_dict: dict[str, torch.Tensor]) -> list[str]:
    """Every way state_dict does not fit module: missing and unexpected keys, other shapes."""
    own = module.state_dict()
    problems = [f"{k}: shape {list(v.shape)} in the checkpoint, {list(own[k].shape)} in "
                "the model" for k, v in state_dict.items() if k in own and v.shape != own[k].shape]
    missing = [k for k in own if k not in state_dict]
    unexpected = [k for k in state_dict if k not in own]
    if missing:
        problems.append(f"missing from the checkpoint: {missing}")
    if unexpected:
        problems.append(f"not in the model: {unexpected}")
    if unexpected and all(k.startswith("module.") for k in unexpected):
        problems.append("(saved from a DDP model's state_dict()? save model.module.state_dict(),"
                        " or strip the 'module.' prefix)")
    return problems


def load_model_state(module: nn.Module, state_dict: dict[str, torch.Tensor],
                     path: str | Path) -> None:
    """Check every key and shape first, then load: a checkpoint that does not fit changes nothing.

    (module.load_state_dict alone copies the tensors that fit before it raises for the others.)
    """
    problems = shape_problems(module, state_dict)
    if problems:
        raise CheckpointError(f"checkpoint {path}: does not fit this model:\n  "
                              + "\n  ".join(problems))
    module.load_state_dict(state_dict)


def check_world_size(saved: int, current: int, path: str | Path) -> None:
    """Exact resume needs the world size the checkpoint was written by; say so if it differs."""
    if saved != current:
        raise CheckpointError(
            f"checkpoint {path}: was written by {saved} ranks, this run has {current}. The "
            "weights load at any world size, but an exact resume cannot: each rank's random "
            "state and its share of the data depend on the world size")


# ---- sharded checkpoints (torch.distributed.checkpoint) --------------------------------
def _tensors(obj: Any, prefix: str = "") -> dict[str, torch.Tensor]:
    """The tensors in nested dicts and lists, under the dotted keys DCP stores them by."""
    if isinstance(obj, torch.Tensor):
        return {prefix: obj}
    items = obj.items() if isinstance(obj, dict) else enumerate(obj) if isinstance(
        obj, list) else ()
    out: dict[str, torch.Tensor] = {}
    for key, value in items:
        out.update(_tensors(value, f"{prefix}.{key}" if prefix else str(key)))
    return out


def load_sharded(state: dict[str, Any], path: str | Path) -> None:
    """dcp.load into `state` (on every rank), after checking keys and shapes against the files.

    Every check runs before anything is read, so a checkpoint that does not fit changes nothing.
    """
    import torch.distributed.checkpoint as dcp
    from torch.distributed.checkpoint.api import CheckpointException

    path = Path(path)
    if not path.is_dir():
        raise CheckpointError(f"sharded checkpoint {path}: no such directory")
    if not (path / ".metadata").is_file():
        raise CheckpointError(f"sharded checkpoint {path}: has no .metadata, so its save never "
                              "finished (DCP writes .metadata last)")
    saved = dcp.FileSystemReader(str(path)).read_metadata().state_dict_metadata
    problems = []
    for key, value in _tensors(state).items():
        if key not in saved:
            problems.append(f"{key}: not in the checkpoint")
        elif tuple(getattr(saved[key], "size", ())) != tuple(value.shape):
            problems.append(f"{key}: shape {list(getattr(saved[key], 'size', []))} in the "
                            f"checkpoint, {list(value.shape)} here")
    if problems:
        raise CheckpointError(f"sharded checkpoint {path}: does not fit what is loaded:\n  "
                              + "\n  ".join(problems))
    try:
        dcp.load(state, checkpoint_id=str(path))
    except (Exception, CheckpointException) as e:
        lines = str(e).strip().splitlines()  # DCP puts the reason on the last line
        reason = lines[-1] if lines else type(e).__name__
        raise CheckpointError(f"sharded checkpoint {path}: {reason}") from e
