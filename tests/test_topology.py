"""The pure choices behind the cluster, checked with fake GPU counts (no GPU needed)."""

import pytest

from helpers.cluster.topology import (
    DEFAULT_CPU_RANKS,
    ClusterConfigError,
    allocation,
    backend_for,
    choose_backend,
    choose_launcher,
    controller_address,
    default_world_size,
    device_for,
    gpus_per_node,
    group_backend,
    interface_with,
    isolation,
    local_ranks,
    loopback_interface,
    mpi_arguments,
    own_network,
    require_ranks,
    resolve_nodes,
    resolve_world_size,
    sbatch_extra,
    sbatch_options,
    second_gpu,
    step_options,
    threads_per_rank,
)


@pytest.mark.parametrize("n_gpus, expected", [(0, 4), (1, 4), (2, 2), (8, 8)])
def test_default_world_size_is_one_rank_per_gpu_from_two_gpus(n_gpus, expected):
    assert default_world_size(n_gpus) == expected


def test_world_size_argument_beats_environment_beats_default():
    env = {"COURSE_WORLD_SIZE": "3"}
    assert resolve_world_size(2, 8, env) == 2
    assert resolve_world_size(None, 8, env) == 3
    assert resolve_world_size(None, 8, {}) == 8
    assert resolve_world_size(None, 0, {"COURSE_WORLD_SIZE": " "}) == 4


@pytest.mark.parametrize("bad", [0, -1, "0", "two", "1.5"])
def test_bad_world_size_says_what_to_do(bad):
    with pytest.raises(ClusterConfigError, match="COURSE_WORLD_SIZE") as err:
        resolve_world_size(None, 0, {"COURSE_WORLD_SIZE": str(bad)})
    assert "1" in str(err.value)
    with pytest.raises(ClusterConfigError, match="n="):
        resolve_world_size(bad, 0, {})


@pytest.mark.parametrize(
    "world_size, n_gpus, expected",
    [(4, 0, "gloo"), (4, 1, "gloo"), (2, 2, "nccl"), (4, 8, "nccl"), (8, 4, "gloo"),
     (1, 1, "gloo")],
)
def test_backend_is_nccl_only_when_every_rank_has_a_gpu(world_size, n_gpus, expected):
    assert choose_backend(world_size, n_gpus, env={}) == expected


def test_explicit_backend_wins_and_is_validated():
    assert choose_backend(4, 8, "gloo", env={}) == "gloo"
    assert choose_backend(2, 2, "NCCL", env={}) == "nccl"
    assert choose_backend(4, 8, env={"COURSE_BACKEND": "gloo"}) == "gloo"
    with pytest.raises(ClusterConfigError, match="one of"):
        choose_backend(2, 2, "mpi", env={})


def test_nccl_without_enough_gpus_is_a_clear_error():
    with pytest.raises(ClusterConfigError, match="has none visible"):
        choose_backend(2, 0, "nccl", env={})
    with pytest.raises(ClusterConfigError, match="4 ranks asked for, 2 GPU"):
        choose_backend(4, 2, "nccl", env={})
    with pytest.raises(ClusterConfigError, match="COURSE_BACKEND"):
        choose_backend(4, 2, env={"COURSE_BACKEND": "nccl"})


def test_device_per_rank():
    assert [device_for(i, "nccl") for i in range(3)] == ["cuda:0", "cuda:1", "cuda:2"]
    assert device_for(5, "gloo") == "cpu"
    with pytest.raises(ClusterConfigError):
        device_for(-1, "nccl")


def test_local_ranks_count_within_each_host():
    assert local_ranks(["a"] * 4) == [0, 1, 2, 3]
    assert local_ranks(["a", "a", "b", "b", "b"]) == [0, 1, 0, 1, 2]


@pytest.mark.parametrize("cores, ranks, expected", [(2, 4, 1), (16, 4, 4), (8, 3, 2), (1, 1, 1)])
def test_threads_never_oversubscribe(cores, ranks, expected):
    assert threads_per_rank(cores, ranks, {}) == expected
    assert expected * ranks <= max(cores, ranks)


def test_loopback_interface_on_linux_and_macos():
    assert loopback_interface(["eth0", "lo"]) == "lo"
    assert loopback_interface(["en0", "lo0", "utun0"]) == "lo0"
    with pytest.raises(ClusterConfigError, match="GLOO_SOCKET_IFNAME"):
        loopback_interface(["eth0"])


