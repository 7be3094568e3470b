"""run_watched: output, exit status, listening addresses, and a bounded run ended as a whole."""

from __future__ import annotations

import sys
import textwrap

import psutil

from helpers.launch import listening_addresses, run_watched, torchrun_command

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


def test_listening_addresses_of_a_missing_process_is_empty():
    assert listening_addresses(2**22 + 12345) == set()


def test_torchrun_command_is_this_environments_torchrun():
    run = run_watched(torchrun_command() + ["--help"], timeout=60)
    assert run.returncode == 0 and "--nproc-per-node" in run.output.replace("_", "-")
