"""helpers.checkpoint: atomic saves under SIGKILL, the latest complete checkpoint, bad input.

The fault drill's restart helper (kill an engine, RankError names it, cluster.restart(), a
collective works) is tested in tests/test_cluster.py (test_failures_are_reported_by_rank_...).
"""

from __future__ import annotations

import json
import multiprocessing
import os
import random
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import torch
import torch.distributed.checkpoint as dcp
from system import need

from helpers.checkpoint import (
    CHECKSUM_KEY,
    CheckpointError,
    atomic_save,
    check_world_size,
    checkpoint_path,
    checkpoint_step,
    is_temporary,
    latest_checkpoint,
    load_checkpoint,
    load_model_state,
    load_sharded,
    remove_old_checkpoints,
    temporary_files,
)
from helpers.data import mlp

TRIALS = 50


def _state(step: int, size: int = 65536) -> dict:
    """A checkpoint-like state whose tensor content is tied to its step."""
    return {"step": step, "weights": torch.full((size,), float(step)), "rng": [torch.arange(3)]}


# what the saving child runs: the same state as _state, saved forever, the two newest kept
SAVER = """
import torch
from helpers.checkpoint import atomic_save, checkpoint_path, remove_old_checkpoints
save = {save}
step = {first_step}
while True:
    state = {{"step": step, "weights": torch.full((65536,), float(step)),
             "rng": [torch.arange(3)]}}
    save(state, checkpoint_path({directory!r}, step))
    remove_old_checkpoints({directory!r}, keep=2)
    step += 1
"""


def _wait_for_step(directory: Path, step: int, timeout: float = 10.0) -> None:
    """Wait until a checkpoint of this step or a later one exists (the saver prunes old ones,
    so the first may already be gone when this process gets to look)."""
    deadline = time.monotonic() + timeout
    while (latest := latest_checkpoint(directory)) is None or checkpoint_step(latest) < step:
        assert time.monotonic() < deadline, f"no checkpoint of step {step} or later appeared"
        time.sleep(0.001)


def _kill_during_save(directory: Path, trials: int, save: str,
                      until_failure: bool = False) -> tuple[list[str], int]:
    """SIGKILL a process that saves with `save` at random moments; after each kill, check
    that the latest checkpoint loads. Returns (failures, kills that left a temporary file)."""
    # children are forked from a single-threaded server that has imported torch once: fast
    # to start, and safe (forking this process, whose torch has threads, can deadlock)
    ctx = multiprocessing.get_context("forkserver")
    ctx.set_forkserver_preload(["helpers.checkpoint"])
    rng = random.Random(0)
    failures, torn, next_step = [], 0, 0
    for trial in range(trials):
        code = SAVER.format(save=save, first_step=next_step, directory=str(directory))
        saver = ctx.Process(target=exec, args=(code, {}), daemon=True)
        saver.start()
        try:
            _wait_for_step(directory, next_step)  # at least one save has completed
            time.sleep(rng.uniform(0.0, 0.03))  # a few saves' worth: lands anywhere in one
        finally:
            os.kill(saver.pid, signal.SIGKILL)
            saver.join()
        temps = temporary_files(directory)
        torn += bool(temps)
        latest = latest_checkpoint(directory)
        try:
            assert latest is not None and not is_temporary(latest), f"latest is {latest}"
            state = load_checkpoint(latest)
            step = checkpoint_step(latest)
            assert state["step"] == step and torch.equal(state["weights"], _state(step)["weights"])
            assert all(checkpoint_step(t) is None for t in temps), f"temp named like one: {temps}"
        except (AssertionError, CheckpointError) as e:
            failures.append(f"trial {trial}: {e}")
            if until_failure:
                break
        next_step = (checkpoint_step(latest) or next_step) + 1
        for t in temps:  # what a restarted job would clean up before saving again
            t.unlink()
    return failures, torn


