"""Which build of PyTorch ``make install`` (and so ``make lab``) installs on this machine.

- Linux with an NVIDIA GPU (its driver: ``nvidia-smi`` or ``/proc/driver/nvidia``): PyPI's
  build, which for Linux is the CUDA build (with its CUDA libraries, about 4.3 GB installed).
- Linux without one: the CPU build from PyTorch's CPU wheel index (a few hundred MB), if that
  index answers within a few seconds; else a CPU build in range that pip finds on this
  machine's disk (a site's wheelhouse that pip's configuration names); else PyPI's build, said
  in one line before it downloads.
- macOS: PyPI's build (CPU and Apple's MPS; there is no CUDA build for macOS).
- ``COURSE_TORCH=cpu`` or ``COURSE_TORCH=cuda`` overrides the choice.

Which release: any in the tested range (``REQUIREMENT``, also in pyproject.toml), so that a
PyTorch the learner or the site already has is kept: a ``.venv`` that holds one in range keeps
it, and where the Python that makes the venv has one in range (a site's module, a conda
environment), ``make install`` makes the venv with ``--system-site-packages`` and uses it
(``python3 helpers/machine/torch_build.py --venv-args``). ``make install TORCH=2.13.0`` asks for one
release exactly.

Run by the Makefile with the system's Python, before the course's packages exist: the standard
library only. It prints the pip arguments to add (none, or ``--extra-index-url URL``) and says
what it chose on stderr.

    python3 helpers/machine/torch_build.py
"""

from __future__ import annotations

import os
import platform
import re
import shutil
import sys
import threading
import urllib.error
import urllib.request
from dataclasses import dataclass

CPU_INDEX = "https://download.pytorch.org/whl/cpu"
REQUIREMENT = "torch>=2.13,<2.15"  # pyproject.toml's, and environment.yml's (tests check both)
TESTED = ("2.13.0", "2.14.1")  # the releases `make test` has passed with, each end of the range
REACH_WAIT = 5.0  # seconds the CPU index has to answer before the default build is used
CUDA_SIZE = "about 4.3 GB installed, most of it CUDA libraries"


class BuildError(ValueError):
    """COURSE_TORCH asks for something this machine cannot get."""


@dataclass(frozen=True)
class Build:
    """What to install: 'cpu' from the CPU index, or pip's 'default' (PyPI's build)."""

    source: str  # "cpu-index" or "default"
    why: str


def choose(system: str, has_nvidia: bool, override: str | None) -> Build:
    """The build for a machine: system as platform.system() names it ('Linux', 'Darwin'),
    whether an NVIDIA driver is present, and COURSE_TORCH ('cpu', 'cuda', or None/'')."""
    override = (override or "").strip().lower() or None
    if override not in (None, "cpu", "cuda"):
        raise BuildError(f"COURSE_TORCH={override!r}: use cpu, cuda, or leave it unset")
    if system == "Darwin":
        if override == "cuda":
            raise BuildError("COURSE_TORCH=cuda: PyTorch has no CUDA build for macOS; "
                             "leave COURSE_TORCH unset")
        return Build("default", "macOS: PyPI's build (CPU and MPS)")
    if system != "Linux":
        return Build("default", f"{system}: PyPI's build")
    if override == "cpu":
        return Build("cpu-index", "COURSE_TORCH=cpu: the CPU build")
    if override == "cuda":
        return Build("default", f"COURSE_TORCH=cuda: PyPI's CUDA build ({CUDA_SIZE})")
    if has_nvidia:
        return Build("default", f"an NVIDIA GPU: PyPI's CUDA build ({CUDA_SIZE})")
    return Build("cpu-index", "no NVIDIA GPU: the CPU build")


def release(version: str) -> tuple[int, ...]:
    """'2.14.1+cu128' -> (2, 14, 1); '2.15.0.dev20260101' -> (2, 15, 0)."""
    parts = []
    for piece in version.split("+")[0].split(".")[:3]:
        digits = re.match(r"\d*", piece).group()  # '0rc1' -> '0'
        if not digits:
            break
        parts.append(int(digits))
    if not parts:
        raise ValueError(f"{version!r} is not a release number")
    return tuple(parts)


def bounds(requirement: str = REQUIREMENT) -> tuple[tuple[int, ...], tuple[int, ...]]:
    """(lowest release allowed, first release not allowed) of 'torch>=A,<B'."""
    low = high = None
    for clause in requirement.removeprefix("torch").split(","):
        clause = clause.strip()
        if clause.startswith(">="):
            low = release(clause[2:])
        elif clause.startswith("<"):
            high = release(clause[1:])
    if low is None or high is None:
        raise ValueError(f"{requirement!r}: expected torch>=A,<B")
    return low, high


def in_range(version: str, requirement: str = REQUIREMENT) -> bool:
    """Whether a torch version lies in the course's range (a local tag such as +cpu ignored)."""
    low, high = bounds(requirement)
    return low <= release(version) < high


def installed_torch() -> tuple[str, str] | None:
    """(version, location) of the torch this Python would import, without importing it."""
    from importlib import metadata

    try:
        dist = metadata.distribution("torch")
    except metadata.PackageNotFoundError:
        return None
    return dist.version, str(dist.locate_file(""))


