"""One source per notebook: ``solutions/`` holds the answers, ``labs/`` is generated from it.

Each solution is a jupytext pair: ``solutions/<name>.py`` (percent format: real Python,
linted by ruff, easy to review) and ``solutions/<name>.ipynb`` (the same cells with the
outputs nbval compares). ``solutions/jupytext.toml`` pairs them, so JupyterLab keeps
both in step on save; ``sync`` does the same from the command line (the newer file wins,
outputs and cell ids are kept) and ``check`` fails when a pair disagrees.

The nbgrader convention: in a solution notebook, the code a learner writes sits between
``### BEGIN SOLUTION`` and ``### END SOLUTION``. ``build`` writes the learner's version:

- each code block becomes a stub indented like the marker (``# YOUR CODE HERE`` then
  ``raise NotImplementedError()``); in markdown it becomes ``_Your answer here._``;
- outputs, execution counts and saved widget state are cleared;
- cells tagged ``solution-only`` are dropped (the solution's own "this is the source" banner)
  and a banner saying the lab is generated is put first, then a cell that says how to
  install nanlab when the kernel cannot import it (a fresh Colab runtime);
- the ``nbval-check-output`` tag is removed: a lab has no reference outputs to compare,
  and a learner's saved outputs are their own.

Stubs in code cells must sit inside a function body (so the stub raises only when the
check calls the function); a marker at the top level of a cell is an error, because the
unfilled lab must run top to bottom. ``check`` regenerates in memory and compares bytes, so
CI fails when a lab was edited by hand or a solution changed without a rebuild.

The authoring loop, after editing either file of a pair::

    nanlab course execute solutions/03_learning_rate.py   # sync the pair, store the outputs
    nanlab course build                                    # regenerate labs/
"""

from __future__ import annotations

import argparse
import copy
import hashlib
import os
import sys
import tempfile
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path

from nanlab.errors import NanlabError, require
from nanlab.runs.atomic import atomic_write

require("nbformat", "course")  # one line naming the extra, not a ModuleNotFoundError
import nbformat  # noqa: E402

BEGIN = "### BEGIN SOLUTION"
END = "### END SOLUTION"
CODE_STUB = ("# YOUR CODE HERE", "raise NotImplementedError()")
MARKDOWN_STUB = "_Your answer here._"
SOLUTION_ONLY_TAG = "solution-only"
CHECK_OUTPUT_TAG = "nbval-check-output"
BANNER_ID = "generated-banner"
WIDGET_VIEW = "application/vnd.jupyter.widget-view+json"
INSTALL_ID = "install-check"
# The first code cell of every lab: where nanlab is missing (a fresh Colab runtime, a
# kernel from another environment) it says how to install it, instead of the next cell
# failing with a bare ImportError. Silent where nanlab is installed.
INSTALL_CHECK = """\
# Is nanlab, with its course extra, installed in this kernel's environment? (Silent when it is.)
import importlib.util
import sys

if importlib.util.find_spec("nanlab") is None or importlib.util.find_spec("ipywidgets") is None:
    print("nanlab[course] is not installed for this kernel (" + sys.executable + ").\\n"
          "- Colab or any notebook: run  %pip install 'nanlab[course] @ git+<URL of the "
          "nanlab repository>'\\n"
          "  then restart the kernel (Colab: Runtime > Restart session).\\n"
          "- A clone of the repository: run  make lab  in it, or  "
          "pip install -e '<clone>[course]'.")"""


class CourseError(NanlabError):
    """A solution notebook or folder the builder cannot use; the message names the place.

    >>> try:
    ...     solution_files("no-such-folder")
    ... except CourseError as err:
    ...     print(err)
    solutions directory 'no-such-folder' does not exist
    """


