"""A workshop as a class meets it: `make hub` (a real JupyterHub, its proxy from npm, PAM
logins) serving two local accounts at once, each driving their own JupyterLab in a real
Chromium.

1. Both learners log in and run notebooks 00 and 02 top to bottom at the same time, then one
   of them runs them again alone: the times of each are printed.
2. With a cluster of the second learner's running, the first tries every way to reach it:
   its ranks' TCP ports, its kernel (a message not signed with the kernel's key), its
   JupyterLab (directly and through the hub), its files and sockets, its processes (signals,
   /proc, namespaces, py-spy). Each must fail. The same probe is then run against a cluster
   started with COURSE_ISOLATE=0, to show that it can reach ranks that share the machine's
   network.
3. Both log out; nothing of theirs is left running.

Needs root (accounts, a hub), npm, Chromium and Playwright: `make hub-test` (CI runs it).
The accounts are made for the test and removed after it.
"""

from __future__ import annotations

import contextlib
import json
import os
import pwd
import re
import secrets
import shutil
import signal
import socket
import ssl
import stat
import subprocess
import tempfile
import time
import urllib.parse
import urllib.request
from pathlib import Path

import psutil
import pytest
from system import listening, listening_outside_loopback, need, socket_inodes
from test_browser import CHROMIUM, OUTPUTS, RAN_ALL, SHOTS, js, menu, sync_playwright, text_of

ROOT = Path(__file__).resolve().parent.parent
NOTEBOOKS = ("00_cluster.ipynb", "02_collectives.ipynb")
RANKS_EACH = 2  # two learners of 2 ranks each: as many ranks as a 4-rank learner alone
RUN_TIMEOUT = 900  # seconds for one notebook while the other learner runs one too

PROBE = r"""
import http.client, json, os, socket, subprocess, sys
import zmq
from jupyter_client.session import Session

target = json.loads(sys.argv[1])
found = []  # [what, outcome, reached?]

def attempt(what, action):
    try:
        outcome = action()
        found.append([what, outcome, True])
    except OSError as e:  # an HTTP refusal says its status
        found.append([what, type(e).__name__ + (f" ({e})" if str(e).startswith("HTTP") else ""),
                      False])

def connect(port):
    with socket.create_connection(("127.0.0.1", port), timeout=2):
        return "connected"

for port in target["rank_ports"]:
    attempt(f"a rank's TCP port {port}", lambda: connect(port))
for path in target["unix"]:
    def unix(path=path):
        with socket.socket(socket.AF_UNIX) as s:
            s.connect(path)
            return "connected"
    attempt(f"Unix socket {path}", unix)
for path in target["folders"]:
    attempt(f"list {path}", lambda: os.listdir(path))
for path in target["files"]:
    attempt(f"read {path}", lambda: open(path, "rb").read(1))
for pid in target["pids"]:
    attempt(f"signal pid {pid}", lambda: os.kill(pid, 0))
    attempt(f"read the environment of pid {pid}",
            lambda: open(f"/proc/{pid}/environ", "rb").read(1))
    def setns(pid=pid):
        with open(f"/proc/{pid}/ns/net") as f:
            os.setns(f.fileno(), os.CLONE_NEWNET)
        return "entered its network namespace"
    attempt(f"enter pid {pid}'s network namespace", setns)
for pid in target["engines"]:
    def spy(pid=pid):
        done = subprocess.run([os.path.join(target["venv"], "py-spy"), "dump", "--pid", str(pid)],
                              capture_output=True, text=True, timeout=60)
        if done.returncode:
            raise PermissionError(done.stderr.strip()[-200:])
        return "read its stack"
    attempt(f"py-spy dump of engine {pid}", spy)
def lab():
    # no redirect followed: a redirect to the hub's login page is a refusal
    conn = http.client.HTTPConnection("127.0.0.1", target["lab_port"], timeout=10)
    conn.request("GET", f"{target['lab_path']}api/contents/")
    status = conn.getresponse().status
    conn.close()
    if status != 200:
        raise PermissionError(f"HTTP {status}")
    return f"HTTP {status}"
attempt("its JupyterLab's API, directly", lab)
def kernel():
    # an execute_request signed with a key of our own: the kernel must drop it
    session = Session(key=secrets_key, username="intruder")
    sock = zmq.Context.instance().socket(zmq.DEALER)
    sock.linger = 30_000  # close() waits until the message has gone (at most 30 s)
    sock.connect(f"tcp://127.0.0.1:{target['shell_port']}")
    session.send(sock, "execute_request", {"code": f"open({target['marker']!r}, 'w')",
                 "silent": False, "store_history": False, "user_expressions": {},
                 "allow_stdin": False, "stop_on_error": True})
    sock.close()
    return "sent"
secrets_key = os.urandom(16).hex().encode()
attempt("an execute_request to its kernel, signed with another key", kernel)
print(json.dumps(found))
"""


