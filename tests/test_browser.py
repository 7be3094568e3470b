"""The course as a learner meets it: JupyterLab started the way `make lab` starts it, driven
in a real Chromium (the distribution's package, through Playwright).

The server runs on a copy of the repository in a temporary directory, so that nothing the
browser does (autosave included) can touch the course's files. A screenshot of each notebook
goes to .screenshots/ (git-ignored): look at them.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import signal
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import psutil
import pytest
from system import need

ROOT = Path(__file__).resolve().parent.parent
SHOTS = ROOT / ".screenshots"
CHROMIUM = os.environ.get("COURSE_CHROMIUM") or shutil.which("chromium") or "/usr/bin/chromium"
NOTEBOOKS = sorted(p.name for p in (ROOT / "notebooks").glob("[0-9][0-9]_*.ipynb"))
# every lesson notebook with COURSE_BROWSER_ALL=1 (`make browser`, which .ci/run runs after
# `make test`); otherwise (`pytest tests`) 00 alone
RUN_ALL = NOTEBOOKS if os.environ.get("COURSE_BROWSER_ALL") == "1" else NOTEBOOKS[:1]

try:
    from playwright.sync_api import TimeoutError as PlaywrightTimeout
    from playwright.sync_api import sync_playwright
except ImportError:  # the test extra is not installed
    sync_playwright = None


def _free_port() -> int:
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture(scope="module")
def lab(tmp_path_factory):
    """JupyterLab with `make lab`'s arguments on a copy of the repository: (url, process)."""
    need(sync_playwright is not None, "Playwright is not installed (pip install -e '.[test]')")
    need(Path(CHROMIUM).is_file(), "no Chromium (Debian: apt-get install chromium)")
    copy = tmp_path_factory.mktemp("course") / "course"
    shutil.copytree(ROOT, copy, ignore=shutil.ignore_patterns(".venv", ".git", ".screenshots",
                                                                "__pycache__", "*.egg-info"))
    args = subprocess.run(["make", "-s", "--no-print-directory", "lab-args"], cwd=ROOT,
                          capture_output=True, text=True, check=True).stdout.split()
    token = os.urandom(8).hex()
    env = {k: v for k, v in os.environ.items() if k != "IPP_NONINTERACTIVE"}  # as a learner
    log = open(copy / "lab.log", "w")
    server = subprocess.Popen(
        [sys.executable, "-m", "jupyter", "lab", "--no-browser", f"--port={_free_port()}",
         f"--ServerApp.token={token}", "--LabApp.expose_app_in_browser=True",
         # its own workspace: the learner's open tabs are neither restored here nor changed
         f"--LabApp.workspaces_dir={copy.parent / 'workspaces'}", *args],
        cwd=copy, env=env, stdout=log, stderr=subprocess.STDOUT)
    try:
        deadline = time.monotonic() + 60
        while not (found := re.search(r"(http://127\.0\.0\.1:\d+/\S*)\?token=", (copy / "lab.log")
                                      .read_text())) and time.monotonic() < deadline:
            assert server.poll() is None, (copy / "lab.log").read_text()[-2000:]
            time.sleep(0.2)
        assert found, f"JupyterLab printed no URL in 60 s:\n{(copy / 'lab.log').read_text()}"
        yield found.group(1), token, server
    finally:
        server.send_signal(signal.SIGINT)  # as Ctrl-C: the server shuts its kernels down
        server.send_signal(signal.SIGINT)
        try:
            server.wait(30)
        except subprocess.TimeoutExpired:
            server.kill()
            server.wait()
        log.close()


@pytest.fixture(scope="module")
def browser(lab):
    with sync_playwright() as pw:
        chromium = pw.chromium.launch(executable_path=CHROMIUM, args=["--no-sandbox"])
        yield chromium
        chromium.close()


def open_notebook(browser, lab, name: str):
    """A new page with notebook `name` open and its kernel idle."""
    url, token, _ = lab
    base = url.split("/lab")[0]
    page = browser.new_page(viewport={"width": 1400, "height": 900}, device_scale_factor=2)
    page.goto(f"{base}/lab/tree/notebooks/{name}?reset&token={token}")  # no tabs of earlier tests
    page.wait_for_function("() => window.jupyterapp?.shell.currentWidget?.context?.path === "
                           f"'notebooks/{name}'", timeout=60_000)
    wait_for(page, "app.shell.currentWidget.sessionContext.session?.kernel?.status === 'idle'", 60)
    with urllib.request.urlopen(f"{base}/api/sessions?token={token}") as r:
        paths = sorted(s["path"] for s in json.load(r))
    assert paths == [f"notebooks/{name}"], f"kernels running besides this notebook's: {paths}"
    return page