def test_kill_during_save_always_leaves_a_loadable_latest_checkpoint(tmp_path):
    start = time.monotonic()
    failures, torn = _kill_during_save(tmp_path, TRIALS, "atomic_save")
    print(f"\n{TRIALS} kill-during-save trials in {time.monotonic() - start:.1f} s: "
          f"{len(failures)} left an unloadable latest checkpoint; {torn} were killed "
          "mid-write (a temporary file was left)")
    assert not failures, "\n".join(failures)
    assert torn > 0, "no kill landed in the middle of a save: the test did not test anything"


def test_the_same_kills_do_tear_a_plain_torch_save(tmp_path):
    """Control: the drill above does catch a save that writes the checkpoint in place."""
    failures, _ = _kill_during_save(tmp_path, 100, "torch.save", until_failure=True)
    assert failures, "100 kills never tore a plain torch.save: the drill is not sensitive"
    print(f"\nplain torch.save, first unloadable latest checkpoint: {failures[0]}")


# ---- names -----------------------------------------------------------------------------
def test_names_and_latest_ignore_temporary_and_foreign_files(tmp_path):
    for step in (5, 40, 7):
        atomic_save(_state(step, 4), checkpoint_path(tmp_path, step))
    (tmp_path / ".step-000099.pt.abc123.partial").write_bytes(b"PK\x03\x04half")
    (tmp_path / "step-000100.pt.bak").write_bytes(b"x")
    (tmp_path / "notes.txt").write_text("x")
    assert latest_checkpoint(tmp_path) == checkpoint_path(tmp_path, 40)
    assert [p.name for p in temporary_files(tmp_path)] == [".step-000099.pt.abc123.partial"]
    assert checkpoint_step("step-000040.pt") == 40 and checkpoint_step("step-40.pt") is None
    assert latest_checkpoint(tmp_path, "dcp") is None
    removed = remove_old_checkpoints(tmp_path, keep=1)
    assert [checkpoint_step(p) for p in removed] == [5, 7]
    assert latest_checkpoint(tmp_path) == checkpoint_path(tmp_path, 40)


def test_atomic_save_roundtrip_and_no_temp_left(tmp_path):
    model = mlp(seed=0)
    opt = torch.optim.Adam(model.parameters())
    model(torch.ones(2, 64)).sum().backward()
    opt.step()
    state = {"model": model.state_dict(), "optimizer": opt.state_dict(), "step": 3,
             "rng": [{"torch": torch.get_rng_state()}]}
    path = atomic_save(state, tmp_path / "step-000003.pt")
    loaded = load_checkpoint(path)
    assert CHECKSUM_KEY not in loaded and loaded["step"] == 3
    assert all(torch.equal(loaded["model"][k], v) for k, v in state["model"].items())
    assert loaded["optimizer"]["param_groups"] == state["optimizer"]["param_groups"]
    assert sorted(os.listdir(tmp_path)) == ["step-000003.pt"]


def test_a_failed_save_leaves_the_old_checkpoint_and_no_temp(tmp_path):
    path = atomic_save(_state(1, 4), tmp_path / "step-000001.pt")
    before = path.read_bytes()
    with pytest.raises(Exception, match="pickle|lambda"):
        atomic_save({"step": 2, "oops": lambda: 0}, path)
    assert path.read_bytes() == before and load_checkpoint(path)["step"] == 1
    assert sorted(os.listdir(tmp_path)) == ["step-000001.pt"]
    with pytest.raises(CheckpointError, match="reserved for temporary files"):
        atomic_save(_state(1, 4), tmp_path / "x.partial")


# ---- bad input -------------------------------------------------------------------------
@pytest.fixture
def good(tmp_path) -> Path:
    return atomic_save({"model": mlp(seed=0).state_dict(), "step": 7},
                       checkpoint_path(tmp_path, 7))


def _write(path: Path, data: bytes) -> Path:
    path.write_bytes(data)
    return path