def _run(*args: str, **kw) -> subprocess.CompletedProcess:
    return subprocess.run(args, check=True, capture_output=True, text=True, **kw)


def _free_ports(count: int = 3) -> int:
    """A port p such that p .. p+count-1 are free on loopback (the hub, its API, the proxy's)."""
    for _ in range(100):
        base = secrets.randbelow(20000) + 20000
        sockets = []
        try:
            for port in range(base, base + count):
                s = socket.socket()
                sockets.append(s)
                s.bind(("127.0.0.1", port))
            return base
        except OSError:
            continue
        finally:
            for s in sockets:
                s.close()
    raise AssertionError("no three free ports in a row on loopback")


def _processes(uid: int) -> list[psutil.Process]:
    return [p for p in psutil.process_iter(["uids"]) if p.info["uids"] and
            p.info["uids"].real == uid]


@pytest.fixture(scope="module")
def learners():
    """Two local accounts made for the test, with passwords: [(name, password, uid)]."""
    if os.environ.get("COURSE_HUB_TEST") != "1":
        pytest.skip("the workshop test runs with make hub-test (root, npm, Chromium)")
    need(os.geteuid() == 0 and shutil.which("useradd") and shutil.which("setpriv"),
         "the workshop test makes accounts: it needs root, useradd and setpriv")
    need(shutil.which("npm"), "no npm (Debian: apt-get install npm)")
    need(sync_playwright is not None, "Playwright is not installed (pip install -e '.[test]')")
    need(Path(CHROMIUM).is_file(), "no Chromium (Debian: apt-get install chromium)")
    tag = secrets.token_hex(2)
    made = []
    try:
        for who in ("ada", "bob"):
            name, password = f"course-{tag}-{who}", secrets.token_urlsafe(12)
            _run("useradd", "--create-home", "--shell", "/bin/bash", name)
            made.append(name)
            _run("chpasswd", input=f"{name}:{password}\n")
            made[-1] = (name, password, pwd.getpwnam(name).pw_uid)
        yield made
    finally:
        for entry in made:
            name, uid = (entry, None) if isinstance(entry, str) else (entry[0], entry[2])
            for p in _processes(uid) if uid is not None else []:  # left by a failed test
                p.kill()
            for left in [p for d in ("/tmp", "/dev/shm") for p in Path(d).iterdir()
                         if uid is not None and p.lstat().st_uid == uid]:
                shutil.rmtree(left) if left.is_dir() else left.unlink()
            subprocess.run(["userdel", "--remove", name], capture_output=True)


@pytest.fixture(scope="module")
def prefix(learners):
    """The hub's environment, installed by `make hub-install` (HUB_PREFIX=: one to reuse)."""
    prefix = os.environ.get("HUB_PREFIX")
    made = prefix is None
    if made:
        prefix = tempfile.mkdtemp(prefix="course-hub-")
        os.chmod(prefix, 0o755)
    try:
        start = time.monotonic()
        subprocess.run(["make", "-s", "hub-install", f"HUB_PREFIX={prefix}"], cwd=ROOT,
                       check=True, capture_output=True)
        print(f"\nhub environment installed in {time.monotonic() - start:.0f} s")
        yield Path(prefix)
    finally:
        if made:
            shutil.rmtree(prefix, ignore_errors=True)


