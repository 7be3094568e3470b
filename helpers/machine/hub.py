"""A workshop server: the course for several local accounts through JupyterHub (`make hub`).

The class-wide settings (who the learners are, ranks and threads per learner, which GPUs each
gets) are set once by the instructor as make variables; `make hub` hands them to
`jupyterhub_config.py` (beside this file) as ``COURSE_HUB_*`` variables. The choices are plain
functions of their arguments, tested with fake GPU and core counts.

Run by the Makefile before the hub's environment exists, so the standard library only:

    python3 helpers/machine/hub.py shared-python     # a Python every account may run
    python3 helpers/machine/hub.py plan              # each learner's settings, as a table

and, as each learner, by JupyterHub (``Spawner.cmd``): ``python -m helpers.machine.hub
singleuser ...`` copies the course into the learner's home (files they lack; never over their
own), links the installed helpers/ beside it for reading, and starts their JupyterLab.
"""

from __future__ import annotations

import os
import pwd
import re
import shutil
import stat
import sys
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

HOME_FOLDER = "distributed-course"  # each learner's copy of the course, in their home
DEFAULT_URL = "/lab/tree/notebooks/00_cluster.ipynb"
DEFAULT_RANKS = 4
PYTHONS = ("python3", "/usr/bin/python3", "/usr/local/bin/python3")


class HubConfigError(ValueError):
    """A class setting that cannot work; the message says what to change."""


@dataclass(frozen=True)
class Learner:
    """One learner's share of the machine: the environment their JupyterLab starts with."""

    name: str
    ranks: int
    threads: int
    gpus: str  # CUDA_VISIBLE_DEVICES: "0,1" or "" (no GPU: CPU ranks with gloo)

    def environment(self) -> dict[str, str]:
        return {"COURSE_WORLD_SIZE": str(self.ranks), "COURSE_THREADS": str(self.threads),
                "CUDA_VISIBLE_DEVICES": self.gpus}

    def describe(self) -> str:
        kind = f"GPUs {self.gpus} (nccl)" if self.gpus else "CPU ranks (gloo)"
        return f"{self.name}: {self.ranks} ranks, {kind}, {self.threads} threads per rank"