@pytest.mark.parametrize("make, match", [
    (lambda d, g: d / "step-000001.pt", "no such file"),
    (lambda d, g: _write(d / "e.pt", b""), r"is empty \(0 bytes\)"),
    (lambda d, g: _write(d / "t.pt", g.read_bytes()[: g.stat().st_size // 2]),
     "truncated or corrupt"),
    (lambda d, g: _write(d / "r.pt", bytes(random.Random(1).randbytes(3000))),
     "not a torch.save file"),
    (lambda d, g: _write(d / ".step-000007.pt.x.partial", g.read_bytes()), "temporary file"),
    (lambda d, g: d, "is a directory"),
])
def test_bad_files_give_clear_errors_naming_the_file(tmp_path, good, make, match):
    bad = make(tmp_path, good)
    with pytest.raises(CheckpointError, match=match) as err:
        load_checkpoint(bad)
    assert str(bad) in str(err.value)


def test_a_flipped_byte_in_the_weights_is_caught_by_the_checksum(tmp_path, good):
    data = bytearray(good.read_bytes())
    blob = data.find(b"data/0")  # the first tensor's bytes follow its zip entry header
    data[blob + 200] ^= 0xFF
    bad = _write(tmp_path / "flipped.pt", bytes(data))
    torch.load(bad, weights_only=True)  # torch itself does not notice ...
    with pytest.raises(CheckpointError, match="checksum") as err:  # ... the helper does
        load_checkpoint(bad)
    assert str(bad) in str(err.value)


class _Payload:
    def __reduce__(self):
        return (os.system, ("echo this would run on load",))


def test_an_unsafe_pickle_is_refused(tmp_path):
    path = tmp_path / "evil.pt"
    torch.save({"model": _Payload()}, path)
    with pytest.raises(CheckpointError, match="refuses to unpickle.*system") as err:
        load_checkpoint(path)
    assert str(path) in str(err.value) and "weights_only=False" in str(err.value)


def test_a_model_of_other_shapes_is_refused_and_left_untouched(good):
    model = mlp(hidden=32, seed=1)
    before = {k: v.clone() for k, v in model.state_dict().items()}
    state = load_checkpoint(good)
    with pytest.raises(CheckpointError, match=r"0.weight: shape \[64, 64\] in the checkpoint, "
                                              r"\[32, 64\] in the model") as err:
        load_model_state(model, state["model"], good)
    assert str(good) in str(err.value)
    assert all(torch.equal(model.state_dict()[k], v) for k, v in before.items())
    # the bare load_state_dict copies what fits before it raises (the reason for the check)
    with pytest.raises(RuntimeError, match="size mismatch"):
        model.load_state_dict(state["model"])
    assert torch.equal(model.state_dict()["2.bias"], state["model"]["2.bias"])


def test_the_module_prefix_of_a_ddp_state_dict_is_explained(good):
    state = {f"module.{k}": v for k, v in load_checkpoint(good)["model"].items()}
    with pytest.raises(CheckpointError, match="strip the 'module.' prefix"):
        load_model_state(mlp(), state, good)


def test_world_size_check():
    check_world_size(4, 4, "c.pt")
    with pytest.raises(CheckpointError, match="c.pt: was written by 4 ranks, this run has 3"):
        check_world_size(4, 3, "c.pt")


# ---- sharded (torch.distributed.checkpoint, here without a process group) --------------
@pytest.mark.filterwarnings("ignore:torch.distributed is disabled")
def test_sharded_load_checks_before_reading(tmp_path):
    path = tmp_path / "step-000003.dcp"
    model = mlp(seed=0)
    dcp.save({"model": model.state_dict(), "step": 3}, checkpoint_id=str(path))
    assert latest_checkpoint(tmp_path, "dcp") == path
    fresh = mlp(seed=1)
    state = {"model": fresh.state_dict(), "step": -1}
    load_sharded(state, path)
    assert state["step"] == 3 and torch.equal(fresh[0].weight, model[0].weight)

    with pytest.raises(CheckpointError, match="no such directory"):
        load_sharded(state, tmp_path / "step-000004.dcp")
    other = mlp(hidden=32)
    before = other[2].bias.clone()
    with pytest.raises(CheckpointError, match=r"model.0.weight: shape \[64, 64\] in the "
                                              r"checkpoint, \[32, 64\] here"):
        load_sharded({"model": other.state_dict()}, path)
    assert torch.equal(other[2].bias, before)
    with pytest.raises(CheckpointError, match="rng/3: not in the checkpoint"):
        load_sharded({"rng/3": torch.zeros(3)}, path)
    with pytest.raises(CheckpointError, match=f"{path}: .*epoch"):
        load_sharded({"epoch": 0}, path)
    (path / ".metadata").unlink()  # what a save killed before its end leaves
    assert latest_checkpoint(tmp_path, "dcp") is None
    with pytest.raises(CheckpointError, match="no .metadata"):
        load_sharded(state, path)


# ---- a full disk -----------------------------------------------------------------------
FULL_DISK = """
import json, os, sys, torch
from helpers.checkpoint import CheckpointError, atomic_save, latest_checkpoint, load_checkpoint
d = sys.argv[1]
atomic_save({"w": torch.ones(1000)}, f"{d}/step-000001.pt")        # fits
atomic_save({"w": torch.ones(2000)}, f"{d}/step-000002.pt")        # fits, will be overwritten
out = {}
for name in ("step-000002.pt", "step-000003.pt"):                  # neither fits
    try:
        atomic_save({"w": torch.zeros(300_000)}, f"{d}/{name}")
        out[name] = "saved"
    except CheckpointError as e:
        out[name] = str(e)
out["files"] = sorted(os.listdir(d))
out["latest"] = latest_checkpoint(d).name
out["kept"] = load_checkpoint(f"{d}/step-000002.pt")["w"].numel()
print(json.dumps(out))
"""


def test_a_save_on_a_full_disk_says_so_and_keeps_the_previous_checkpoint(tmp_path):
    need(os.geteuid() == 0 and shutil.which("unshare"),
         "needs root and unshare, to mount a small file system in a private mount namespace")
    small = tmp_path / "small"
    small.mkdir()
    script = (f"mount -t tmpfs -o size=256k tmpfs {small} && "
              f"{sys.executable} -c '{FULL_DISK}' {small}")
    done = subprocess.run(["unshare", "--mount", "sh", "-c", script], capture_output=True,
                          text=True, timeout=120)
    assert done.returncode == 0, done.stderr[-2000:]
    out = json.loads(done.stdout.strip().splitlines()[-1])
    for name, kept in (("step-000002.pt", "step-000002.pt still holds the checkpoint it held"),
                       ("step-000003.pt", "the checkpoints already in")):
        message = out[name]
        assert message.startswith(f"checkpoint {small}/{name}: the disk is full"), message
        assert kept in message and "Nothing was written" in message, message
    assert out["files"] == ["step-000001.pt", "step-000002.pt"], "a temporary file was left"
    assert out["latest"] == "step-000002.pt" and out["kept"] == 2000


def test_atomic_save_gives_the_permissions_of_a_plain_save(tmp_path):
    """mkstemp makes its file private (0o600) and os.replace keeps that: atomic_save must give
    the checkpoint what torch.save would (0o666 less the umask), for a teammate's job to read."""
    from helpers.checkpoint import new_file_mode

    plain, atomic = tmp_path / "plain.pt", tmp_path / "step-000001.pt"
    torch.save({"w": torch.ones(2)}, plain)
    atomic_save({"w": torch.ones(2)}, atomic)
    assert new_file_mode() == plain.stat().st_mode & 0o777
    assert atomic.stat().st_mode & 0o777 == plain.stat().st_mode & 0o777, oct(atomic.stat().st_mode)


def test_scratch_directory_is_private_and_shared_only_when_asked(tmp_path, monkeypatch):
    """Notebook 05's working folder: /tmp on one machine; with shared=True (ranks on other
    hosts: the Slurm launcher) in $COURSE_SHARED_DIR, which the nodes see and /tmp is not."""
    import tempfile

    from helpers.checkpoint import scratch_directory

    local = scratch_directory("course-test-")
    monkeypatch.setenv("COURSE_SHARED_DIR", str(tmp_path))
    shared = scratch_directory("course-test-", shared=True)
    try:
        assert local.parent == Path(tempfile.gettempdir()) and local.name.startswith("course-test-")
        assert shared.parent == tmp_path and shared.name.startswith(".course-test-")
        assert local.stat().st_mode & 0o777 == shared.stat().st_mode & 0o777 == 0o700
    finally:
        local.rmdir()
        shared.rmdir()