@contextlib.contextmanager
def running_hub(prefix: Path, learners, log_path: Path, *extra: str, scheme: str = "http",
                context: ssl.SSLContext | None = None):
    """`make hub` for the learners, until the block ends: (base URL, seconds it took to
    answer, the pid of make, whose children are the hub and its proxy)."""
    # the hub's list of users from an earlier run, whose accounts are gone: a fresh one
    (prefix / "state" / "jupyterhub.sqlite").unlink(missing_ok=True)
    port = _free_ports()
    log = open(log_path, "w")
    start = time.monotonic()
    make = subprocess.Popen(
        ["make", "-s", "hub", f"HUB_PREFIX={prefix}", f"HUB_PORT={port}",
         f"LEARNERS={' '.join(n for n, _, _ in learners)}", f"RANKS_EACH={RANKS_EACH}", *extra],
        cwd=ROOT, stdout=log, stderr=subprocess.STDOUT)
    base = f"{scheme}://127.0.0.1:{port}"
    try:
        while True:
            assert make.poll() is None, log_path.read_text()[-3000:]
            try:
                with urllib.request.urlopen(f"{base}/hub/health", timeout=5,
                                            context=context) as r:
                    if r.status == 200:
                        break
            except OSError:
                pass
            assert time.monotonic() - start < 180, log_path.read_text()[-3000:]
            time.sleep(0.2)
        yield base, time.monotonic() - start, make.pid
    finally:
        pid_file = prefix / "state" / "jupyterhub.pid"
        if pid_file.exists():  # as Ctrl-C: the hub stops every learner's JupyterLab
            os.kill(int(pid_file.read_text()), signal.SIGINT)
        try:
            make.wait(60)
        except subprocess.TimeoutExpired:
            for p in psutil.Process(make.pid).children(recursive=True):
                p.kill()
            make.kill()
            make.wait()
        log.close()


@pytest.fixture
def hub(prefix, learners, tmp_path):
    """The hub of the two learners, as a browser reaches it: (base URL, seconds it took to
    answer, its log, the pid of make)."""
    log_path = tmp_path / "hub.log"
    with running_hub(prefix, learners, log_path,
                     "LAB_ARGS_EACH=--LabApp.expose_app_in_browser=True") as (base, took, pid):
        yield base, took, log_path, pid


def log_in(browser, base: str, name: str, password: str):
    """A browser of the learner's own (its own cookies), logged in through the hub's form:
    the page, at their JupyterLab."""
    context = browser.new_context(viewport={"width": 1400, "height": 900})
    page = context.new_page()
    page.goto(f"{base}/hub/login")
    page.fill("#username_input", name)
    page.fill("#password_input", password)
    page.click("#login_submit")
    page.wait_for_url(re.compile(f"/user/{name}/lab"), timeout=180_000)
    return page


def open_notebook(page, base: str, name: str, notebook: str) -> None:
    page.goto(f"{base}/user/{name}/lab/tree/notebooks/{notebook}?reset")
    page.wait_for_function("() => window.jupyterapp?.shell.currentWidget?.context?.path === "
                           f"'notebooks/{notebook}'", timeout=120_000)
    deadline = time.monotonic() + 120
    while js(page, "app.shell.currentWidget.sessionContext.session?.kernel?.status") != "idle":
        assert time.monotonic() < deadline, f"{name}: the kernel of {notebook} never got idle"
        time.sleep(0.2)