def plan(learners: Sequence[str], ranks: int, threads: int | None, gpus: int,
         cores: int) -> list[Learner]:
    """Each learner's share: with G GPUs and N learners, G // N GPUs each (one rank per GPU)
    where that is 2 or more, the same GPUs never given twice; else `ranks` CPU ranks each and
    no GPU (one GPU each would allow world size 1 only: NCCL refuses two ranks on one GPU).
    Threads per rank: `threads`, else the cores shared by all the class's ranks (at least 1)."""
    if not learners:
        raise HubConfigError("no learners: name their accounts, make hub LEARNERS='ada bob'")
    if len(set(learners)) != len(learners):
        raise HubConfigError(f"LEARNERS names an account twice: {' '.join(learners)}")
    if ranks < 1 or (threads is not None and threads < 1) or gpus < 0:
        raise HubConfigError("RANKS_EACH and THREADS_EACH are whole numbers from 1 up, "
                             "GPUS from 0 up")
    each = gpus // len(learners)
    out = []
    for i, name in enumerate(learners):
        n = each if each >= 2 else ranks
        devices = ",".join(str(g) for g in range(i * each, (i + 1) * each)) if each >= 2 else ""
        share = threads or max(1, cores // (len(learners) * n))
        out.append(Learner(name, n, share, devices))
    return out


def _whole(env: Mapping[str, str], key: str, default: int | None) -> int | None:
    value = env.get(key, "").strip()
    if not value:
        return default
    if not re.fullmatch(r"\d+", value):
        raise HubConfigError(f"{key}={value!r}: give a whole number")
    return int(value)


def gpus_here() -> int:
    """NVIDIA GPUs on this machine, from the driver's device files (no CUDA needed)."""
    return len([p for p in Path("/dev").glob("nvidia[0-9]*") if p.name[6:].isdigit()])


def class_from(env: Mapping[str, str], cores: int | None = None,
               gpus: int | None = None) -> list[Learner]:
    """The class `make hub` was given (COURSE_HUB_LEARNERS, _RANKS, _THREADS, _GPUS), checked
    against the accounts of this machine."""
    names = env.get("COURSE_HUB_LEARNERS", "").replace(",", " ").split()
    missing = [n for n in names if not _account(n)]
    if missing:
        raise HubConfigError(f"no account for {' '.join(missing)} on this machine: create it "
                             "(useradd --create-home NAME, then passwd NAME) or leave it out")
    found_gpus = gpus_here() if gpus is None else gpus
    return plan(names, _whole(env, "COURSE_HUB_RANKS", DEFAULT_RANKS),
                _whole(env, "COURSE_HUB_THREADS", None),
                _whole(env, "COURSE_HUB_GPUS", found_gpus),
                cores or len(os.sched_getaffinity(0)))


def tls(env: Mapping[str, str]) -> tuple[str, str] | None:
    """The certificate and key the hub speaks HTTPS with (COURSE_HUB_SSL_CERT, _KEY), or None
    for plain HTTP; both or neither, each a file that can be read."""
    cert, key = (env.get(f"COURSE_HUB_SSL_{k}", "").strip() for k in ("CERT", "KEY"))
    if not cert and not key:
        return None
    if not cert or not key:
        raise HubConfigError("give both HUB_SSL_CERT and HUB_SSL_KEY (the certificate and its "
                             "private key, PEM files), or neither")
    for path in (cert, key):
        if not os.access(path, os.R_OK):
            raise HubConfigError(f"cannot read {path}: give the path of a PEM file")
    return cert, key


def _account(name: str) -> pwd.struct_passwd | None:
    try:
        return pwd.getpwnam(name)
    except KeyError:
        return None


def readable_by_all(path: Path) -> bool:
    """Whether any account may run the file: every folder above it searchable by all, the file
    itself readable and executable by all."""
    path = path.resolve()
    if (path.stat().st_mode & (stat.S_IROTH | stat.S_IXOTH)) != stat.S_IROTH | stat.S_IXOTH:
        return False
    return all(p.stat().st_mode & stat.S_IXOTH for p in path.parents)


def shared_python(candidates: Sequence[str] = PYTHONS) -> str:
    """The first Python 3.11+ that every learner's account may run (a Python under /root,
    as pyenv installs it for root, is not one)."""
    tried = []
    for name in candidates:
        found = shutil.which(name)
        if not found:
            continue
        real = Path(found).resolve()
        if readable_by_all(real) and re.search(r"python3\.(1[1-9]|[2-9]\d)$", real.name):
            return str(real)
        tried.append(str(real))
    raise HubConfigError(f"no Python 3.11+ that every account may run (tried {tried or 'none'}): "
                         "install one (Debian: apt-get install python3 python3-venv) or name it, "
                         "make hub HUB_PYTHON=/path/to/python3")


def copy_course(source: Path, home: Path) -> list[str]:
    """Copy the course into home/distributed-course: the files the learner does not have yet,
    never over a file of theirs (their notebooks keep their work). The paths copied."""
    target = home / HOME_FOLDER
    copied = []
    for path in sorted(source.rglob("*")):
        to = target / path.relative_to(source)
        if path.is_dir():
            to.mkdir(parents=True, exist_ok=True)
        elif not to.exists():
            to.parent.mkdir(parents=True, exist_ok=True)
            shutil.copyfile(path, to)
            copied.append(str(path.relative_to(source)))
    return copied


PACKAGE = Path(__file__).resolve().parent.parent  # the installed helpers/


def link_helpers(home: Path, package: Path = PACKAGE) -> None:
    """home/distributed-course/helpers: the installed package itself (read-only, always the
    code that runs), for the notebooks' mentions of helpers/*.py, as `make lab` shows it."""
    link = home / HOME_FOLDER / "helpers"
    if not link.exists() and not link.is_symlink():
        link.symlink_to(package, target_is_directory=True)


def singleuser(args: Sequence[str]) -> None:
    """As the learner: their copy of the course, then their JupyterLab (JupyterHub's own
    single-user server, in this environment)."""
    os.umask(0o077)  # what the learner saves is theirs alone
    home = Path.home()
    copy_course(Path(os.environ["COURSE_HUB_COURSE"]), home)
    link_helpers(home)
    (home / HOME_FOLDER).chmod(0o700)  # their work: no other account may list or read it
    server = str(Path(sys.executable).with_name("jupyterhub-singleuser"))
    os.execv(server, [server, *args])


def main(argv: Sequence[str]) -> int:
    try:
        if argv[:1] == ["shared-python"]:
            print(shared_python([argv[1]] if len(argv) > 1 and argv[1] else PYTHONS))
        elif argv[:1] == ["plan"]:
            for learner in class_from(os.environ):
                print(learner.describe())
            scheme = "https" if tls(os.environ) else "http (no TLS: keep it on loopback)"
            print(f"the hub speaks {scheme}")
        elif argv[:1] == ["singleuser"]:
            singleuser(argv[1:])
        else:
            print(__doc__, file=sys.stderr)
            return 2
    except HubConfigError as e:
        print(f"make hub: {e}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