def strip_solutions(source: str, cell_type: str = "code", where: str = "cell") -> str:
    """Replace every marked block in one cell's source by its stub.

    >>> strip_solutions("def f():\\n    ### BEGIN SOLUTION\\n    return 1\\n    ### END SOLUTION")
    'def f():\\n    # YOUR CODE HERE\\n    raise NotImplementedError()'
    """
    out: list[str] = []
    begin_line: int | None = None
    for number, line in enumerate(source.split("\n"), start=1):
        text = line.strip()
        if text.startswith(BEGIN):
            if begin_line is not None:
                raise CourseError(
                    f"{where}, line {number}: {BEGIN!r} inside the block opened on line "
                    f"{begin_line}; close it with {END!r} first"
                )
            begin_line = number
            indent = line[: len(line) - len(line.lstrip())]
            if cell_type == "code":
                if not indent:
                    raise CourseError(
                        f"{where}, line {number}: {BEGIN!r} at the top level of a code cell; "
                        "the stub would raise when the lab runs. Put the answer inside a "
                        "function body and call it from the check cell"
                    )
                out += [indent + s for s in CODE_STUB]
            else:
                out.append(indent + MARKDOWN_STUB)
        elif text.startswith(END):
            if begin_line is None:
                raise CourseError(f"{where}, line {number}: {END!r} without a {BEGIN!r} before it")
            begin_line = None
        elif begin_line is None:
            out.append(line)
    if begin_line is not None:
        raise CourseError(f"{where}, line {begin_line}: {BEGIN!r} is never closed by {END!r}")
    return "\n".join(out)


def make_lab(
    solution: nbformat.NotebookNode, name: str, source: str | Path | None = None
) -> nbformat.NotebookNode:
    """The learner's version of one solution notebook (``name`` is its file name).

    ``source`` is the solution's path, used only to name it in errors.

    >>> nb = nbformat.read("solutions/01_numbers.ipynb", 4)  # doctest: +SKIP
    >>> lab = make_lab(nb, "01_numbers.ipynb")  # doctest: +SKIP
    """
    lab = copy.deepcopy(solution)
    lab.metadata.pop("widgets", None)
    lab.metadata.pop("jupytext", None)  # a learner's lab is a plain notebook, not a pair
    cells = []
    for index, cell in enumerate(lab.cells):
        tags = list(cell.get("metadata", {}).get("tags", []))
        if SOLUTION_ONLY_TAG in tags:
            continue
        where = f"{source or 'solutions/' + name} cell {index} ({cell.cell_type})"
        if cell.cell_type in ("code", "markdown"):
            cell.source = strip_solutions(cell.source, cell.cell_type, where)
        if cell.cell_type == "code":
            cell.outputs = []
            cell.execution_count = None
        for key in ("execution", "collapsed", "scrolled"):
            cell.metadata.pop(key, None)
        if CHECK_OUTPUT_TAG in tags:
            tags.remove(CHECK_OUTPUT_TAG)
            if tags:
                cell.metadata["tags"] = tags
            else:
                cell.metadata.pop("tags")
        cells.append(cell)
    banner = nbformat.v4.new_markdown_cell(
        f"_Generated from `solutions/{name}` by `nanlab course build`; do not edit by hand._ "
        "Instructors: edit the solution and rebuild. "
        "Learners: fill in the cells marked `# YOUR CODE HERE`.",
        id=BANNER_ID,
    )
    install = nbformat.v4.new_code_cell(INSTALL_CHECK, id=INSTALL_ID)
    lab.cells = [banner, install, *cells]
    lab.metadata["nanlab"] = {"cells_sha256": cells_digest(lab)}
    return lab


def cells_digest(nb: nbformat.NotebookNode) -> str:
    """A hash of the cells' sources: what a learner types changes it, running cells does not.

    A built lab stores the digest it was built with, so a later build can tell a lab the
    learner edited (its digest no longer matches) from one it may replace.

    >>> nb = nbformat.v4.new_notebook(cells=[nbformat.v4.new_code_cell("x = 1")])
    >>> a = cells_digest(nb); nb.cells[0].outputs = [nbformat.v4.new_output("stream", text="1")]
    >>> cells_digest(nb) == a
    True
    """
    text = "\0".join(f"{c.cell_type}:{c.source}" for c in nb.cells)
    return hashlib.sha256(text.encode("utf-8")).hexdigest()


def edited_by_learner(path: Path) -> bool:
    """Whether the lab at ``path`` holds edits made after the build that wrote it. A lab
    without the build's digest (built before labs carried one, or not by nanlab) counts
    as edited: when in doubt, a learner's work is kept.

    >>> edited_by_learner(Path("no/such/lab.ipynb"))
    False
    """
    if not path.is_file():
        return False
    try:
        nb = nbformat.read(path, as_version=4)
    except Exception:  # noqa: BLE001 - unreadable: never overwrite what we cannot read
        return True
    built = nb.metadata.get("nanlab", {}).get("cells_sha256")
    return built != cells_digest(nb)


