"""Pure choices about ranks, devices and backends (no processes, no GPUs needed).

Introduced in notebook 00. Everything here is a plain function of its arguments, so the
GPU path can be unit-tested on a machine without GPUs by passing fake device counts.
"""

from __future__ import annotations

import ipaddress
import os
import re
import shlex
from collections.abc import Mapping, Sequence

DEFAULT_CPU_RANKS = 4
BACKENDS = ("gloo", "nccl")
# how engines start: forked here, by mpiexec, as a Slurm job, or as a step of the Slurm job
# (allocation) the kernel itself runs in
LAUNCHERS = ("local", "mpi", "slurm", "allocation")


class ClusterConfigError(ValueError):
    """A cluster request that cannot be satisfied on this machine; the message says what to do."""


def parse_world_size(value: object, source: str, what: str = "ranks", one: str = "rank") -> int:
    """Turn a world size (or another count of `what`) given by argument or environment into an
    int >= 1, or explain the fix."""
    try:
        n = int(str(value).strip())
    except ValueError:
        raise ClusterConfigError(
            f"{source}={value!r} is not a whole number; give a number of {what} from 1 up, e.g. 4"
        ) from None
    if n < 1:
        raise ClusterConfigError(
            f"{source}={n}: a cluster needs at least 1 {one}; give a number from 1 up"
        )
    return n


def require_ranks(world_size: int, min_ranks: int) -> int:
    """The world size, or an error saying that this notebook needs at least min_ranks ranks."""
    if world_size < min_ranks:
        raise ClusterConfigError(
            f"this notebook needs at least {min_ranks} ranks and {world_size} were asked for "
            f"(n= or COURSE_WORLD_SIZE); set COURSE_WORLD_SIZE={min_ranks} or more"
        )
    return world_size


def default_world_size(n_gpus: int) -> int:
    """One rank per GPU on a machine with 2 or more GPUs, otherwise 4 CPU ranks."""
    return n_gpus if n_gpus >= 2 else DEFAULT_CPU_RANKS


def resolve_world_size(n: int | None, n_gpus: int, env: Mapping[str, str] | None = None) -> int:
    """World size from the argument, else $COURSE_WORLD_SIZE, else the machine's default."""
    env = os.environ if env is None else env
    if n is not None:
        return parse_world_size(n, "n")
    if env.get("COURSE_WORLD_SIZE", "").strip():
        return parse_world_size(env["COURSE_WORLD_SIZE"], "COURSE_WORLD_SIZE")
    return default_world_size(n_gpus)


def choose_launcher(launcher: str | None, env: Mapping[str, str] | None = None) -> str:
    """How the engines start: the argument, else $COURSE_LAUNCHER, else 'allocation' where
    this process runs inside a Slurm job ($SLURM_JOB_ID: an HPC centre's Jupyter, or salloc
    then jupyter lab), else 'local'."""
    env = os.environ if env is None else env
    source = "launcher" if launcher is not None else "COURSE_LAUNCHER"
    value = (launcher if launcher is not None else env.get("COURSE_LAUNCHER", "")).strip().lower()
    if not value:
        return "allocation" if allocation(env) is not None else "local"
    if value not in LAUNCHERS:
        raise ClusterConfigError(f"{source}={value!r} is not a launcher the course knows; use "
                                 f"one of {', '.join(LAUNCHERS)}")
    return value


def shared_folder(env: Mapping[str, str] | None = None) -> str:
    """A folder that the hosts of a multi-host cluster see too: $COURSE_SHARED_DIR, else the
    current folder (the notebook's: on a cluster a home or project folder; /tmp is not shared)."""
    env = os.environ if env is None else env
    return env.get("COURSE_SHARED_DIR", "").strip() or os.getcwd()


def resolve_nodes(nodes: int | None, launcher: str, spans_hosts: bool,
                  env: Mapping[str, str] | None = None) -> int:
    """How many hosts the ranks are spread over: the argument, else $COURSE_NODES, else 1.
    Only a launcher that spans hosts (a Slurm job) may have more than one."""
    env = os.environ if env is None else env
    source = "nodes"
    if nodes is None and env.get("COURSE_NODES", "").strip():
        nodes, source = env["COURSE_NODES"], "COURSE_NODES"
    if nodes is None:
        return 1
    n = parse_world_size(nodes, source)
    if n > 1 and not spans_hosts:
        raise ClusterConfigError(f"{source}={n}: only launchers 'slurm' and 'allocation' "
                                 f"spread ranks over several hosts (this is {launcher!r}); set "
                                 "COURSE_LAUNCHER=slurm, or leave nodes unset")
    return n