def test_a_notebook_that_needs_more_ranks_says_how_many():
    assert require_ranks(2, 2) == 2
    with pytest.raises(ClusterConfigError, match="at least 2 ranks and 1 were asked for"):
        require_ranks(1, 2)


def test_the_default_group_under_nccl_has_gloo_for_cpu_tensors_and_objects():
    assert group_backend("nccl") == "cpu:gloo,cuda:nccl"
    assert group_backend("gloo") == "gloo"
    assert backend_for("cuda", "cpu:gloo,cuda:nccl") == "nccl"
    assert backend_for("cpu", "cpu:gloo,cuda:nccl") == "gloo"
    assert backend_for("cpu", "gloo") == "gloo" and backend_for("cuda", "nccl") == "nccl"
    with pytest.raises(ClusterConfigError, match="none for cpu tensors"):
        backend_for("cpu", "cuda:nccl")


def test_a_second_gpu_only_with_two_gpus_per_rank():
    # an 8-GPU node: 4 ranks get GPUs 0-3 and 4-7; 8 ranks (the default) get no second one
    assert [second_gpu(r, 4, 8) for r in range(4)] == ["cuda:4", "cuda:5", "cuda:6", "cuda:7"]
    assert second_gpu(0, 8, 8) is None and second_gpu(2, 3, 5) is None
    assert second_gpu(0, 2, 4) == "cuda:2" and second_gpu(0, 4, 0) is None  # CPU ranks
    with pytest.raises(ClusterConfigError, match="not among"):
        second_gpu(4, 4, 8)


def test_the_launcher_comes_from_the_argument_then_the_environment_then_local():
    assert choose_launcher(None, {}) == "local"
    assert choose_launcher(None, {"COURSE_LAUNCHER": " MPI "}) == "mpi"
    assert choose_launcher("local", {"COURSE_LAUNCHER": "mpi"}) == "local"
    assert choose_launcher(None, {"COURSE_LAUNCHER": "slurm"}) == "slurm"
    with pytest.raises(ClusterConfigError, match=r"COURSE_LAUNCHER='pbs' is not a launcher .* "
                                                 r"local, mpi, slurm, allocation$"):
        choose_launcher(None, {"COURSE_LAUNCHER": "pbs"})


def test_inside_a_slurm_job_the_launcher_is_a_step_of_that_job_unless_told_otherwise():
    job = {"SLURM_JOB_ID": "42", "SLURM_JOB_NUM_NODES": "2", "SLURM_JOB_NODELIST": "node[1-2]"}
    assert choose_launcher(None, job) == "allocation"
    assert choose_launcher(None, {**job, "COURSE_LAUNCHER": "local"}) == "local"
    assert choose_launcher("slurm", job) == "slurm"
    assert choose_launcher(None, {"SLURM_JOB_ID": " "}) == "local"


def test_a_slurm_jobs_nodes_and_gpus_are_read_from_its_environment():
    assert allocation({}) is None
    assert allocation({"SLURM_JOB_ID": "42", "SLURM_JOB_NUM_NODES": "2",
                       "SLURM_JOB_NODELIST": "node[1-2]"}) == {
        "job": "42", "nodes": 2, "node_list": "node[1-2]", "gpus_per_node": 0}
    # GPUs: those on this node, else the job's --gpus-per-node=[type:]K; older Slurm: NNODES
    assert allocation({"SLURM_JOB_ID": "7", "SLURM_NNODES": "4", "SLURM_GPUS_ON_NODE": "8"})[
        "gpus_per_node"] == 8
    assert allocation({"SLURM_JOB_ID": "7", "SLURM_GPUS_PER_NODE": "a100:4"})[
        "gpus_per_node"] == 4
    assert allocation({"SLURM_JOB_ID": "7"})["nodes"] == 1
    with pytest.raises(ClusterConfigError, match=r"Slurm job 7: SLURM_JOB_NUM_NODES='x'"):
        allocation({"SLURM_JOB_ID": "7", "SLURM_JOB_NUM_NODES": "x"})


def test_the_engines_step_fits_in_the_job():
    assert step_options(8, 2, 2, ["--cpus-per-task=2"]) == [
        "--ntasks=8", "--nodes=2", "--ntasks-per-node=4", "--cpus-per-task=2"]
    assert step_options(4, 1, 2, []) == ["--ntasks=4", "--nodes=1", "--ntasks-per-node=4"]
    with pytest.raises(ClusterConfigError, match=r"3 nodes asked for, and the Slurm job this "
                                                 r"notebook runs in has 2"):
        step_options(6, 3, 2, [])
    with pytest.raises(ClusterConfigError, match=r"2 nodes do not share 3 ranks evenly"):
        step_options(3, 2, 2, [])


