"""run_watched: output, exit status, listening addresses, and a bounded run ended as a whole."""

from __future__ import annotations

import socket
import subprocess
import sys
import tempfile
import textwrap

import psutil
import pytest

from helpers.jobs.launch import (
    free_port,
    listening_addresses,
    loopback_env,
    pinned,
    reports,
    run_many,
    run_watched,
    torchrun_command,
)

LISTENER = textwrap.dedent("""
    import socket, time
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    s.listen()
    print("listening", flush=True)
    time.sleep(1.0)
""")

STUCK = textwrap.dedent("""
    import subprocess, sys, time
    child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"],
                             start_new_session=True)
    print("child", child.pid, flush=True)
    time.sleep(60)
""")


def test_run_watched_records_output_status_and_loopback_listener():
    run = run_watched([sys.executable, "-c", LISTENER], timeout=30)
    assert run.returncode == 0 and not run.timed_out
    assert "listening" in run.output
    assert run.listening == {"127.0.0.1"}


def test_run_watched_reports_failure():
    run = run_watched([sys.executable, "-c", "import sys; print('boom'); sys.exit(3)"], timeout=30)
    assert run.returncode == 3 and "boom" in run.output and run.listening == set()


def test_a_run_past_its_timeout_is_ended_with_its_children():
    run = run_watched([sys.executable, "-c", STUCK], timeout=3)
    assert run.timed_out and run.returncode is None
    child = int(run.output.split("child")[1].split()[0])
    assert not psutil.pid_exists(child) or psutil.Process(child).status() == psutil.STATUS_ZOMBIE


def test_listening_addresses_are_psutils_and_a_bound_or_connected_socket_is_no_listener():
    """The /proc reader agrees with psutil, IPv4 and IPv6 (loopback addresses only: nothing
    here listens anywhere else)."""
    code = textwrap.dedent("""
        import socket, time
        held = [socket.create_server((host, 0), family=family) for host, family in
                (("127.0.0.1", socket.AF_INET), ("127.0.0.3", socket.AF_INET),
                 ("::1", socket.AF_INET6))]
        bound = socket.socket(); bound.bind(("127.0.0.2", 0))            # bound, not listening
        client = socket.create_connection(("127.0.0.1", held[0].getsockname()[1]))
        print("ready", flush=True)
        time.sleep(60)
    """)
    proc = subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE, text=True)
    try:
        assert proc.stdout.readline().strip() == "ready"
        from_psutil = {c.laddr.ip for c in psutil.Process(proc.pid).net_connections(kind="tcp")
                       if c.status == psutil.CONN_LISTEN}
        assert from_psutil == {"127.0.0.1", "127.0.0.3", "::1"}
        assert listening_addresses(proc.pid) == from_psutil
    finally:
        proc.kill()
        proc.wait()


@pytest.mark.skipif(sys.byteorder != "little", reason="the hex below is a little-endian kernel's")
@pytest.mark.parametrize(("hex_ip", "family", "text"), [
    ("0100007F", socket.AF_INET, "127.0.0.1"),
    ("00000000", socket.AF_INET, "0.0.0.0"),
    ("0A00020F", socket.AF_INET, "15.2.0.10"),
    ("00000000000000000000000000000000", socket.AF_INET6, "::"),
    ("00000000000000000000000001000000", socket.AF_INET6, "::1"),
    ("0000000000000000FFFF00000100007F", socket.AF_INET6, "::ffff:127.0.0.1"),
])
def test_addresses_are_read_as_the_kernel_writes_them(hex_ip, family, text):
    """Every address, the wildcards included, as /proc/net/tcp[6] spells it (32-bit words in
    the host's byte order): the loopback-only checks must see a wildcard listener as one."""
    from helpers.jobs.launch import _proc_address

    assert _proc_address(hex_ip, family) == text


def test_listening_addresses_of_a_missing_process_is_empty():
    assert listening_addresses(2**22 + 12345) == set()


def test_torchrun_command_is_this_environments_torchrun():
    run = run_watched(torchrun_command() + ["--help"], timeout=60)
    assert run.returncode == 0 and "--nproc-per-node" in run.output.replace("_", "-")


