"""The documentation site: it builds offline and strict, and a reader can use it.

``mkdocs build --strict`` (``mkdocs.yml``; a broken link or anchor, or a page missing
from the navigation, fails it), then Chromium through Playwright on the built site over
a local HTTP server: from the home page along the navigation to the course and a lab,
whose figures (the executed solution notebook's plots) load; every lab in the
navigation, each with as many loaded figures as its notebook has; nothing fetched from
the network.

Skips with the reason when the ``docs`` extra (mkdocs-material, mkdocs-jupyter,
mkdocstrings) or Chromium / Playwright is missing. Environment:

- ``NANLAB_DOCS_SITE``: a site already built by ``make docs`` (e.g. ``site``): test it
  instead of building one (``make test`` builds it once);
- ``NANLAB_CHROMIUM``: the browser binary (default ``/usr/bin/chromium``).
"""

from __future__ import annotations

import fcntl
import functools
import http.server
import importlib.util
import json
import os
import re
import subprocess
import sys
import threading
from pathlib import Path
from urllib.parse import urlparse

import pytest

ROOT = Path(__file__).resolve().parents[1]
CHROMIUM = os.environ.get("NANLAB_CHROMIUM", "/usr/bin/chromium")
LAB = "05_init_depth"  # the lab the navigation test walks to: the one with most figures
BUILD_S = 600  # about 30 s on a quiet 2-core machine, far more on a loaded one
PAGE_S = 60

pytestmark = pytest.mark.slow


def lab_notebooks() -> list[Path]:
    return sorted((ROOT / "solutions").glob("[0-9][0-9]_*.ipynb"))


def figures_in(notebook: Path) -> int:
    """The number of PNG figures among the stored outputs of ``notebook``."""
    cells = json.loads(notebook.read_text(encoding="utf-8"))["cells"]
    return sum("image/png" in out.get("data", {})
               for cell in cells if cell["cell_type"] == "code" for out in cell["outputs"])


def test_the_navigation_lists_every_lab():
    """Cheap and without the docs extra: each solution notebook is a page in mkdocs.yml."""
    nav = (ROOT / "mkdocs.yml").read_text(encoding="utf-8").split("\nnav:", 1)[1]
    listed = re.findall(r":\s*solutions/(\S+\.ipynb)", nav)
    assert listed == [p.name for p in lab_notebooks()]


def test_the_instructors_table_has_a_row_for_every_fault():
    """``bench/bench_faults_anywhere.py --markdown`` measures the table; a fault added to
    the catalogue and not measured there fails here."""
    from nanlab.faults import FAULTS

    page = (ROOT / "docs" / "guides" / "faults.md").read_text(encoding="utf-8")
    section = page.split("\n## Faults on your own model\n", 1)[1].split("\n## ", 1)[0]
    assert "bench/bench_faults_anywhere.py --markdown" in section
    rows = re.findall(r"^\| `(\w+)` \|", section, re.M)
    assert sorted(rows) == sorted(FAULTS)


def _slug(heading: str) -> str:
    """A heading's anchor as GitHub and MkDocs' toc make it (for the headings here)."""
    return re.sub(r"[\s]+", "-", re.sub(r"[^\w\s-]", "", heading.strip().lower()))


def test_the_readmes_links_lead_to_files_and_headings():
    """The README is mostly a door into the docs: each relative link is a file, and an
    anchor into a Markdown page is one of its headings."""
    links = re.findall(r"\]\(([^)\s]+)\)", (ROOT / "README.md").read_text(encoding="utf-8"))
    local = [link for link in links if not re.match(r"[a-z]+:", link)]
    assert len(local) >= 20, local
    for link in local:
        path, _, anchor = link.partition("#")
        assert (ROOT / path).exists(), f"README links to {path}, which does not exist"
        if anchor:
            headings = re.findall(r"^#+ (.+)$", (ROOT / path).read_text(encoding="utf-8"), re.M)
            assert anchor in {_slug(h) for h in headings}, f"README: no heading #{anchor} in {path}"


@pytest.fixture(scope="module")
def site(tmp_path_factory) -> Path:
    """The built site: ``NANLAB_DOCS_SITE``, or a strict build into a temp folder."""
    given = os.environ.get("NANLAB_DOCS_SITE")
    if given:
        path = Path(given) if Path(given).is_absolute() else ROOT / given
        assert (path / "index.html").is_file(), f"NANLAB_DOCS_SITE={given}: no index.html"
        return path
    for module in ("mkdocs", "material", "mkdocs_jupyter", "mkdocstrings_handlers.python"):
        if importlib.util.find_spec(module.split(".")[0]) is None:
            pytest.skip(f"{module} is not installed: pip install -e \".[docs]\"")
    # one build per test session: xdist's workers share the folder above their own, and
    # the first to take the lock builds while the others wait for it
    shared = tmp_path_factory.getbasetemp()
    if os.environ.get("PYTEST_XDIST_WORKER"):
        shared = shared.parent  # the session's folder, above each worker's own
    out, cache = shared / "docs-site", shared / "docs-cache"
    with open(shared / "docs-site.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if not (out / "index.html").is_file():
            env = {**os.environ, "NANLAB_DOCS_CACHE": str(cache)}
            done = subprocess.run([sys.executable, "-m", "mkdocs", "build", "--strict",
                                   "--site-dir", str(out)], cwd=ROOT, env=env,
                                  capture_output=True, text=True, timeout=BUILD_S)
            assert done.returncode == 0, f"mkdocs build --strict failed:\n{done.stderr[-4000:]}"
    return out


@pytest.fixture(scope="module")
def served(site):
    """The site on a free local port, as ``python -m http.server`` would serve it."""
    class Quiet(http.server.SimpleHTTPRequestHandler):
        def log_message(self, *args):
            pass

    server = http.server.ThreadingHTTPServer(
        ("127.0.0.1", 0), functools.partial(Quiet, directory=str(site)))
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}/"
    finally:
        server.shutdown()
        server.server_close()