def test_nodes_come_from_the_argument_then_the_environment_and_only_slurm_spans_hosts():
    assert resolve_nodes(None, "slurm", True, {}) == 1
    assert resolve_nodes(None, "slurm", True, {"COURSE_NODES": " 2 "}) == 2
    assert resolve_nodes(3, "slurm", True, {"COURSE_NODES": "2"}) == 3
    assert resolve_nodes(1, "local", False, {}) == 1
    with pytest.raises(ClusterConfigError, match=r"COURSE_NODES=2: only launchers 'slurm' and "
                                                 r"'allocation'"):
        resolve_nodes(None, "local", False, {"COURSE_NODES": "2"})
    with pytest.raises(ClusterConfigError, match=r"nodes='two' is not a whole number"):
        resolve_nodes("two", "slurm", True, {})
    with pytest.raises(ClusterConfigError, match=r"at least 1"):
        resolve_nodes(0, "slurm", True, {})


def test_the_slurm_job_has_the_courses_shape_then_the_sites_options():
    extra = sbatch_extra(["--time=10"], {"COURSE_SBATCH": "--partition=gpu --gpus-per-node=4"})
    assert extra == ["--partition=gpu", "--gpus-per-node=4", "--time=10"]
    assert sbatch_extra("--account=abc --time=5", {}) == ["--account=abc", "--time=5"]
    assert sbatch_options(4, 2, extra) == ["--ntasks=4", "--nodes=2", "--ntasks-per-node=2",
                                           *extra]
    assert sbatch_options(8, 1, []) == ["--ntasks=8", "--nodes=1", "--ntasks-per-node=8"]
    with pytest.raises(ClusterConfigError, match=r"2 nodes do not share 3 ranks evenly"):
        sbatch_options(3, 2, [])
    for shape in ("--ntasks=3", "-N2", "--nodes=4", "--ntasks-per-node=1", "-n", "--nodes"):
        with pytest.raises(ClusterConfigError, match=r"the course sets the job's ranks"):
            sbatch_extra([shape], {})
    with pytest.raises(ClusterConfigError, match=r"'gpu' does not start with '-'"):
        sbatch_extra("--partition gpu", {})


def test_gpus_per_node_are_read_from_the_jobs_options():
    assert gpus_per_node([]) == 0
    assert gpus_per_node(["--partition=gpu", "--gpus-per-node=4"]) == 4
    assert gpus_per_node(["--gpus-per-node=a100:8"]) == 8
    assert gpus_per_node(["--gres=gpu:2"]) == 2
    assert gpus_per_node(["--gres=gpu:h100:4,shard:1"]) == 4
    assert gpus_per_node(["--gres=shard:1,gpu:3"]) == 3
    # with 2 nodes of 4 GPUs, 8 ranks get nccl, 16 do not
    assert choose_backend(8, gpus_per_node(["--gpus-per-node=4"]) * 2) == "nccl"
    assert choose_backend(16, gpus_per_node(["--gpus-per-node=4"]) * 2) == "gloo"


def test_the_controller_listens_on_the_nodes_network_never_on_loopback_or_everywhere():
    assert controller_address({"COURSE_CONTROLLER_IP": "10.1.2.3"}, "127.0.1.1") == "10.1.2.3"
    assert controller_address({}, "192.168.5.6") == "192.168.5.6"
    for env, resolved in (({}, "127.0.1.1"), ({}, None),
                          ({"COURSE_CONTROLLER_IP": "0.0.0.0"}, None),
                          ({"COURSE_CONTROLLER_IP": "head"}, "10.0.0.1")):
        with pytest.raises(ClusterConfigError, match=r"set COURSE_CONTROLLER_IP to it"):
            controller_address(env, resolved)


def test_the_interface_is_the_one_with_the_routes_address():
    found = {"lo": ["127.0.0.1", "::1"], "eth0": ["10.77.0.2", "fe80::1"], "ib0": ["192.168.0.2"]}
    assert interface_with("10.77.0.2", found) == "eth0"
    assert interface_with("192.168.0.2", found) == "ib0"
    with pytest.raises(ClusterConfigError, match=r"no network interface has address 10.9.9.9.*"
                                                 r"COURSE_SOCKET_IFNAME"):
        interface_with("10.9.9.9", found)