def sbatch_extra(extra: Sequence[str] | str | None = None,
                 env: Mapping[str, str] | None = None) -> list[str]:
    """The extra options of the engines' Slurm job: $COURSE_SBATCH (e.g. "--partition=gpu
    --time=1:00:00 --gpus-per-node=4"), then extra (a string or a list of words)."""
    env = os.environ if env is None else env
    words = shlex.split(env.get("COURSE_SBATCH", ""))
    words += shlex.split(extra) if isinstance(extra, str) else list(extra or [])
    for word in words:
        if not word.startswith("-"):
            raise ClusterConfigError(f"sbatch option {word!r} does not start with '-'; give "
                                     "options such as --partition=gpu or --time=30 (one word "
                                     "each, with '=')")
        if re.match(r"--(ntasks|nodes|ntasks-per-node)(=|$)|-[nN]", word):
            raise ClusterConfigError(f"sbatch option {word!r}: the course sets the job's ranks "
                                     "and nodes itself; use n= (COURSE_WORLD_SIZE) and nodes= "
                                     "(COURSE_NODES) instead")
    return words


def sbatch_options(world_size: int, nodes: int, extra: Sequence[str]) -> list[str]:
    """The engines' job: its shape (ranks, nodes, the same number of ranks on each), then extra."""
    if world_size % nodes:
        raise ClusterConfigError(f"{nodes} nodes do not share {world_size} ranks evenly; give "
                                 f"a world size (COURSE_WORLD_SIZE) that is a multiple of {nodes}")
    return [f"--ntasks={world_size}", f"--nodes={nodes}",
            f"--ntasks-per-node={world_size // nodes}", *extra]


def gpus_per_node(options: Sequence[str]) -> int:
    """GPUs a job asks for on each node (--gpus-per-node=K, or --gres=gpu[:type]:K); 0 if none."""
    count = 0
    for word in options:
        if m := re.fullmatch(r"--gpus-per-node=(?:[\w-]+:)?(\d+)", word):
            count = int(m[1])
        elif m := re.fullmatch(r"--gres=(?:.*,)?gpu(?::[\w-]+)?:(\d+)(?:,.*)?", word):
            count = int(m[1])
    return count


def controller_address(env: Mapping[str, str], resolved: str | None) -> str:
    """The address the controller listens on for engines of a Slurm job: $COURSE_CONTROLLER_IP,
    else the address this machine's name resolves to (resolved), if that is not loopback."""
    value = env.get("COURSE_CONTROLLER_IP", "").strip() or (resolved or "")
    try:
        address = ipaddress.ip_address(value)
    except ValueError:
        address = None
    if address is None or address.is_loopback or address.is_unspecified:
        got = f"COURSE_CONTROLLER_IP={value!r}" if env.get("COURSE_CONTROLLER_IP", "").strip() \
            else f"this machine's name resolves to {value or 'nothing'}"
        raise ClusterConfigError(
            f"launcher 'slurm' needs the address of this machine on the network the compute "
            f"nodes share ({got}); set COURSE_CONTROLLER_IP to it (for make cluster-up's "
            f"cluster: source .cluster/env). Never 0.0.0.0: that would listen everywhere")
    return str(address)


def interface_with(address: str, interfaces: Mapping[str, Sequence[str]]) -> str:
    """The name of the interface that has this address ({name: [its addresses]})."""
    for name, addresses in interfaces.items():
        if address in addresses:
            return name
    raise ClusterConfigError(f"no network interface has address {address} (interfaces: "
                             f"{sorted(interfaces)}); set COURSE_SOCKET_IFNAME to the "
                             "interface the ranks share")


def mpi_arguments(version_text: str, as_root: bool) -> list[str]:
    """mpiexec's extra arguments for the course's engines, from `mpiexec --version`: Open MPI
    must be allowed more processes than cores (--oversubscribe) and, as root, to run at all."""
    if "open mpi" not in version_text.lower() and "openrte" not in version_text.lower():
        return []  # MPICH and others: no such switches needed
    return ["--oversubscribe"] + (["--allow-run-as-root"] if as_root else [])


