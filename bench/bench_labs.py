"""Wall time of every solution notebook, and of the whole course, run as a learner runs it.

Each notebook in ``solutions/`` is executed top to bottom in a fresh ``python3`` kernel
(kernel start included), one after the other, from a scratch copy so nothing in the
repository changes. The floors the course promises: each lab at most 90 s, the whole
course at most 10 minutes, on 2 CPU cores. ``--threads`` sets OMP_NUM_THREADS for the
kernels (default: leave torch's own choice, as a learner's JupyterLab does).

Run:  .venv/bin/python bench/bench_labs.py  [--only 03_learning_rate ...]  [--threads 1]
      [--cells 5]
The last line is JSON, to quote. Asserts nothing.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import shutil
import tempfile
import time
from datetime import datetime
from pathlib import Path

import nbformat
from nbclient import NotebookClient
from nbclient.exceptions import CellExecutionError

ROOT = Path(__file__).resolve().parent.parent
LAB_LIMIT_S = 90
COURSE_LIMIT_S = 600


def run_notebook(path: Path, workdir: Path) -> tuple[float, list[tuple[float, int]]]:
    """Seconds to start a kernel and run every cell of ``path`` in ``workdir``,
    and (seconds, cell index) for each code cell, read from nbclient's timing record."""
    nb = nbformat.read(path, as_version=4)
    client = NotebookClient(nb, timeout=900, kernel_name="python3", record_timing=True,
                            resources={"metadata": {"path": str(workdir)}})
    start = time.perf_counter()
    client.execute()
    total = time.perf_counter() - start
    cells = []
    for index, cell in enumerate(nb.cells):
        stamps = cell.get("metadata", {}).get("execution", {})
        if "shell.execute_reply" in stamps and "iopub.execute_input" in stamps:
            seconds = (datetime.fromisoformat(stamps["shell.execute_reply"].rstrip("Z"))
                       - datetime.fromisoformat(stamps["iopub.execute_input"].rstrip("Z")))
            cells.append((seconds.total_seconds(), index))
    return total, sorted(cells, reverse=True)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--only", nargs="*", help="notebook names without .ipynb")
    parser.add_argument("--threads", type=int, help="OMP_NUM_THREADS for the kernels")
    parser.add_argument("--cells", type=int, default=0, metavar="N",
                        help="also print each lab's N slowest cells (index from 0)")
    args = parser.parse_args()
    paths = sorted((ROOT / "solutions").glob("*.ipynb"))
    if args.only:
        paths = [p for p in paths if p.stem in args.only]
    if args.threads:
        os.environ["OMP_NUM_THREADS"] = str(args.threads)
    scratch = Path(tempfile.mkdtemp(prefix="nanlab-bench-labs-"))
    os.environ["NANLAB_PROGRESS"] = str(scratch / "progress.json")
    times: dict[str, float] = {}
    failed: dict[str, str] = {}
    try:
        for path in paths:
            work = scratch / path.stem
            work.mkdir()
            try:
                seconds, cells = run_notebook(path, work)
                times[path.stem] = round(seconds, 1)
            except CellExecutionError as err:  # report it and go on with the other labs
                failed[path.stem] = str(err).strip().splitlines()[-1][:200]
                print(f"{path.stem:24} FAILED: {failed[path.stem]}", flush=True)
                continue
            flag = "" if times[path.stem] <= LAB_LIMIT_S else f"  (over {LAB_LIMIT_S} s)"
            print(f"{path.stem:24} {times[path.stem]:6.1f} s{flag}", flush=True)
            for cell_seconds, index in cells[:args.cells]:
                print(f"{'':26}cell {index:3d}  {cell_seconds:6.1f} s", flush=True)
    finally:
        shutil.rmtree(scratch, ignore_errors=True)
    total = round(sum(times.values()), 1)
    print(f"{'whole course':24} {total:6.1f} s  (floor {COURSE_LIMIT_S} s; "
          f"slowest {max(times.values(), default=0):.1f} s, floor {LAB_LIMIT_S} s per lab)")
    print(json.dumps({"labs_s": times, "course_s": total, "failed": failed,
                      "cpus": os.cpu_count(),
                      "threads": args.threads, "load_1min": round(os.getloadavg()[0], 2),
                      "machine": platform.processor() or platform.machine()}))


if __name__ == "__main__":
    main()