def render(nb: nbformat.NotebookNode) -> str:
    """The exact text a notebook is saved as; ``build``, ``check`` and ``execute`` share it.

    >>> render(nbformat.v4.new_notebook()).endswith("\\n")
    True
    """
    return nbformat.writes(nb, version=4) + "\n"


def solution_files(solutions_dir: str | Path = "solutions") -> list[Path]:
    """The solution notebooks, sorted by name; a missing folder is a CourseError.

    >>> [p.name for p in solution_files("solutions")]  # doctest: +SKIP
    ['01_numbers.ipynb']
    """
    folder = Path(solutions_dir)
    if not folder.is_dir():
        raise CourseError(f"solutions directory {str(folder)!r} does not exist")
    return sorted(folder.glob("*.ipynb"))


def paired_source(notebook: str | Path) -> Path:
    """The percent-format Python file paired with a solution notebook.

    >>> paired_source("solutions/03_learning_rate.ipynb")
    PosixPath('solutions/03_learning_rate.py')
    """
    return Path(notebook).with_suffix(".py")


def _cells(nb: nbformat.NotebookNode) -> list[tuple[str, str, dict]]:
    """What a pair must agree on: each cell's type, source and metadata (not its outputs)."""
    skip = ("execution", "collapsed", "scrolled")
    return [(c.cell_type, c.source, {k: v for k, v in c.metadata.items() if k not in skip})
            for c in nb.cells]


def pair_problems(solutions_dir: str | Path = "solutions") -> list[str]:
    """Solution pairs whose ``.py`` and ``.ipynb`` disagree, one line each; [] when in step.

    >>> pair_problems("solutions")  # doctest: +SKIP
    []
    """
    import jupytext

    folder = Path(solutions_dir)
    notebooks = solution_files(folder)
    problems = []
    for source in sorted(set(folder.glob("*.py")) - {paired_source(n) for n in notebooks}):
        problems.append(f"unpaired: {source} has no {source.with_suffix('.ipynb').name}; "
                        f"run `nanlab course sync {source}`")
    for path in notebooks:
        source = paired_source(path)
        if not source.exists():
            problems.append(f"unpaired: {path} has no {source.name}; "
                            f"run `nanlab course sync {path}`")
            continue
        try:
            have = _cells(nbformat.read(path, as_version=4))
            want = _cells(jupytext.read(source))
        except Exception as err:
            problems.append(f"unreadable: {path} or {source} ({type(err).__name__}: {err})")
            continue
        if have == want:
            continue
        first = next((i for i, (h, w) in enumerate(zip(have, want, strict=False)) if h != w),
                     min(len(have), len(want)))
        problems.append(f"out of sync: {source} and {path} differ from cell {first} on "
                        f"({len(want)} and {len(have)} cells); run `nanlab course sync {source}` "
                        "(the newer file wins)")
    return problems


def sync(path: str | Path) -> Path:
    """Bring one pair into step, the newer file winning; outputs and cell ids are kept.

    Either file of the pair may be given; returns the notebook's path.

    >>> sync("solutions/03_learning_rate.py")  # doctest: +SKIP
    PosixPath('solutions/03_learning_rate.ipynb')
    """
    from jupytext.cli import jupytext as jupytext_cli

    path = Path(path)
    notebook = path.with_suffix(".ipynb")
    if not path.exists():
        raise CourseError(f"{str(path)!r} does not exist")
    if path.suffix not in (".py", ".ipynb"):
        raise CourseError(f"{str(path)!r} is not a solution pair file; allowed: .py or .ipynb")
    try:
        jupytext_cli(["--sync", "--quiet", str(path)])
    except (SystemExit, Exception) as err:
        raise CourseError(f"{path}: jupytext could not sync the pair ({err})") from err
    return notebook


def expected_labs(solutions_dir: str | Path = "solutions") -> dict[str, str]:
    """File name -> the text each lab should have, generated in memory.

    >>> sorted(expected_labs())  # doctest: +SKIP
    ['01_numbers.ipynb']
    """
    out = {}
    for path in solution_files(solutions_dir):
        try:
            solution = nbformat.read(path, as_version=4)
        except Exception as err:
            raise CourseError(f"{path}: not a readable notebook ({err})") from err
        out[path.name] = render(make_lab(solution, path.name, path))
    return out