def run_together(pages: dict[str, object], notebook: str) -> dict[str, tuple[float, float]]:
    """Run All in every page at once; each one's (start, end), monotonic seconds."""
    started = {}
    for name, page in pages.items():
        menu(page, "Run", "Run All Cells")
        started[name] = time.monotonic()
    ended = {}
    while len(ended) < len(pages):
        for name, page in pages.items():
            if name not in ended and js(page, RAN_ALL):
                ended[name] = time.monotonic()
        assert time.monotonic() - min(started.values()) < RUN_TIMEOUT, (
            f"{notebook}: not finished after {RUN_TIMEOUT} s by {set(pages) - set(ended)}")
        time.sleep(0.2)
    for name, page in pages.items():
        outputs = js(page, OUTPUTS)
        errors = [text_of(o)[:300] for cell in outputs for o in cell
                  if o["output_type"] == "error"]
        SHOTS.mkdir(exist_ok=True)
        page.screenshot(path=SHOTS / f"hub-{name.rsplit('-', 1)[1]}-{notebook[:2]}.png")
        assert not errors, f"{name}, {notebook}: errors {errors}"
        streams = "".join(text_of(o) for cell in outputs for o in cell)
        assert "[stdout:0]" in streams, f"{name}, {notebook}: no output labelled by rank"
    return {name: (started[name], ended[name]) for name in pages}


def execute(page, code: str) -> None:
    """Run code in the learner's kernel, through their own JupyterLab (as a cell would)."""
    status = page.evaluate(
        "async (code) => { const k = window.jupyterapp.shell.currentWidget.sessionContext"
        ".session.kernel; const reply = await k.requestExecute({code}).done;"
        " return reply.content.status + ' ' + (reply.content.evalue || ''); }", code)
    assert status.startswith("ok"), status


def targets(uid: int, marker: str) -> dict:
    """Everything of one learner's that another could try to reach, found as root."""
    procs = _processes(uid)
    pids = [p.pid for p in procs]
    # the cluster's processes (fork server, engines) carry its folder in their environment
    engines = [p.pid for p in procs if "COURSE_CLUSTER_DIR" in _environ(p.pid)]
    folders = sorted({_environ(pid)["COURSE_CLUSTER_DIR"] for pid in engines})
    rank_ports = sorted({port for _, _, port in listening(engines)})
    kernel = next(p for p in procs if "ipykernel_launcher" in " ".join(p.cmdline()))
    connection = kernel.cmdline()[kernel.cmdline().index("-f") + 1]
    lab = next(p for p in procs if "jupyterhub-singleuser" in " ".join(p.cmdline()))
    lab_env = _environ(lab.pid)
    unix = sorted({path for pid in pids for path in _unix_paths(pid)})
    home = Path(pwd.getpwuid(uid).pw_dir) / "distributed-course"
    return {"pids": pids, "engines": engines, "rank_ports": rank_ports, "unix": unix,
            "folders": [str(home), *folders],
            "files": [str(home / "README.md"), connection],
            "lab_port": urllib.parse.urlsplit(lab_env["JUPYTERHUB_SERVICE_URL"]).port,
            "lab_path": lab_env["JUPYTERHUB_SERVICE_PREFIX"],
            "shell_port": json.loads(Path(connection).read_text())["shell_port"],
            "connection": connection, "marker": marker,
            "venv": str(Path(lab.cmdline()[0]).parent)}


def _print_memory(uid: int) -> None:
    """What one learner's processes hold (proportional set sizes, as make check CLASS= counts)."""
    kinds: dict[str, list[int]] = {}
    for p in _processes(uid):
        line = " ".join(p.cmdline())
        kind = ("JupyterLab" if "jupyterhub-singleuser" in line else
                "kernel" if "ipykernel_launcher" in line else
                "cluster" if "COURSE_CLUSTER_DIR" in _environ(p.pid) else "other")
        try:
            kinds.setdefault(kind, []).append(p.memory_full_info().pss)
        except psutil.Error:
            pass
    total = sum(sum(v) for v in kinds.values())
    print(f"one learner, 2 notebooks open and a {RANKS_EACH}-rank cluster: {total / 2**20:.0f} MiB"
          " (" + ", ".join(f"{k} {len(v)}: {sum(v) / 2**20:.0f} MiB" for k, v in kinds.items())
          + ")")


def _environ(pid: int) -> dict[str, str]:
    try:
        raw = Path(f"/proc/{pid}/environ").read_bytes()
    except OSError:
        return {}
    return dict(item.split("=", 1) for item in raw.decode(errors="replace").split("\0")
                if "=" in item)