def isolation(env: Mapping[str, str], platform: str, euid: int, unshare: str | None,
              ip: str | None) -> tuple[list[str] | None, str]:
    """How a local cluster's engines get a network of their own: the command that runs the
    fork server (and so every engine) in a new network namespace whose only interface is its
    own loopback, or None; and, in words, what that means. In such a namespace the ranks'
    listeners (gloo's, a TCP store's, RPC's) cannot be reached by any other process of the
    machine, another user's included; the kernel still reaches the engines through Unix
    sockets in the cluster's private folder. $COURSE_ISOLATE=0 turns it off."""
    if env.get("COURSE_ISOLATE", "").strip() == "0":
        return None, "not isolated (COURSE_ISOLATE=0)"
    if not platform.startswith("linux"):
        return None, "not isolated (network namespaces are Linux's)"
    if unshare is None or ip is None:
        return None, "not isolated (needs unshare and ip: Debian's util-linux and iproute2)"
    return ([unshare, *own_network(euid), "sh", "-c", f'{ip} link set lo up && exec "$0" "$@"'],
            "ranks in a network namespace of their own")


def own_network(euid: int) -> list[str]:
    """unshare's switches for a network namespace of one's own: root needs only --net; any
    other user first enters a user namespace in which it is root."""
    return ["--net"] if euid == 0 else ["--user", "--map-root-user", "--net"]


def choose_backend(
    world_size: int,
    n_gpus: int,
    requested: str | None = None,
    env: Mapping[str, str] | None = None,
) -> str:
    """nccl when every rank can have its own GPU, gloo otherwise; an explicit request wins."""
    env = os.environ if env is None else env
    source = "backend"
    if requested is None and env.get("COURSE_BACKEND", "").strip():
        requested, source = env["COURSE_BACKEND"].strip(), "COURSE_BACKEND"
    if requested is None:
        return "nccl" if n_gpus >= 2 and world_size <= n_gpus else "gloo"
    backend = requested.lower()
    if backend not in BACKENDS:
        raise ClusterConfigError(
            f"{source}={requested!r} is not supported by the course; use one of {BACKENDS}"
        )
    if backend == "nccl" and world_size > n_gpus:
        raise ClusterConfigError(
            f"{source}='nccl' needs one GPU per rank: {world_size} ranks asked for, "
            f"{n_gpus} GPU(s) visible. Use backend='gloo' (CPU ranks), or ask for at most "
            f"{n_gpus} ranks (n= or COURSE_WORLD_SIZE)"
            if n_gpus
            else f"{source}='nccl' needs GPUs and this machine has none visible; "
            "use backend='gloo' (CPU ranks) or leave backend unset"
        )
    return backend


def device_for(local_rank: int, backend: str) -> str:
    """The device a rank computes on: its own GPU under nccl, the CPU under gloo."""
    if local_rank < 0:
        raise ClusterConfigError(f"local_rank must be >= 0, got {local_rank}")
    return f"cuda:{local_rank}" if backend == "nccl" else "cpu"


def group_backend(backend: str) -> str:
    """The backend the default group is formed with: under nccl, gloo beside it.

    NCCL moves only GPU tensors. A default group of NCCL alone would fail on a CPU tensor or
    a Python object (``all_gather_object``) with "No backend type associated with device type
    cpu"; ``cpu:gloo,cuda:nccl`` sends those through gloo, so the same cell runs on a GPU node
    as on a laptop, while the lessons' own tensors (on ``device``) go through NCCL.
    """
    return "cpu:gloo,cuda:nccl" if backend == "nccl" else backend


def backend_for(device_type: str, group_backend_name: str) -> str:
    """Which backend moves a tensor of device_type ('cpu', 'cuda') in a group formed with
    group_backend_name ('gloo', 'nccl' or 'cpu:gloo,cuda:nccl', as dist.get_backend() says)."""
    if ":" not in group_backend_name:
        return group_backend_name
    pairs = dict(pair.split(":", 1) for pair in group_backend_name.split(","))
    if device_type not in pairs:
        raise ClusterConfigError(f"a group with backends {group_backend_name!r} has none for "
                                 f"{device_type} tensors; move the tensor to one of {list(pairs)}")
    return pairs[device_type]