def build(solutions_dir: str | Path = "solutions", labs_dir: str | Path = "labs",
          force: bool = False) -> tuple[list[Path], list[Path], list[Path]]:
    """Write every lab from its solution; returns (the files written or already right, the
    labs kept because a learner edited them, the backups of edited labs replaced by force).

    Nothing is written unless every solution converts, so a bad marker leaves labs/ alone.
    A lab edited since its build is kept as it is; with ``force`` it is replaced and the
    edited copy saved beside it as ``NAME.ipynb.bak`` first.

    >>> build("solutions", "labs")  # doctest: +SKIP
    ([PosixPath('labs/01_numbers.ipynb')], [], [])
    """
    texts = expected_labs(solutions_dir)
    labs = Path(labs_dir)
    labs.mkdir(parents=True, exist_ok=True)
    written, kept, backups = [], [], []
    for name, text in texts.items():
        target = labs / name
        if target.exists() and target.read_text(encoding="utf-8") == text:
            written.append(target)
            continue
        if edited_by_learner(target):
            if not force:
                kept.append(target)
                continue
            backups.append(target.with_name(name + ".bak"))
            atomic_write(backups[-1], target.read_bytes())
        atomic_write(target, text)
        written.append(target)
    return written, kept, backups


def check(solutions_dir: str | Path = "solutions", labs_dir: str | Path = "labs") -> list[str]:
    """Solution pairs out of step, and differences between labs/ and what solutions/ generates,
    one line each; [] when all is in sync.

    >>> check("solutions", "labs")  # doctest: +SKIP
    []
    """
    problems = pair_problems(solutions_dir)
    texts = expected_labs(solutions_dir)
    labs = Path(labs_dir)
    present = {p.name for p in labs.glob("*.ipynb")} if labs.is_dir() else set()
    for name, text in texts.items():
        target = labs / name
        if name not in present:
            problems.append(f"missing: {target} (from solutions/{name}); run `nanlab course build`")
            continue
        actual = target.read_text(encoding="utf-8")
        if actual != text:
            problems.append(f"stale: {target}: {_first_difference(actual, text)}; "
                            "run `nanlab course build`")
    for name in sorted(present - set(texts)):
        problems.append(f"extra: {labs / name} has no source solutions/{name}; delete it "
                        "or add the solution")
    return problems


def execute(path: str | Path, timeout: int = 600, kernel_name: str = "python3") -> None:
    """Run a solution notebook top to bottom and save it with its outputs, for nbval to compare.

    Either file of a pair may be given: the pair is synced first (the newer file wins).

    Runs in the notebook's folder with the progress file pointed at a scratch file, so the
    instructor's own progress is untouched. Saved without timing metadata and without widget
    views (they only live in a running kernel and carry random ids), so running it twice
    gives the same file. A cell that raises stops with a CourseError; the file is left as is.
    A missing file, a folder, a file that is not a notebook or garbled JSON is a one-line
    CourseError naming the file, before anything is synced or run.

    >>> execute("no-such.ipynb")
    Traceback (most recent call last):
    ...
    nanlab.course.notebooks.CourseError: no-such.ipynb: does not exist
    """
    from nbclient import NotebookClient
    from nbclient.exceptions import CellExecutionError

    path = Path(path)
    _check_notebook_path(path)
    if path.suffix == ".py" and path.with_suffix(".ipynb").exists():
        _read_notebook(path.with_suffix(".ipynb"))  # garbled JSON: say so before syncing
    if paired_source(path).exists() or path.suffix == ".py":
        path = sync(path)
    nb = _read_notebook(path)
    client = NotebookClient(
        nb,
        timeout=timeout,
        kernel_name=kernel_name,
        resources={"metadata": {"path": str(path.parent.resolve())}},
        record_timing=False,
        store_widget_state=False,
    )
    with tempfile.TemporaryDirectory(prefix="nanlab-execute-") as scratch:
        with _env("NANLAB_PROGRESS", str(Path(scratch) / "progress.json")):
            try:
                client.execute()
            except CellExecutionError as err:
                raise CourseError(f"{path}: a cell raised while executing:\n{err}") from err
    nb.metadata.pop("widgets", None)
    for cell in nb.cells:
        if cell.cell_type == "code":
            cell.outputs = [o for o in cell.outputs if WIDGET_VIEW not in o.get("data", {})]
    atomic_write(path, render(nb))


