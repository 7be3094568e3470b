"""make install's choice of PyTorch build (helpers/machine/torch_build.py): each kind of
machine, the COURSE_TORCH override, and the fallback when PyTorch's CPU index cannot be
reached (the case on the machine the course is tested on). Indexes here are local servers on
127.0.0.1."""

from __future__ import annotations

import http.server
import socket
import threading

import pytest

from helpers.machine.torch_build import (
    BuildError,
    choose,
    in_range,
    pip_args,
    prefer_disk,
    venv_args,
)


@pytest.mark.parametrize("system, nvidia, override, source", [
    ("Linux", False, None, "cpu-index"),
    ("Linux", True, None, "default"),
    ("Linux", True, "cpu", "cpu-index"),
    ("Linux", False, "cuda", "default"),
    ("Linux", False, " CPU ", "cpu-index"),
    ("Linux", False, "", "cpu-index"),
    ("Darwin", False, None, "default"),
    ("Darwin", False, "cpu", "default"),
    ("Windows", True, None, "default"),
])
def test_the_build_for_each_kind_of_machine(system, nvidia, override, source):
    assert choose(system, nvidia, override).source == source


@pytest.mark.parametrize("system, override, says", [
    ("Linux", "gpu", "use cpu, cuda"), ("Darwin", "cuda", "no CUDA build for macOS")])
def test_an_impossible_override_is_refused_with_what_to_do(system, override, says):
    with pytest.raises(BuildError, match=says):
        choose(system, False, override)


class _Answers404(http.server.BaseHTTPRequestHandler):
    def do_GET(self):  # an index that answers, whatever it says
        self.send_error(404)

    def log_message(self, *args):
        pass


def test_a_reachable_cpu_index_is_added_to_pips_indexes():
    server = http.server.HTTPServer(("127.0.0.1", 0), _Answers404)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        index = f"http://127.0.0.1:{server.server_port}/whl/cpu"
        args, line = pip_args(choose("Linux", False, None), index=index, wait=30)
    finally:
        server.shutdown()
        server.server_close()
    assert args == ["--extra-index-url", index], args
    assert "the CPU build" in line and index in line, line


def test_an_unreachable_cpu_index_falls_back_to_the_default_build_and_says_so():
    silent = socket.socket()  # accepts connections (the backlog) and never answers
    silent.bind(("127.0.0.1", 0))
    silent.listen(1)
    refused = socket.socket()  # bound, not listening: connections are refused
    refused.bind(("127.0.0.1", 0))
    try:
        for port in (silent.getsockname()[1], refused.getsockname()[1]):
            index = f"http://127.0.0.1:{port}/whl/cpu"
            args, line = pip_args(choose("Linux", False, None), index=index, wait=0.5)
            assert args == [], args
            assert "did not answer" in line and "4.3 GB" in line, line
            with pytest.raises(BuildError, match="unset COURSE_TORCH"):
                pip_args(choose("Linux", False, "cpu"), index=index, wait=0.5, explicit=True)
    finally:
        silent.close()
        refused.close()


def test_a_cpu_build_on_disk_is_taken_where_the_cpu_index_did_not_answer():
    cpu, fell_back = choose("Linux", False, None), "PyTorch: ... installing pip's default build"
    asked = []

    def on_disk(found="torch==2.13.0+cpu"):
        asked.append(True)
        return found

    args, line = prefer_disk(cpu, [], fell_back, None, on_disk)
    assert args == ["torch==2.13.0+cpu"] and "on this machine's disk" in line, (args, line)
    # nothing on disk: PyPI's build, as pip_args said
    assert prefer_disk(cpu, [], fell_back, None, lambda: None) == ([], fell_back)
    asked.clear()
    # a torch in range in the venv is kept; the index answered; a GPU machine: disk not asked
    assert prefer_disk(cpu, [], fell_back, ("2.14.1", "/venv"), on_disk) == ([], fell_back)
    index = ["--extra-index-url", "https://download.pytorch.org/whl/cpu"]
    assert prefer_disk(cpu, index, "from the index", None, on_disk) == (index, "from the index")
    gpu = choose("Linux", True, None)
    assert prefer_disk(gpu, [], "PyPI's CUDA build", None, on_disk) == ([], "PyPI's CUDA build")
    assert not asked
    # a torch outside the range in the venv does not stop it
    assert prefer_disk(cpu, [], fell_back, ("2.11.0", "/venv"), on_disk)[0] == ["torch==2.13.0+cpu"]


@pytest.mark.parametrize("version, inside", [
    ("2.13.0", True), ("2.13.0+cpu", True), ("2.14.1+cu128", True), ("2.14.9", True),
    ("2.12.1", False), ("2.15.0", False), ("2.15.0.dev20260101+cu130", False), ("3.0.0", False),
    ("2.13.0rc1", True)])
def test_which_torch_is_in_the_courses_range(version, inside):
    assert in_range(version, "torch>=2.13,<2.15") is inside


def test_a_torch_in_range_is_kept_and_one_outside_is_not():
    args, line = venv_args(("2.14.1", "/opt/site/lib/python3.11/site-packages"))
    assert args == ["--system-site-packages"] and "keeping 2.14.1" in line and "TORCH=" in line
    args, line = venv_args(("2.11.0+cu126", "/opt/site"))
    assert args == [] and "outside" in line
    assert venv_args(None) == ([], "")


def test_the_range_must_have_both_ends():
    with pytest.raises(ValueError, match="expected torch>=A,<B"):
        in_range("2.13.0", "torch>=2.13")
    with pytest.raises(ValueError, match="not a release number"):
        in_range("latest")


def test_a_torch_in_another_venv_is_named_not_claimed():
    args, line = venv_args(("2.14.1", "/home/me/env/lib/python3.11/site-packages"), in_venv=True)
    assert args == [] and "VENV=" in line and "cannot see" in line