def venv_args(found: tuple[str, str] | None, in_venv: bool = False) -> tuple[list[str], str]:
    """(arguments for `python -m venv`, the line to show): the system's site packages where
    they hold a torch in range, so that it is used instead of installed again. A venv made
    from inside another venv sees the base installation's packages, not that venv's: there,
    VENV=<that venv> uses it instead."""
    if found is None:
        return [], ""
    version, where = found
    if in_venv:
        return [], (f"PyTorch: {version} is in another virtual environment ({where}), which a "
                    "new venv cannot see; `make install VENV=<that environment>` would use it")
    if in_range(version):
        return ["--system-site-packages"], (
            f"PyTorch: keeping {version}, found in {where} ({REQUIREMENT}); "
            "`make clean install TORCH=<version>` installs another")
    return [], (f"PyTorch: {version} in {where} is outside {REQUIREMENT}; the venv gets its own")


def has_nvidia_driver() -> bool:
    """An NVIDIA driver on this machine (what a CUDA build needs to use a GPU)."""
    return shutil.which("nvidia-smi") is not None or os.path.exists("/proc/driver/nvidia")


def reachable(url: str, wait: float = REACH_WAIT) -> bool:
    """Whether url answers (any HTTP status) within `wait` seconds, name lookup included."""
    answered = threading.Event()

    def ask() -> None:
        try:
            with urllib.request.urlopen(url, timeout=wait):
                pass
            answered.set()
        except urllib.error.HTTPError:  # it answered, with an error status
            answered.set()
        except Exception:  # noqa: BLE001 - no route, no name, refused, reset: not reachable
            pass

    threading.Thread(target=ask, daemon=True).start()
    return answered.wait(wait)


def pip_args(build: Build, index: str = CPU_INDEX, wait: float = REACH_WAIT,
             explicit: bool = False) -> tuple[list[str], str]:
    """(pip arguments, the line to show) for a build; the CPU index is tried first."""
    if build.source == "default":
        return [], f"PyTorch: {build.why}."
    if reachable(f"{index}/torch/", wait):
        return ["--extra-index-url", index], f"PyTorch: {build.why}, from {index}."
    if explicit:
        raise BuildError(f"COURSE_TORCH=cpu, but {index} did not answer within {wait:g} s; "
                         "unset COURSE_TORCH to install pip's default build instead")
    return [], (f"PyTorch: {build.why} was wanted, but {index} did not answer within "
                f"{wait:g} s: installing pip's default build instead (on Linux, PyPI's is "
                f"the CUDA build, {CUDA_SIZE}; a wheel your pip configuration provides is "
                "used as it is).")


def local_cpu_build(python: str = sys.executable) -> str | None:
    """A CPU build in the course's range that pip can install here without any index (a wheel
    on disk that pip's configuration points to, such as a site's wheelhouse): 'torch==V', or
    None. `make hub` uses it on a machine without an NVIDIA GPU, where PyPI's build would add
    about 4 GB of CUDA libraries for nothing."""
    import json
    import subprocess

    try:
        found = subprocess.run([python, "-m", "pip", "install", "--dry-run", "--quiet",
                                "--no-index", "--no-deps", "--report", "-", REQUIREMENT],
                               capture_output=True, text=True, timeout=120)
        version = json.loads(found.stdout)["install"][0]["metadata"]["version"]
    except (OSError, subprocess.SubprocessError, ValueError, KeyError, IndexError):
        return None
    return f"torch=={version}" if version.endswith("+cpu") else None


def prefer_disk(build: Build, args: list[str], line: str, installed: tuple[str, str] | None,
                on_disk) -> tuple[list[str], str]:
    """Where the CPU build was wanted and its index did not answer (pip_args fell back to the
    default build): a CPU build in range that pip finds on this machine's disk (`on_disk()`,
    'torch==V' or None), rather than PyPI's CUDA build, unless the venv already holds a torch
    in range (kept as it is)."""
    if build.source != "cpu-index" or args or (installed and in_range(installed[0])):
        return args, line
    found = on_disk()
    if not found:
        return args, line
    return [found], (f"PyTorch: {build.why} was wanted, and {CPU_INDEX} did not answer within "
                     f"{REACH_WAIT:g} s: {found}, a CPU build pip finds on this machine's disk.")


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if argv == ["--local-cpu"]:  # make hub: a CPU build already on disk, where there is no GPU
        if (found := installed_torch()) and in_range(found[0]):
            print(f"PyTorch: keeping {found[0]}.", file=sys.stderr)
            return 0
        if (not has_nvidia_driver() and not os.environ.get("COURSE_TORCH", "").strip()
                and (found := local_cpu_build())):
            print(f"PyTorch: {found}, a CPU build pip finds on this machine's disk.",
                  file=sys.stderr)
            print(found)
            return 0
        argv = []
    if argv == ["--venv-args"]:
        args, line = venv_args(installed_torch(), in_venv=sys.prefix != sys.base_prefix)
        if line:
            print(line, file=sys.stderr)
        print(" ".join(args))
        return 0
    override = os.environ.get("COURSE_TORCH")
    try:
        build = choose(platform.system(), has_nvidia_driver(), override)
        args, line = pip_args(build, explicit=(override or "").strip().lower() == "cpu")
        if argv != ["--exact"]:  # make install TORCH=V passes --exact: that release, from anywhere
            args, line = prefer_disk(build, args, line, installed_torch(), local_cpu_build)
    except BuildError as e:
        print(f"make install: {e}", file=sys.stderr)
        return 1
    print(line, file=sys.stderr)
    print(" ".join(args))
    return 0


if __name__ == "__main__":
    sys.exit(main())