def _check_notebook_path(path: Path) -> None:
    """CourseError unless ``path`` is an existing .ipynb or .py file; readable if .ipynb."""
    if path.is_dir():
        raise CourseError(f"{path}: is a folder, not a notebook; give a .ipynb or .py file")
    if not path.exists():
        raise CourseError(f"{path}: does not exist")
    if path.suffix not in (".ipynb", ".py"):
        raise CourseError(f"{path}: is not a notebook; give a .ipynb file or its paired .py")
    if not path.is_file():
        raise CourseError(f"{path}: is not a plain file")
    if path.suffix == ".ipynb":
        _read_notebook(path)


def _read_notebook(path: Path) -> nbformat.NotebookNode:
    """``nbformat.read``, a one-line CourseError naming ``path`` when it is not a notebook."""
    try:
        nb = nbformat.read(path, as_version=4)
        nbformat.validate(nb)
    except UnicodeDecodeError as err:
        raise CourseError(f"{path}: is not UTF-8 text ({err.reason} at byte {err.start})") from err
    except nbformat.reader.NotJSONError as err:
        raise CourseError(f"{path}: is not JSON, so not a notebook") from err
    except OSError as err:
        raise CourseError(f"{path}: cannot be read ({err.strerror or err})") from err
    except Exception as err:  # JSON, but not a notebook: no cells, a list, a bad version...
        reason = (str(err).strip().splitlines() or [type(err).__name__])[0]
        raise CourseError(f"{path}: is not a valid notebook ({reason})") from err
    return nb


def add_parser(subparsers: argparse._SubParsersAction) -> argparse.ArgumentParser:
    """Add ``course build|check|execute`` to a CLI's subparsers (the CLI wires this in).

    >>> sub = argparse.ArgumentParser().add_subparsers(dest="command")
    >>> _ = add_parser(sub)
    """
    course = subparsers.add_parser("course", help="sync, run, build or check the notebooks")
    actions = course.add_subparsers(dest="course_command", required=True)
    for name, func, text in (
        ("build", build_command, "write labs/ from solutions/"),
        ("check", check_command,
         "fail if a solution pair disagrees or labs/ is not what solutions/ generates"),
    ):
        p = actions.add_parser(name, help=text)
        p.add_argument("--solutions", default="solutions", help="solution notebooks folder")
        p.add_argument("--labs", default="labs", help="generated lab notebooks folder")
        if name == "build":
            p.add_argument("--force", action="store_true",
                           help="also replace labs you edited (each is saved as .bak first)")
        p.set_defaults(func=func)
    p = actions.add_parser("sync", help="bring solution pairs (.py <-> .ipynb) into step")
    p.add_argument("files", nargs="*", help="default: every pair in --solutions")
    p.add_argument("--solutions", default="solutions", help="solution notebooks folder")
    p.set_defaults(func=sync_command)
    p = actions.add_parser("execute", help="sync, run solution notebooks and save their outputs")
    p.add_argument("notebooks", nargs="*", help="default: every notebook in --solutions")
    p.add_argument("--solutions", default="solutions", help="solution notebooks folder")
    p.add_argument("--timeout", type=int, default=600, help="seconds allowed per cell")
    p.set_defaults(func=execute_command)
    return course


def build_command(args: argparse.Namespace) -> int:
    """``nanlab course build``: write labs/, print what changed; 1 on a bad solution.

    >>> build_command(argparse.Namespace(solutions="solutions", labs="labs"))  # doctest: +SKIP
    0
    """
    try:
        before = {p.name: p.read_bytes() for p in Path(args.labs).glob("*.ipynb")}
        written, kept, backups = build(args.solutions, args.labs,
                                       force=getattr(args, "force", False))
        extra = [p for p in check(args.solutions, args.labs) if p.startswith("extra:")]
    except CourseError as err:
        print(f"error: {err}")
        return 1
    changed = [p for p in written if before.get(p.name) != p.read_bytes()]
    for p in changed:
        print(f"wrote {p}")
    for p in backups:
        print(f"saved your edited copy as {p}")
    for p in kept:
        print(f"kept {p}: it has edits made after its last build; rename it to keep your "
              "work, or run `nanlab course build --force` (saves it as .bak, then replaces it)")
    for line in extra:
        print(line)
    print(f"built {len(written)} lab(s) from {args.solutions}/ into {args.labs}/; "
          f"{len(changed)} changed" + (f", {len(kept)} kept" if kept else ""))
    return 1 if kept else 0