def close_notebook(page) -> None:
    """Shut the notebook's kernel down, if it still runs, and close the page."""
    page.evaluate("async () => { const s = window.jupyterapp.shell.currentWidget?.sessionContext;"
                  " if (s?.session?.kernel) await s.shutdown(); }")
    page.close()


def js(page, expression: str):
    """Evaluate an expression in the page, with `app` bound to JupyterLab."""
    return page.evaluate(f"() => {{ const app = window.jupyterapp; return {expression}; }}")


def wait_for(page, expression: str, timeout: float) -> float:
    """Wait until the expression is true in the page; the seconds it took."""
    start = time.monotonic()
    while not js(page, expression):
        assert time.monotonic() - start < timeout, f"not true after {timeout} s: {expression}"
        time.sleep(0.2)
    return time.monotonic() - start


MODEL = "app.shell.currentWidget.content.model"
CELLS = f"Array.from({MODEL}.cells).filter(c => c.type === 'code')"
OUTPUTS = (f"{CELLS}.map(c => Array.from({{length: c.outputs.length}}, (_, i) => "
           "c.outputs.get(i).toJSON()))")


def menu(page, *path: str) -> None:
    """Click through JupyterLab's menu bar: menu(page, 'Run', 'Run All Cells')."""
    page.locator(".lm-MenuBar-itemLabel", has_text=path[0]).first.click()
    for item in path[1:]:
        page.locator(".lm-Menu-itemLabel", has_text=item).locator("visible=true").first.click()


def run_all(page, timeout: float) -> list[list[dict]]:
    """Run All from the menu; wait until every code cell ran, or one failed (JupyterLab then
    runs none of the cells after it); the outputs of each cell."""
    menu(page, "Run", "Run All Cells")
    return ran_all(page, timeout)


FAILED = (f"{CELLS}.some(c => Array.from({{length: c.outputs.length}}, (_, i) => "
          "c.outputs.get(i).type).includes('error'))")
# every code cell ran, or one failed (JupyterLab then runs none of the cells after it)
RAN_ALL = (f"({CELLS}.every(c => c.executionCount !== null) || {FAILED}) && "
           "app.shell.currentWidget.sessionContext.session.kernel.status === 'idle'")


def ran_all(page, timeout: float) -> list[list[dict]]:
    """After Run All: wait until every code cell ran, or one failed; the outputs of each."""
    try:
        wait_for(page, RAN_ALL, timeout)
    except AssertionError as e:  # say where it stands, and keep a picture of it
        SHOTS.mkdir(exist_ok=True)
        page.screenshot(path=SHOTS / "run-all-timed-out.png")
        state = js(page, f"({{notRun: {CELLS}.map((c, i) => c.executionCount === null ? i : -1)"
                         ".filter(i => i >= 0), kernel: app.shell.currentWidget.sessionContext"
                         ".session?.kernel?.status, dialogs: Array.from(document.querySelectorAll("
                         "'.jp-Dialog')).map(d => d.innerText)})")
        raise AssertionError(f"Run All did not end: code cells not run {state['notRun']}, kernel "
                             f"{state['kernel']}, dialogs {state['dialogs']}") from e
    return js(page, OUTPUTS)


def text_of(output: dict) -> str:
    text = (output.get("text") or output.get("data", {}).get("text/plain", "")
            or output.get("evalue", ""))
    return "".join(text) if isinstance(text, list) else text


def test_make_lab_opens_notebook_00_at_the_repository_root_without_popups(browser, lab):
    url, token, _ = lab
    assert url.endswith("/lab/tree/notebooks/00_cluster.ipynb"), url
    with urllib.request.urlopen(f"{url.split('/lab')[0]}/api/contents/?token={token}") as r:
        names = {item["name"] for item in json.load(r)["content"]}
    assert {"README.md", "helpers", "notebooks"} <= names, names
    page = browser.new_page(viewport={"width": 1400, "height": 900})
    page.goto(f"{url}?token={token}")
    page.wait_for_selector(".jp-Notebook .jp-Cell", timeout=60_000)
    time.sleep(3)  # a pop-up comes a moment after the page
    assert page.locator("text=official Jupyter news").count() == 0, "the news pop-up is shown"
    page.close()


@pytest.mark.parametrize("name", RUN_ALL)
def test_run_all_in_the_browser(browser, lab, name):
    page = open_notebook(browser, lab, name)
    try:
        outputs = run_all(page, timeout=600)
        errors = [(i, text_of(o)[:300] or o.get("evalue")) for i, cell in enumerate(outputs)
                  for o in cell if o["output_type"] == "error"]
        assert not errors, f"{name}: error outputs in code cells {errors}"
        streams = "".join(text_of(o) for cell in outputs for o in cell)
        assert "[stdout:0]" in streams or name >= "07", f"{name}: no output labelled by rank"
        figures = sum("image/png" in o.get("data", {}) for cell in outputs for o in cell)
        shown = page.locator(".jp-OutputArea-output img").count()
        assert shown == figures, f"{name}: {figures} figures in the outputs, {shown} shown"
        SHOTS.mkdir(exist_ok=True)
        page.screenshot(path=SHOTS / f"{name.removesuffix('.ipynb')}.png")
        if name.startswith("00"):
            check_stop_button_and_shutdown(page, lab)
    finally:  # pass or fail, its kernel and cluster must not weigh on the next notebook
        close_notebook(page)


