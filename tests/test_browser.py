"""Lab 00 in a real browser: what a learner sees after Run > Run All Cells.

Starts JupyterLab on a free local port (random token, a temp copy of
``labs/00_start_here.ipynb``), drives Chromium with Playwright, runs every cell from the
menu and checks the page: every code cell ran, no traceback, the plots are images, and a
practice widget answers a wrong pick and a right pick with the feedback of
``nanlab.course.quiz``. Saves a screenshot (a plot beside a widget) for the README.

Needs Debian's chromium (``apt-get install chromium``) and the ``playwright`` package;
skips with the reason when either is missing. One test in one file, so under
``pytest -n 2 --dist loadfile`` it runs on one worker beside the rest of the suite.

Environment:

- ``NANLAB_CHROMIUM``: the browser binary (default ``/usr/bin/chromium``);
- ``NANLAB_UPDATE_SCREENSHOT=1``: overwrite ``docs/screenshot.png`` (it is written only
  when missing otherwise, so a test run leaves the working tree clean);
- ``NANLAB_BROWSER_ARTIFACTS``: a folder for the failure screenshot, page text and
  server log (default: the test's tmp_path; the failure message names it).
"""

from __future__ import annotations

import json
import os
import re
import secrets
import shutil
import signal
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
import warnings
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
LAB = ROOT / "labs" / "00_start_here.ipynb"
CHROMIUM = os.environ.get("NANLAB_CHROMIUM", "/usr/bin/chromium")
SCREENSHOT = ROOT / "docs" / "screenshot.png"

SERVER_START_S = 180  # JupyterLab start on a loaded machine
KERNEL_READY_S = 180  # page load, kernel start
RUN_ALL_S = 900  # ~15-30 s of kernel time alone; much more when the cores are shared
CLICK_S = 90  # one widget round trip to the kernel
LAYOUT_S = 20  # one step of arranging the screenshot

pytestmark = pytest.mark.slow

# Every code cell shows an execution count "[12]:", or the run stopped on an error.
_ALL_RAN_JS = """(n) => {
  const outs = [...document.querySelectorAll('.jp-Notebook .jp-OutputArea-output')];
  if (outs.some(o => /Traceback \\(most recent call last\\)|-{20,}\\s*\\n?\\s*\\w+Error/
                      .test(o.textContent))) return 'error';
  const prompts = [...document.querySelectorAll('.jp-Notebook .jp-CodeCell .jp-InputPrompt')];
  if (prompts.length < n) return false;
  const ran = prompts.every(p => /^\\[\\d+\\]:?$/.test(p.textContent.trim()));
  const busy = document.querySelector('.jp-Notebook-ExecutionIndicator[data-status="busy"]');
  return ran && !busy ? 'done' : false;
}"""

_PROBLEMS_JS = """() => {
  const bad = [];
  for (const o of document.querySelectorAll('.jp-Notebook .jp-OutputArea-output')) {
    const t = o.textContent;
    const stderr = o.matches('[data-mime-type="application/vnd.jupyter.stderr"]') ||
                   o.querySelector('[data-mime-type="application/vnd.jupyter.stderr"]');
    if (/Traceback|Error displaying widget|\\w+Error:/.test(t) || (stderr && /Error/.test(t)))
      bad.push(t.slice(0, 600));
  }
  return bad;
}"""

# The status bar reads "Python 3 (ipykernel) | Idle" once the kernel is up and idle.
_KERNEL_IDLE_JS = """() => /ipykernel\\)?\\s*\\|\\s*Idle/.test(
  document.querySelector('#jp-main-statusbar')?.textContent || '')"""

_IMAGES_JS = """() => [...document.querySelectorAll('.jp-Notebook .jp-OutputArea-output img')]
  .map(i => [i.complete, i.naturalWidth, i.naturalHeight])"""


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _first_multiple_choice(nb: dict) -> tuple[str, list[str], list[int]]:
    """(prompt, options, answers) of the lab's first single-answer multiple choice, read
    from the question store by the id the lab shows (``practice("<id>")``)."""
    from nanlab.course import questions
    from nanlab.course.quiz import MultipleChoiceQuestion

    for cell in nb["cells"]:
        if cell["cell_type"] != "code":
            continue
        for qid in re.findall(r"""practice\(\s*["']([^"']+)["']\s*\)""", "".join(cell["source"])):
            q = questions.question(qid)
            if isinstance(q, MultipleChoiceQuestion) and len(q.answers) == 1:
                return q.prompt, list(q.options), list(q.answers)
    raise AssertionError(f"{LAB.name} shows no single-answer multiple choice; the browser "
                         "test needs one")


def _write_settings(settings: Path) -> None:
    """User settings of the throw-away JupyterLab: no toasts, every cell in the DOM."""
    files = {
        # 'none': all cells stay attached, so the test sees every prompt and output
        "@jupyterlab/notebook-extension/tracker.jupyterlab-settings": {"windowingMode": "none"},
        "@jupyterlab/apputils-extension/notification.jupyterlab-settings": {
            "fetchNews": "false", "checkForUpdates": False, "doNotDisturbMode": True},
    }
    for name, value in files.items():
        path = settings / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(json.dumps(value))


