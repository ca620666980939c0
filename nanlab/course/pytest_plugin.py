"""A pytest plugin for nbval runs of a course: solutions must pass, unfilled labs must not.

nbval runs every notebook and compares the outputs of tagged cells; this plugin adds the
two directions ``nbgrader validate`` and ``validate --invert`` check, on the same run, so
no notebook is executed twice:

- in a notebook under a ``solutions/`` folder every check line must be ``passed: ...``;
- in a notebook under a ``labs/`` folder every check line must be ``not done yet: ...``
  (a check that passes in an unfilled lab tests nothing; one that says "not yet right"
  means the stub leaks into code that runs before the learner's answer).

A check line is a stdout line that starts with one of :mod:`nanlab.course.checks`' statuses.
The repository's ``conftest.py`` loads it; in your own course repository use::

    pytest -p nanlab.course.pytest_plugin --nbval-lax solutions labs
"""

from __future__ import annotations

from collections.abc import Iterable

import pytest

from nanlab.course.checks import NOT_DONE, PASSED, WRONG

STATUSES = tuple(f"{s}:" for s in (PASSED, NOT_DONE, WRONG))
EXPECTED = {"solutions": PASSED, "labs": NOT_DONE}
EXPECT_KEY = "nanlab_expect"  # a cell's own expected status, over its folder's


def check_lines(outputs: Iterable[dict]) -> list[str]:
    """The check lines printed to stdout by one cell's outputs.

    >>> check_lines([{"output_type": "stream", "name": "stdout", "text": "passed: x\\nhi\\n"}])
    ['passed: x']
    """
    lines = []
    for out in outputs:
        if out.get("output_type") == "stream" and out.get("name") == "stdout":
            lines += [s for s in out.get("text", "").splitlines() if s.startswith(STATUSES)]
    return lines


def expected_status(path) -> str | None:
    """``passed`` for a notebook under solutions/, ``not done yet`` under labs/, else None.

    >>> expected_status("course/labs/02_dirty_data.ipynb")
    'not done yet'
    """
    parts = str(path).replace("\\", "/").split("/")
    folder = parts[-2] if len(parts) > 1 else ""
    return EXPECTED.get(folder)


@pytest.hookimpl(wrapper=True)
def pytest_runtest_call(item):
    """After an nbval cell ran without error, fail it if a check line has the wrong status.

    A pytest hook: pytest calls it, you load the plugin. Example::

        pytest -p nanlab.course.pytest_plugin --nbval-lax solutions labs
    """
    result = yield
    outputs = getattr(item, "test_outputs", None)
    cell = getattr(item, "cell", None)  # a cell may say what it expects (a combined run)
    want = (cell.metadata.get(EXPECT_KEY) if cell is not None else None) \
        or expected_status(getattr(item, "path", ""))
    if outputs is not None and want is not None:
        wrong = [line for line in check_lines(outputs) if not line.startswith(f"{want}:")]
        if wrong:
            where = "a solution" if want == PASSED else "an unfilled lab"
            pytest.fail(f"in {where} every check must say '{want}', but this cell printed: "
                        + " | ".join(wrong), pytrace=False)
    return result