def test_mpiexec_switches_depend_on_which_mpi():
    open_mpi = "mpiexec (OpenRTE) 4.1.4\n\nReport bugs to http://www.open-mpi.org/community/help/"
    assert mpi_arguments(open_mpi, as_root=True) == ["--oversubscribe", "--allow-run-as-root"]
    assert mpi_arguments("mpiexec (Open MPI) 5.0.3", as_root=False) == ["--oversubscribe"]
    assert mpi_arguments("HYDRA build details:\n    Version: 4.2.0", as_root=True) == []


def test_a_network_namespace_of_ones_own_needs_a_user_namespace_unless_root():
    assert own_network(0) == ["--net"]
    assert own_network(1000) == ["--user", "--map-root-user", "--net"]


@pytest.mark.parametrize(("files", "found"), [
    ((), []),
    (("/dev/nvidiactl", "/dev/nvidia0"), ["/dev/nvidiactl", "/dev/nvidia0"]),
    (("/dev/dxg",), ["/dev/dxg"]),          # a GPU under WSL
    (("/dev/kfd",), ["/dev/kfd"]),          # an AMD GPU (ROCm builds of torch use torch.cuda)
    (("/dev/null", "/dev/nvme0"), []),
])
def test_gpus_are_looked_for_in_torch_only_where_a_gpu_device_file_exists(files, found):
    from helpers.cluster.launchers.base import gpu_device_files, visible_gpus

    assert gpu_device_files(files.__contains__) == found
    if not found:  # no device file: no GPU, whatever torch would have said
        assert visible_gpus(files.__contains__) == 0


# ---- every node a workshop has: 1 to 16 GPUs per node, 1 to 4 nodes, one rank per GPU ------
@pytest.mark.parametrize("per_node", range(1, 17))
@pytest.mark.parametrize("nodes", range(1, 5))
def test_one_rank_per_gpu_on_every_shape_of_node_and_cluster(per_node, nodes):
    """What start_cluster decides for a job of `nodes` hosts with `per_node` GPUs each (Slurm's
    --gpus-per-node), the ranks laid out host by host as the launchers lay them: the world
    size, the backend, each rank's device and local rank, threads, a second GPU (notebook 04).
    (Notebook 09's 2-D mesh on the same shapes: tests/test_model_parallel.py.)"""
    gpus = nodes * per_node
    world = resolve_world_size(None, gpus, {})
    backend = choose_backend(world, gpus if gpus >= 2 else 0, env={})
    if gpus < 2:  # one GPU: 4 CPU ranks on gloo
        assert (world, backend) == (DEFAULT_CPU_RANKS, "gloo")
        assert {device_for(lr, backend) for lr in range(world)} == {"cpu"}
        return
    assert (world, backend) == (gpus, "nccl")
    hosts = [f"node{r // per_node}" for r in range(world)]
    locals_ = local_ranks(hosts)
    devices = [device_for(lr, backend) for lr in locals_]
    assert all(d == f"cuda:{lr}" and lr < per_node for d, lr in zip(devices, locals_))
    assert len(set(zip(hosts, devices))) == world, "two ranks share a GPU"
    assert all(second_gpu(lr, per_node, per_node) is None for lr in locals_)
    assert threads_per_rank(16, per_node) * per_node <= 16


def test_a_local_cluster_gets_a_network_of_its_own_where_linux_allows():
    prefix, said = isolation({}, "linux", 1000, "/usr/bin/unshare", "/sbin/ip")
    assert prefix == ["/usr/bin/unshare", "--user", "--map-root-user", "--net", "sh", "-c",
                      '/sbin/ip link set lo up && exec "$0" "$@"']
    assert said == "ranks in a network namespace of their own"
    assert isolation({}, "linux", 0, "/usr/bin/unshare", "/sbin/ip")[0][1:2] == ["--net"]
    for env, platform, unshare, why in (
            ({"COURSE_ISOLATE": "0"}, "linux", "/usr/bin/unshare", "COURSE_ISOLATE=0"),
            ({}, "darwin", "/usr/bin/unshare", "network namespaces are Linux's"),
            ({}, "linux", None, "needs unshare and ip")):
        prefix, said = isolation(env, platform, 1000, unshare, "/sbin/ip")
        assert prefix is None and why in said, said


def test_a_workshop_sets_the_threads_per_rank_for_the_class():
    assert threads_per_rank(64, 4, {"COURSE_THREADS": "2"}) == 2
    assert threads_per_rank(64, 4, {"COURSE_THREADS": " "}) == 16
    for bad in ("0", "two", "-1"):
        with pytest.raises(ClusterConfigError, match="COURSE_THREADS"):
            threads_per_rank(64, 4, {"COURSE_THREADS": bad})