def test_run_many_runs_side_by_side_and_keeps_each_output():
    # each run says when it began and ended sleeping: side by side, each began before either
    # ended (a fact about the two runs, whatever the machine's load does to their speed)
    sleeper = ("import sys, time; began = time.time(); time.sleep(1.0); "
               "print('done', sys.argv[1], began, time.time())")
    runs = run_many([[sys.executable, "-c", sleeper, str(i)] for i in range(2)], timeout=30)
    assert [r.returncode for r in runs] == [0, 0]
    said = [r.output.split() for r in runs]
    assert [words[:2] for words in said] == [["done", "0"], ["done", "1"]], said
    began, ended = ([float(words[i]) for words in said] for i in (2, 3))
    assert max(began) < min(ended), f"the two runs did not overlap: {said}"


def test_run_many_ends_every_run_past_the_timeout():
    runs = run_many([[sys.executable, "-c", "import time; time.sleep(60)"],
                     [sys.executable, "-c", "print('quick')"]], timeout=2)
    assert runs[0].timed_out and runs[0].returncode is None
    assert not runs[1].timed_out and runs[1].returncode == 0


def test_reports_reads_tagged_json_lines_behind_a_prefix():
    text = ('noise\nREPORT {"rank": 0}\n[rank1]:REPORT {"rank": 1}\nREPORTER {"x": 1}\n'
            'REPORT {"rank": 2}REPORT {"rank": 3}\n\n')
    assert reports(text) == [{"rank": r} for r in range(4)]


def test_free_port_and_loopback_env():
    port = free_port()
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", port))  # it was free
    env = loopback_env({"PATH": "/bin"})
    assert env["PATH"] == "/bin" and env["OMP_NUM_THREADS"] == "1"
    assert env["GLOO_SOCKET_IFNAME"] == env["NCCL_SOCKET_IFNAME"] == "lo"


def test_pinned_runs_the_command_through_pinstore():
    assert pinned(["torchrun", "x.py"])[1:] == ["-m", "helpers.jobs.pinstore", "torchrun", "x.py"]


def test_a_torchrun_run_leaves_nothing_in_the_temporary_folder(tmp_path, monkeypatch):
    # torchrun makes a log folder (torchelastic_*) in the temporary folder and never removes it
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))
    run = run_watched(torchrun_command() + ["--standalone", "--nproc-per-node", "1",
                                            "--no-python", "sh", "-c", "echo $TMPDIR"],
                      env=loopback_env(), timeout=60)
    assert run.returncode == 0, run.output
    assert run.output.strip().splitlines()[-1].startswith(str(tmp_path / "course-run-"))
    assert list(tmp_path.iterdir()) == []


def test_run_many_gives_each_command_its_own_environment():
    show = "import os; print(os.environ['WHO'])"
    runs = run_many([[sys.executable, "-c", show]] * 2, env=[{"WHO": "a"}, {"WHO": "b"}])
    assert [r.output.strip() for r in runs] == ["a", "b"]
    with pytest.raises(ValueError, match="2 commands but 1 environments"):
        run_many([[sys.executable, "-c", show]] * 2, env=[{"WHO": "a"}])


def test_a_live_notebook_sees_the_job_run_and_the_line_is_wiped(monkeypatch, capsys):
    monkeypatch.delenv("IPP_NONINTERACTIVE", raising=False)
    run_many([[sys.executable, "-c", "import time; time.sleep(1.2)"]], timeout=30)
    out = capsys.readouterr().out
    assert "1 of 1 command(s) running" in out and out.endswith("\r" + " " * 40 + "\r")


def test_wait_ended_counts_a_killed_orphan_as_ended_and_a_running_one_as_alive():
    """A zombie has exited: wait_ended does not wait for init to collect it (which some
    containers' init does seconds late); a running process stays alive."""
    from helpers.cluster.watchdog import wait_ended

    orphaning = STUCK.replace("time.sleep(60)\n", "").rstrip() + "\n"  # it exits at once
    run = run_watched([sys.executable, "-c", orphaning], timeout=30)
    assert run.returncode == 0, run.output
    orphan = psutil.Process(int(run.output.split("child")[1].split()[0]))
    try:
        assert orphan.ppid() != psutil.Process().pid  # its parent exited: it is an orphan
        assert wait_ended([orphan], timeout=0) == ([], [orphan])
    finally:
        orphan.kill()
    assert wait_ended([orphan], timeout=60) == ([orphan], [])