def second_gpu(local_rank: int, ranks_on_host: int, gpus_on_host: int) -> str | None:
    """A second GPU for a rank that drives two (notebook 04, a model split over two devices).

    The host's ranks use GPUs 0..R-1 (R ranks on the host); rank r's second one is R + r,
    which exists only with at least 2R GPUs. None otherwise: the rank has one device.
    """
    if not 0 <= local_rank < ranks_on_host:
        raise ClusterConfigError(f"local rank {local_rank} is not among the {ranks_on_host} "
                                 "ranks of its host")
    return f"cuda:{ranks_on_host + local_rank}" if gpus_on_host >= 2 * ranks_on_host else None


def local_ranks(hosts: Sequence[str]) -> list[int]:
    """Local rank of each global rank: its position among the ranks on the same host."""
    seen: dict[str, int] = {}
    out = []
    for host in hosts:
        out.append(seen.get(host, 0))
        seen[host] = out[-1] + 1
    return out


def threads_per_rank(cores: int, ranks_on_host: int, env: Mapping[str, str] | None = None) -> int:
    """CPU threads each rank may use so that the ranks on one host do not oversubscribe it;
    $COURSE_THREADS, where set (a workshop's class-wide setting: `make hub`), decides instead."""
    env = os.environ if env is None else env
    if env.get("COURSE_THREADS", "").strip():
        return parse_world_size(env["COURSE_THREADS"], "COURSE_THREADS", "CPU threads per rank",
                                "thread per rank")
    return max(1, cores // max(1, ranks_on_host))


def usable_cores() -> int:
    """The CPUs this process may run on (its affinity: a cgroup's or taskset's share of the
    machine), or all of them where the system does not say."""
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:  # macOS
        return os.cpu_count() or 1


def loopback_interface(interface_names: Sequence[str]) -> str:
    """Name of the loopback network interface ('lo' on Linux, 'lo0' on macOS)."""
    for name in ("lo", "lo0"):
        if name in interface_names:
            return name
    for name in interface_names:
        if name.startswith("lo"):
            return name
    raise ClusterConfigError(
        f"no loopback interface among {list(interface_names)}; set GLOO_SOCKET_IFNAME "
        "to the interface the ranks should use"
    )


def allocation(env: Mapping[str, str] | None = None) -> dict[str, object] | None:
    """The Slurm job this process runs inside, as its environment says, or None outside one:
    {"job": id, "nodes": how many, "node_list": Slurm's list of them, "gpus_per_node": GPUs on
    each node (0 if none)}. Slurm sets SLURM_JOB_ID, SLURM_JOB_NUM_NODES and SLURM_JOB_NODELIST
    in every process of a job (salloc's shell, a batch script, srun's tasks), and
    SLURM_GPUS_ON_NODE where the job has GPUs on the node."""
    env = os.environ if env is None else env
    job = env.get("SLURM_JOB_ID", "").strip()
    if not job:
        return None
    nodes = env.get("SLURM_JOB_NUM_NODES", env.get("SLURM_NNODES", "1")).strip()
    gpus = env.get("SLURM_GPUS_ON_NODE", "").strip()
    if not gpus:  # --gpus-per-node=[type:]K, as the job asked
        asked = env.get("SLURM_GPUS_PER_NODE", "").strip()
        gpus = asked.rsplit(":", 1)[-1] if asked else "0"
    try:
        count, per_node = int(nodes), int(gpus)
    except ValueError:
        raise ClusterConfigError(f"Slurm job {job}: SLURM_JOB_NUM_NODES={nodes!r} and "
                                 f"SLURM_GPUS_ON_NODE={gpus!r} should be numbers; is this "
                                 "process inside the job? (COURSE_LAUNCHER=local ignores "
                                 "the job)") from None
    return {"job": job, "nodes": count, "node_list": env.get("SLURM_JOB_NODELIST", ""),
            "gpus_per_node": per_node}


def step_options(world_size: int, nodes: int, job_nodes: int, extra: Sequence[str]) -> list[str]:
    """srun's options for the engines' step inside the job: its shape (ranks, nodes, the same
    number on each), on at most the job's nodes, then extra (sbatch=, not $COURSE_SBATCH: the
    job's partition and time were chosen when it was allocated)."""
    if nodes > job_nodes:
        raise ClusterConfigError(f"{nodes} nodes asked for, and the Slurm job this notebook "
                                 f"runs in has {job_nodes}: ask for {job_nodes} or fewer "
                                 "(nodes= or COURSE_NODES)")
    return sbatch_options(world_size, nodes, extra)