def add_cell(page, source: str) -> None:
    """Append a code cell with source at the end of the notebook, and run it."""
    js(page, f"(() => {{ const m = {MODEL}; "
             f"m.sharedModel.insertCell(m.cells.length, {{cell_type: 'code', "
             f"source: {json.dumps(source)}}}); "
             "const nb = app.shell.currentWidget.content; "
             "nb.activeCellIndex = m.cells.length - 1; return true; })()")
    js(page, "(app.commands.execute('notebook:run-cell'), true)")  # do not await the run


def run_cell(page, source: str, timeout: float = 30) -> None:
    """Append a code cell, run it, and wait until the kernel is idle again."""
    add_cell(page, source)
    wait_for(page, f"{CELLS}.at(-1).executionCount !== null && "
                   "app.shell.currentWidget.sessionContext.session.kernel.status === 'idle'",
             timeout)


def check_stop_button_and_shutdown(page, lab) -> None:
    """00 after Run All (which ends by stopping its cluster): with a cluster started again,
    the toolbar's stop button ends a stuck %%px cell within seconds, the next %%px cell
    answers, and shutting the kernel down leaves no engine or controller."""
    add_cell(page, "cluster = start_cluster(n=4)")
    wait_for(page, f"{CELLS}.at(-1).executionCount !== null && "
                   "app.shell.currentWidget.sessionContext.session.kernel.status === 'idle'", 60)
    add_cell(page, "%%px\nimport time\ntime.sleep(600)")
    wait_for(page, "app.shell.currentWidget.sessionContext.session.kernel.status === 'busy'", 10)
    time.sleep(2)
    start = time.monotonic()
    page.locator("jp-button[data-command='notebook:interrupt-kernel'], "
                 "button[data-command='notebook:interrupt-kernel']").first.click()
    wait_for(page, "app.shell.currentWidget.sessionContext.session.kernel.status === 'idle'", 20)
    print(f"the stop button ended the cell in {time.monotonic() - start:.1f} s")
    said = "".join(text_of(o) for o in js(page, OUTPUTS)[-1])
    assert "rank(s) [0, 1, 2, 3] stopped" in said, f"the stopped cell says: {said!r}"
    add_cell(page, "%%px\nanswered = rank\nprint('answering', rank)")
    wait_for(page, f"{CELLS}.at(-1).executionCount !== null && "
                   "app.shell.currentWidget.sessionContext.session.kernel.status === 'idle'", 30)
    deadline = time.monotonic() + 10  # live output may come a moment after the cell ends
    while (missing := [r for r in range(4) if f"answering {r}" not in
                       "".join(text_of(o) for o in js(page, OUTPUTS)[-1])]) and \
            time.monotonic() < deadline:
        time.sleep(0.2)
    live = js(page, OUTPUTS)[-1]
    # every rank ran the cell: asked of the kernel, which holds each rank's own answer (a rank
    # still busy with the stopped cell once dropped it, and its live output was missing)
    run_cell(page, "print('answered', sorted(cluster.view['answered']))")
    assert "answered [0, 1, 2, 3]" in "".join(text_of(o) for o in js(page, OUTPUTS)[-1]), (
        f"not every rank ran the cell after the stop: {js(page, OUTPUTS)[-1]}")
    assert not missing, f"live output of ranks {missing} missing after the stop button: {live}"

    _, _, server = lab
    kernels = [p for p in psutil.Process(server.pid).children()
               if "ipykernel" in " ".join(p.cmdline())]
    assert len(kernels) == 1, f"{len(kernels)} kernels run, expected this notebook's alone"
    cluster = [q for k in kernels for q in k.children(recursive=True)]
    assert cluster, "the kernel has no engines or controller"
    menu(page, "Kernel", "Shut Down Kernel")
    try:  # JupyterLab asks for confirmation
        page.locator(".jp-Dialog .jp-mod-accept").click(timeout=5_000)
    except PlaywrightTimeout:
        pass
    _, alive = psutil.wait_procs(cluster + kernels, timeout=10)
    alive = [p for p in alive if p.is_running() and p.status() != psutil.STATUS_ZOMBIE]
    assert not alive, (f"10 s after shutting the kernel down, {len(alive)} of it and its "
                       f"{len(cluster)} engine, controller and helper processes are alive: "
                       f"{[' '.join(p.cmdline()[:3]) for p in alive]}")