def _wait_for_server(proc: subprocess.Popen, url: str, log: Path) -> None:
    deadline = time.monotonic() + SERVER_START_S
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise AssertionError(f"JupyterLab exited with {proc.returncode}:\n"
                                 f"{log.read_text()[-3000:]}")
        try:
            with urllib.request.urlopen(url, timeout=5) as r:
                if r.status == 200:
                    return
        except (urllib.error.URLError, OSError):
            pass
        time.sleep(0.5)  # polling the server's status endpoint, not waiting on the page
    raise AssertionError(f"JupyterLab did not answer within {SERVER_START_S} s:\n"
                         f"{log.read_text()[-3000:]}")


def _stop_server(proc: subprocess.Popen, base: str, token: str) -> None:
    """Ask the server to shut down (it stops its kernels), then signal, then kill."""
    if proc.poll() is None:
        try:
            req = urllib.request.Request(f"{base}/api/shutdown", method="POST",
                                         headers={"Authorization": f"token {token}"})
            urllib.request.urlopen(req, timeout=10).close()
        except (urllib.error.URLError, OSError):
            pass
        try:
            proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGTERM)
            try:
                proc.wait(timeout=15)
            except subprocess.TimeoutExpired:
                os.killpg(proc.pid, signal.SIGKILL)
                proc.wait(timeout=15)


@pytest.fixture
def jupyter_lab(tmp_path):
    """A JupyterLab server on 127.0.0.1 with a copy of lab 00 (skips without a browser)."""
    if not Path(CHROMIUM).exists():
        pytest.skip(f"Chromium not found at {CHROMIUM}: apt-get install chromium "
                    "(or set NANLAB_CHROMIUM)")
    pytest.importorskip("playwright.sync_api",
                        reason="playwright not installed: pip install -e '.[test]'")
    work = tmp_path / "work"
    work.mkdir()
    nb = json.loads(LAB.read_text())
    for cell in nb["cells"]:  # no stored counts or outputs: every "[n]:" comes from this run
        if cell["cell_type"] == "code":
            cell["execution_count"], cell["outputs"] = None, []
    (work / LAB.name).write_text(json.dumps(nb))
    _write_settings(tmp_path / "settings")
    env = dict(os.environ)
    env.update(
        NANLAB_PROGRESS=str(tmp_path / "progress.json"),
        OMP_NUM_THREADS="1",
        MKL_NUM_THREADS="1",
        JUPYTER_CONFIG_DIR=str(tmp_path / "config"),
        JUPYTER_RUNTIME_DIR=str(tmp_path / "runtime"),
        JUPYTERLAB_SETTINGS_DIR=str(tmp_path / "settings"),
        JUPYTERLAB_WORKSPACES_DIR=str(tmp_path / "workspaces"),
        PATH=f"{Path(sys.executable).parent}{os.pathsep}{env.get('PATH', '')}",
        PYTHONUNBUFFERED="1",
    )
    port, token = _free_port(), secrets.token_hex(16)
    base = f"http://127.0.0.1:{port}"
    log = tmp_path / "jupyterlab.log"
    cmd = [sys.executable, "-m", "jupyterlab", "--no-browser", "--ip=127.0.0.1",
           f"--port={port}", "--port-retries=0", f"--IdentityProvider.token={token}",
           f"--ServerApp.root_dir={work}", "--LabApp.news_url=None",
           "--LabApp.check_for_updates_class=jupyterlab.NeverCheckForUpdate"]
    if hasattr(os, "geteuid") and os.geteuid() == 0:
        cmd.append("--allow-root")  # CI containers run as root
    with open(log, "wb") as out:
        proc = subprocess.Popen(cmd, cwd=work, env=env, stdout=out, stderr=subprocess.STDOUT,
                                start_new_session=True)
    try:
        _wait_for_server(proc, f"{base}/api/status?token={token}", log)
        yield {"url": f"{base}/lab/tree/{LAB.name}?token={token}&reset", "nb": nb,
               "log": log, "tmp": tmp_path}
    finally:
        _stop_server(proc, base, token)


def _save_failure(page, where: Path, log: Path) -> str:
    where.mkdir(parents=True, exist_ok=True)
    try:
        page.screenshot(path=str(where / "failure.png"), full_page=False)
        (where / "page.txt").write_text(page.inner_text("body"))
    except Exception as err:  # the page itself may be the problem
        (where / "page.txt").write_text(f"could not read the page: {err!r}")
    shutil.copy(log, where / "jupyterlab.log")
    return f"failure screenshot, page text and server log in {where}"