@pytest.fixture(scope="module")
def browser():
    if not Path(CHROMIUM).exists():
        pytest.skip(f"Chromium not found at {CHROMIUM}: apt-get install chromium "
                    "(or set NANLAB_CHROMIUM)")
    sync_api = pytest.importorskip("playwright.sync_api",
                                   reason="playwright is not installed: pip install playwright")
    with sync_api.sync_playwright() as pw:
        chromium = pw.chromium.launch(executable_path=CHROMIUM, headless=True,
                                      args=["--no-sandbox"])
        try:
            yield chromium
        finally:
            chromium.close()


_FIGURES_JS = """() => [...document.querySelectorAll('article .jp-OutputArea-output img')]
  .map(i => [i.complete, i.naturalWidth, i.naturalHeight])"""


def _open(browser, served):
    """A page that refuses (and remembers) every request that leaves the local server."""
    page = browser.new_page(viewport={"width": 1280, "height": 900})
    page.set_default_timeout(PAGE_S * 1000)
    outside: list[str] = []
    local = urlparse(served).netloc

    def route(r):
        url = urlparse(r.request.url)
        if url.scheme in ("http", "https") and url.netloc != local:
            outside.append(r.request.url)
            return r.abort()
        return r.continue_()

    page.route("**/*", route)
    return page, outside


def _loaded_figures(page) -> list[list]:
    page.wait_for_load_state("load")
    page.wait_for_function(
        "() => [...document.querySelectorAll('article img')].every(i => i.complete)")
    return page.evaluate(_FIGURES_JS)


def test_the_navigation_leads_to_a_lab_with_its_figures(browser, served):
    page, outside = _open(browser, served)
    page.goto(served)
    assert "nanlab" in page.title()
    shot = page.locator("article img[src$='screenshot.png']")
    assert shot.evaluate("i => i.complete && i.naturalWidth > 100"), "the screenshot"

    nav = page.locator("nav.md-nav--primary")
    nav.get_by_role("link", name="The course", exact=True).first.click()
    page.wait_for_url(re.compile(r"/course/$"))
    assert page.locator("article h1").first.inner_text().startswith("The course")

    labs = nav.locator("label", has_text=re.compile(r"^\s*Labs\s*$")).first
    link = nav.get_by_role("link", name=re.compile(r"^05 Init and depth"))
    if not link.is_visible():
        labs.click()  # Material folds a nested section: open it as a reader does
    link.click()
    page.wait_for_url(re.compile(rf"/solutions/{LAB}/$"))
    assert "Init" in page.locator("article h1").first.inner_text()

    figures = _loaded_figures(page)
    expected = figures_in(ROOT / "solutions" / f"{LAB}.ipynb")
    assert expected >= 3, f"{LAB} stores {expected} figures"
    assert len(figures) == expected, (len(figures), expected)
    assert all(ok and w > 100 and h > 100 for ok, w, h in figures), figures
    assert not outside, f"the site fetched from the network: {outside}"
    page.close()


def test_every_lab_page_shows_every_figure_of_its_notebook(browser, served):
    page, outside = _open(browser, served)
    page.goto(served + "course/")
    hrefs = page.evaluate("""() => [...document.querySelectorAll('nav.md-nav--primary a')]
        .map(a => a.href).filter(h => /\\/solutions\\/\\d\\d_[^/]+\\/$/.test(h))""")
    pages = list(dict.fromkeys(hrefs))
    assert [h.rstrip("/").rsplit("/", 1)[1] for h in pages] == \
           [p.stem for p in lab_notebooks()]
    for href, notebook in zip(pages, lab_notebooks(), strict=True):
        page.goto(href)
        figures = _loaded_figures(page)
        assert len(figures) == figures_in(notebook), (notebook.name, len(figures))
        assert all(ok and w > 0 for ok, w, _ in figures), (notebook.name, figures)
    assert not outside, f"the site fetched from the network: {outside}"
    page.close()


def test_the_guides_and_the_api_reference_are_there(browser, served):
    """The generated parts: the fault catalogue read from the code, the instructor's
    measured table, the API reference from the docstrings."""
    from nanlab.faults import FAULTS

    page, outside = _open(browser, served)
    page.goto(served + "guides/faults/")
    text = page.locator("article").inner_text()
    for name in FAULTS:
        assert f"{name}\t" in text or f"{name} " in text, name
    assert page.locator("h2#faults-on-your-own-model").count() == 1
    page.goto(served + "api/")
    for name in ("nanlab.train.Trainer", "nanlab.guard.Guard", "nanlab.debug.diagnose"):
        assert page.locator(f"[id='{name}']").count() == 1, name
    assert not outside, f"the site fetched from the network: {outside}"
    page.close()