def check_command(args: argparse.Namespace) -> int:
    """``nanlab course check``: one line per difference and a summary; 0 in sync, else 1.

    >>> check_command(argparse.Namespace(solutions="solutions", labs="labs"))  # doctest: +SKIP
    0
    """
    try:
        problems = check(args.solutions, args.labs)
        count = len(solution_files(args.solutions))
    except CourseError as err:
        print(f"error: {err}")
        return 1
    for line in problems:
        print(line)
    if problems:
        print(f"{len(problems)} difference(s) in {args.solutions}/ pairs or {args.labs}/")
        return 1
    print(f"{args.solutions}/ pairs in step and {args.labs}/ in sync ({count} notebook(s))")
    return 0


def sync_command(args: argparse.Namespace) -> int:
    """``nanlab course sync [FILE ...]``: sync solution pairs; 1 if one cannot be synced.

    >>> sync_command(argparse.Namespace(files=[], solutions="solutions"))  # doctest: +SKIP
    0
    """
    try:
        paths = [Path(p) for p in args.files] or solution_files(args.solutions)
        for path in paths:
            print(f"in step: {paired_source(sync(path))} <-> {path.with_suffix('.ipynb')}")
    except CourseError as err:
        print(f"error: {err}")
        return 1
    return 0


def execute_command(args: argparse.Namespace) -> int:
    """``nanlab course execute [NOTEBOOK ...]``: run solutions in place; 1 if any cell raised.

    >>> execute_command(argparse.Namespace(notebooks=[], solutions="solutions"))  # doctest: +SKIP
    0
    """
    try:
        paths = [Path(p) for p in args.notebooks] or solution_files(args.solutions)
        for path in paths:
            try:
                execute(path, timeout=getattr(args, "timeout", 600))
            except OSError as err:  # e.g. the notebook cannot be written back
                raise CourseError(f"{path}: {err.strerror or err}") from err
            print(f"executed {path}")
    except CourseError as err:
        print(f"error: {err}")
        return 1
    return 0


def _first_difference(actual: str, expected: str) -> str:
    """Name the first cell that differs, or say it is only the file's formatting."""
    try:
        got = nbformat.reads(actual, as_version=4)
    except Exception:
        return "not a readable notebook"
    want = nbformat.reads(expected, as_version=4)
    for i, (g, e) in enumerate(zip(got.cells, want.cells, strict=False)):
        if g.cell_type != e.cell_type:
            return f"cell {i} is {g.cell_type}, expected {e.cell_type}"
        if g.source != e.source:
            return f"cell {i} ({e.cell_type}) source differs"
        if g.cell_type == "code" and (g.outputs or g.execution_count is not None):
            return f"cell {i} has outputs; labs are saved without outputs"
        if g != e:
            return f"cell {i} ({e.cell_type}) metadata differs"
    if len(got.cells) != len(want.cells):
        return f"{len(got.cells)} cells, expected {len(want.cells)}"
    if got.metadata != want.metadata:
        return "notebook metadata differs"
    return "formatting differs"


@contextmanager
def _env(name: str, value: str) -> Iterator[None]:
    """Set an environment variable for the kernels started inside the block."""
    old = os.environ.get(name)
    os.environ[name] = value
    try:
        yield
    finally:
        if old is None:
            os.environ.pop(name, None)
        else:
            os.environ[name] = old


def main(argv: Sequence[str] | None = None) -> int:
    """Run ``course`` subcommands without the full CLI: ``python -m nanlab.course.notebooks check``.

    >>> main(["check"])  # doctest: +SKIP
    0
    """
    parser = argparse.ArgumentParser(prog="python -m nanlab.course.notebooks")
    add_parser(parser.add_subparsers(dest="command", required=True))
    args = parser.parse_args(["course", *(sys.argv[1:] if argv is None else argv)])
    return args.func(args)


if __name__ == "__main__":
    raise SystemExit(main())