def _layout_for_screenshot(page, widget) -> None:
    """A plot beside the answered widget: fold the file browser away, right-click the
    first plot, 'Create New View for Output' (it opens in a panel of its own), then
    scroll the widget to the top and move the split just below it.

    Best effort: the screenshot is for the README, so a layout step that fails after a
    JupyterLab change gives a warning and a plainer picture, not a failed test.
    """
    try:
        tab = page.locator(".jp-SideBar.jp-mod-left .lm-TabBar-tab.lm-mod-current")
        if tab.count():
            tab.first.click(timeout=LAYOUT_S * 1000)
        plot = page.locator(".jp-Notebook .jp-OutputArea-output", has=page.locator("img")).first
        plot.scroll_into_view_if_needed(timeout=LAYOUT_S * 1000)
        plot.click(button="right", timeout=LAYOUT_S * 1000)
        page.locator(".lm-Menu-item", has_text=re.compile(r"New View for (Cell )?Output")) \
            .first.click(timeout=LAYOUT_S * 1000)
        page.locator(".jp-LinkedOutputView img").first.wait_for(state="visible",
                                                               timeout=LAYOUT_S * 1000)
        widget.evaluate("e => e.scrollIntoView({block: 'start'})")
        handles = page.evaluate("""() => [...document.querySelectorAll('.lm-DockPanel-handle')]
          .map(h => h.getBoundingClientRect()).filter(r => r.width > 200 && r.height < 20)
          .map(r => [r.x + r.width / 2, r.y + r.height / 2])""")
        box = widget.bounding_box()
        if handles and box:
            x, y = handles[0]
            page.mouse.move(x, y)
            page.mouse.down()
            page.mouse.move(x, box["y"] + box["height"] + 16, steps=5)
            page.mouse.up()
    except Exception as err:  # playwright's TimeoutError and friends
        warnings.warn(f"screenshot layout step failed, plain screenshot instead: {err}",
                      stacklevel=2)
    widget.evaluate("e => e.scrollIntoView({block: 'start'})")


def test_lab00_runs_in_a_real_browser(jupyter_lab):
    from playwright import sync_api  # the fixture skipped when it is missing

    nb = jupyter_lab["nb"]
    n_code = sum(c["cell_type"] == "code" for c in nb["cells"])
    prompt, options, answers = _first_multiple_choice(nb)
    wrong = next(o for i, o in enumerate(options) if i not in answers)
    right = options[answers[0]]
    artifacts = Path(os.environ.get("NANLAB_BROWSER_ARTIFACTS") or jupyter_lab["tmp"] /
                     "artifacts")

    with sync_api.sync_playwright() as pw:
        browser = pw.chromium.launch(executable_path=CHROMIUM, headless=True,
                                     args=["--no-sandbox"])
        try:
            page = browser.new_page(viewport={"width": 1280, "height": 820})
            page.set_default_timeout(KERNEL_READY_S * 1000)
            expect = sync_api.expect
            try:
                page.goto(jupyter_lab["url"])
                # the notebook is open and its kernel is up and idle
                page.locator(".jp-Notebook .jp-CodeCell").first.wait_for(state="visible")
                page.wait_for_function(_KERNEL_IDLE_JS, polling=500)

                # Run > Run All Cells, as a learner does
                page.locator(".lm-MenuBar-itemLabel", has_text=re.compile("^Run$")).click()
                page.locator(".lm-Menu-itemLabel",
                             has_text=re.compile("^Run All Cells$")).click()
                state = page.wait_for_function(_ALL_RAN_JS, arg=n_code, polling=1000,
                                               timeout=RUN_ALL_S * 1000).json_value()
                problems = page.evaluate(_PROBLEMS_JS)
                assert state == "done" and not problems, (
                    f"the lab did not run cleanly ({state}):\n" + "\n---\n".join(problems))
                page.wait_for_function(_KERNEL_IDLE_JS, polling=500)

                # the plots are there and decoded
                images = page.evaluate(_IMAGES_JS)
                assert images, "no matplotlib figure was shown"
                assert all(ok and w > 100 and h > 100 for ok, w, h in images), images

                # a practice widget: a wrong pick, then the right one
                widget = page.locator(".jp-OutputArea-output",
                                      has=page.locator(".widget-radio-box"),
                                      has_text=prompt[:60]).first
                widget.scroll_into_view_if_needed()
                expect(widget.get_by_role("button", name="Check")).to_be_visible()
                widget.get_by_role("radio", name=wrong, exact=True).check()
                widget.get_by_role("button", name="Check").click()
                expect(widget).to_contain_text("is not the answer", timeout=CLICK_S * 1000)
                expect(widget).to_contain_text("Try again")
                widget.get_by_role("radio", name=right, exact=True).check()
                widget.get_by_role("button", name="Check").click()
                expect(widget).to_contain_text("Right.", timeout=CLICK_S * 1000)
                expect(widget).not_to_contain_text("is not the answer")

                # screenshot for the README: the loss curve beside the answered widget
                _layout_for_screenshot(page, widget)
                shot = jupyter_lab["tmp"] / "screenshot.png"
                page.screenshot(path=str(shot))
                if os.environ.get("NANLAB_UPDATE_SCREENSHOT") == "1" or not SCREENSHOT.exists():
                    SCREENSHOT.parent.mkdir(exist_ok=True)
                    shutil.copy(shot, SCREENSHOT)
            except Exception as err:
                where = _save_failure(page, artifacts, jupyter_lab["log"])
                raise AssertionError(f"{err}\n({where})") from err
        finally:
            browser.close()