def _unix_paths(pid: int) -> list[str]:
    """The paths of the Unix sockets a process holds (abstract ones as @name)."""
    held = socket_inodes(pid)
    try:
        lines = Path(f"/proc/{pid}/net/unix").read_text().splitlines()[1:]
    except OSError:  # ended meanwhile
        return []
    return [f[7] for f in (line.split() for line in lines) if len(f) > 7 and f[6] in held]


def probe(intruder: str, target: dict) -> list[list]:
    """As the intruding learner's account: every attempt on the target's things, each
    [what, outcome, reached]."""
    python = str(Path(target["venv"]) / "python")  # the hub's environment
    done = subprocess.run(
        ["setpriv", f"--reuid={intruder}", f"--regid={intruder}", "--init-groups", python,
         "-c", PROBE, json.dumps(target)], capture_output=True, text=True, timeout=300,
        cwd="/")
    assert done.returncode == 0, done.stderr[-3000:]
    return json.loads(done.stdout)


def kernel_still_its_own(target: dict) -> None:
    """The kernel answers a request signed with its own key (so it has read the intruder's
    one before), and the intruder's code did not run."""
    from jupyter_client import BlockingKernelClient

    client = BlockingKernelClient(connection_file=target["connection"])
    client.load_connection_file()
    client.start_channels()
    try:
        reply = client.execute_interactive("1 + 1", timeout=120, output_hook=lambda msg: None)
        assert reply["content"]["status"] == "ok", reply
    finally:
        client.stop_channels()
    assert not Path(target["marker"]).exists(), "the intruder's code ran in the other's kernel"


def test_two_learners_at_once_kept_apart(hub, learners):
    base, hub_start, log_path, _ = hub
    (ada, ada_pw, ada_uid), (bob, bob_pw, bob_uid) = learners
    print(f"hub answered {hub_start:.1f} s after make hub started it")
    with sync_playwright() as pw:
        browser = pw.chromium.launch(executable_path=CHROMIUM, args=["--no-sandbox"])
        try:
            start = time.monotonic()
            pages = {ada: log_in(browser, base, ada, ada_pw),
                     bob: log_in(browser, base, bob, bob_pw)}
            print(f"both logged in, JupyterLab started: {time.monotonic() - start:.1f} s")
            for name in pages:
                course = Path(pwd.getpwnam(name).pw_dir) / "distributed-course"
                assert (course / "notebooks" / NOTEBOOKS[0]).is_file(), f"{name}: no course"
                assert (course / "helpers" / "timing.py").is_file(), f"{name}: no helpers/"
                assert stat.S_IMODE(course.stat().st_mode) == 0o700, f"{name}: not private"

            # 1. together, then ada alone
            together = {}
            for notebook in NOTEBOOKS:
                for name, page in pages.items():
                    open_notebook(page, base, name, notebook)
                together[notebook] = run_together(pages, notebook)
                (a0, a1), (b0, b1) = together[notebook][ada], together[notebook][bob]
                assert a0 < b1 and b0 < a1, f"{notebook}: the two runs did not overlap"
            alone = {}
            for notebook in NOTEBOOKS:
                open_notebook(pages[ada], base, ada, notebook)
                alone[notebook] = run_together({ada: pages[ada]}, notebook)[ada]
            for notebook in NOTEBOOKS:
                times = {n: e - s for n, (s, e) in together[notebook].items()}
                print(f"{notebook}: together {times[ada]:.0f} s and {times[bob]:.0f} s; "
                      f"alone {alone[notebook][1] - alone[notebook][0]:.0f} s "
                      f"({RANKS_EACH} ranks each)")

            hub_tree = psutil.Process(hub[3]).children(recursive=True)
            served = [p.pid for p in hub_tree] + [p.pid for uid in (ada_uid, bob_uid)
                                                  for p in _processes(uid)]
            assert not listening_outside_loopback(served), listening_outside_loopback(served)

            # 2. ada tries to reach a cluster of bob's, isolated and then not
            results = {}
            for isolate in ("1", "0"):
                marker = f"/tmp/course-hub-probe-{secrets.token_hex(4)}"
                execute(pages[bob], f"import os; os.environ['COURSE_ISOLATE'] = '{isolate}'\n"
                                    "from helpers import start_cluster\n"
                                    "probed = start_cluster()")
                target = targets(bob_uid, marker)
                if isolate == "1":
                    _print_memory(bob_uid)
                assert target["engines"] and target["rank_ports"], target
                found = probe(ada, target)
                kernel_still_its_own(target)
                results[isolate] = found
                execute(pages[bob], "probed.stop()")
            reached = [f for f in results["1"] if f[2] and not f[0].startswith("an execute")]
            assert not reached, f"{ada} reached {bob}'s things: {reached}"
            blind = [f for f in results["0"] if f[2] and "TCP port" in f[0]]
            assert blind, f"with COURSE_ISOLATE=0 the probe reached no rank: {results['0']}"
            for isolate, found in results.items():
                kinds = {}
                for what, outcome, _got in found:
                    kind = re.sub(r"\d+|/\S+", "N", what)
                    kinds.setdefault(kind, []).append(outcome)
                print(f"probe, isolation {'on' if isolate == '1' else 'off (COURSE_ISOLATE=0)'}:")
                for kind, outcomes in kinds.items():
                    print(f"  {kind}: {len(outcomes)} tried; "
                          + ", ".join(f"{o} x{outcomes.count(o)}" for o in sorted(set(outcomes))))
            through_hub = pages[ada].request.get(f"{base}/user/{bob}/api/contents/",
                                                 max_redirects=0)
            assert through_hub.status in (302, 403, 404), (
                f"{ada} read {bob}'s files through the hub: HTTP {through_hub.status}")
            print(f"  {bob}'s files through the hub, as {ada}: HTTP {through_hub.status}")

            # 3. a cluster left running, then both log out
            execute(pages[bob], "from helpers import start_cluster\nleft = start_cluster()")
            for page in pages.values():
                menu(page, "File", "Log Out")
            deadline = time.monotonic() + 120
            while left := _processes(ada_uid) + _processes(bob_uid):
                assert time.monotonic() < deadline, (
                    "still running 120 s after logging out: "
                    + "; ".join(f"{p.pid} {' '.join(p.cmdline())[:80]}" for p in left))
                time.sleep(0.5)
        finally:
            browser.close()
    files = [str(p) for d in ("/tmp", "/dev/shm") for p in Path(d).iterdir()
             if p.lstat().st_uid in (ada_uid, bob_uid)]
    assert not files, f"files the learners' processes left: {files}"
    # the intruder's messages reached the kernels and were refused there (each logs one
    # traceback, of jupyter_client's ValueError "Invalid Signature"); nothing else went wrong
    log = log_path.read_text()
    refused = log.count("ValueError: Invalid Signature")
    assert refused == 2, f"{refused} of the 2 intruding messages logged as refused:\n{log[-3000:]}"
    assert log.count("Traceback") == refused, log[-3000:]


def test_the_hub_speaks_https_with_the_instructors_certificate(prefix, learners, tmp_path):
    """HUB_SSL_CERT and HUB_SSL_KEY: the learners' browsers reach the hub over TLS, checked
    against the certificate, and plain HTTP gets no page."""
    need(shutil.which("openssl"), "no openssl (Debian: apt-get install openssl)")
    cert, key = tmp_path / "hub.pem", tmp_path / "hub.key"
    _run("openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "1",
         "-subj", "/CN=127.0.0.1", "-addext", "subjectAltName=IP:127.0.0.1",
         "-keyout", str(key), "-out", str(cert))
    context = ssl.create_default_context(cafile=str(cert))
    with running_hub(prefix, learners, tmp_path / "hub.log", f"HUB_SSL_CERT={cert}",
                     f"HUB_SSL_KEY={key}", scheme="https", context=context) as (base, _, _):
        with urllib.request.urlopen(f"{base}/hub/login", timeout=30, context=context) as r:
            assert r.status == 200 and b"password" in r.read().lower()
        with pytest.raises(OSError):  # the same port, without TLS
            urllib.request.urlopen(base.replace("https:", "http:") + "/hub/login", timeout=30)
    assert "the hub speaks https" in (tmp_path / "hub.log").read_text()
