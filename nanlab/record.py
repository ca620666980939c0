"""The run record: what happened at every step, kept in memory and as JSON Lines.

Three streams and a manifest, each a list of flat dicts:

- ``steps``:  one row per step (loss, lr, global grad norm, loss scale, finiteness, ...);
  ``finite`` is False when the loss or the global grad norm is not finite. A step the
  GradScaler skipped (its scale overflowed the gradients, e.g. fp16's step 0 at scale
  65536) has a NaN or inf grad norm but ``finite`` True and ``skipped`` True: that is the
  scaler working, not a failure
- ``layers``: one row per layer every ``record_every`` steps (grad norm, parameter
  mean / std, activation abs-max)
- ``events``: anything a tool did to the run (a skipped step, a rollback, a stop)
- ``manifest``: config, seed, fault, versions, code commit and device: enough to
  reproduce the run (claim M12).

On disk a run folder holds ``manifest.json``, ``steps.jsonl``, ``layers.jsonl`` and
``events.jsonl``. Non-finite numbers are written as ``NaN`` / ``Infinity`` (what
Python's ``json`` and pandas read back), because whether a value was inf or NaN is
part of the evidence.

>>> rec = RunRecord()
>>> rec.log_step({"step": 0, "loss": 3.5})
>>> rec.column("loss")
array([3.5])
"""

from __future__ import annotations

import json
import math
import platform
import subprocess
from pathlib import Path

import numpy as np

STREAMS = ("steps", "layers", "events")


class RunRecord:
    """In-memory record of a run, optionally mirrored to a folder as JSON Lines.

    The trainer fills it (``run = train(...)`` is a RunRecord); you read it.

    >>> rec = RunRecord()                     # RunRecord("runs/x") also writes JSON Lines
    >>> rec.log_step({"step": 0, "loss": 3.5, "finite": True})
    >>> rec.log_step({"step": 1, "loss": float("nan"), "finite": False})
    >>> rec.losses(), rec.first_nonfinite_step
    (array([3.5, nan]), 1)
    >>> run = RunRecord.load("runs/00_clean")  # doctest: +SKIP
    """

    def __init__(self, directory: str | Path | None = None, manifest: dict | None = None):
        self.directory = Path(directory) if directory is not None else None
        self.manifest: dict = dict(manifest or {})
        self.steps: list[dict] = []
        self.layers: list[dict] = []
        self.events: list[dict] = []
        self._files: dict = {}
        # How the JSON Lines files open at the first write: "w" starts them empty (a new
        # run), "a" keeps what is there (after resume() or close()); None: no files.
        self._mode: str | None = None
        if self.directory is not None:
            self.directory.mkdir(parents=True, exist_ok=True)
            self.write_manifest()
            self._mode = "w"

    def _open(self) -> dict:
        """The JSON Lines files, opened at the first write (or flush): until then a
        resume can still keep the rows an earlier run left in the folder."""
        if not self._files and self._mode is not None:
            self._files = {s: open(self.directory / f"{s}.jsonl", self._mode) for s in STREAMS}
            self._mode = "a"  # reopened after close(): never truncate what was written
        return self._files

    def resume(self, step: int) -> dict[str, int]:
        """Continue the record at ``step``, as a resume from the checkpoint of that step.

        The rule: rows and events recorded before ``step`` stay, those at ``step`` or
        later are dropped, because the resumed run records those steps again; so the
        history reads as one run, each step once. With a folder, its files are the truth
        (a new trainer resuming into the same ``out_dir`` reads the earlier rows back
        into memory) and are appended to from then on. Returns the rows dropped per stream.

        >>> rec = RunRecord()
        >>> for s in range(4):
        ...     rec.log_step({"step": s, "loss": 1.0})
        >>> rec.resume(2), [r["step"] for r in rec.steps]
        ({'steps': 2, 'layers': 0, 'events': 0}, [0, 1])
        """
        from nanlab.atomic import atomic_write

        if self._mode is not None:
            self.close()
            for s in STREAMS:
                setattr(self, s, _read_rows(self.directory / f"{s}.jsonl"))
        dropped = {}
        for s in STREAMS:
            rows = getattr(self, s)
            keep = [r for r in rows if r.get("step") is None or r["step"] < step]
            dropped[s] = len(rows) - len(keep)
            setattr(self, s, keep)
            if self._mode is not None:
                atomic_write(self.directory / f"{s}.jsonl",
                             "".join(json.dumps(r) + "\n" for r in keep))
        if self._mode is not None:
            self._mode = "a"
        return dropped

    # -- writing -----------------------------------------------------------------
    def write_manifest(self) -> None:
        """Write ``manifest.json`` atomically: a reader (``load_run``, a crash) never sees
        half of one, however often the trainer rewrites it."""
        from nanlab.atomic import atomic_write

        if self.directory is not None:
            text = json.dumps(self.manifest, indent=2, sort_keys=True, default=str)
            atomic_write(self.directory / "manifest.json", text + "\n")

    def _append(self, stream: str, row: dict) -> None:
        getattr(self, stream).append(row)
        if self._open():
            self._files[stream].write(json.dumps(row) + "\n")

    def log_step(self, row: dict) -> None:
        self._append("steps", row)

    def log_layers(self, rows: list[dict]) -> None:
        for row in rows:
            self._append("layers", row)

    def log_event(self, kind: str, step: int, **details) -> None:
        """Log something a tool did to the run, e.g. ``log_event("skip", 12, reason=...)``."""
        self._append("events", {"kind": kind, "step": step, **details})

    def flush(self) -> None:
        for f in self._open().values():
            f.flush()

    def close(self) -> None:
        for f in self._files.values():
            f.close()
        self._files = {}

    # -- reading -----------------------------------------------------------------
    @classmethod
    def load(cls, directory: str | Path) -> RunRecord:
        """Read a run folder written by the trainer."""
        directory = Path(directory)
        rec = cls()
        rec.directory = directory
        rec.manifest = json.loads((directory / "manifest.json").read_text())
        for s in STREAMS:
            path = directory / f"{s}.jsonl"
            if path.exists():
                with open(path) as f:
                    setattr(rec, s, [json.loads(line) for line in f if line.strip()])
        return rec

    def column(self, name: str, stream: str = "steps") -> np.ndarray:
        """One field of a stream as a float array (None becomes NaN)."""
        rows = getattr(self, stream)
        return np.array([np.nan if r.get(name) is None else r[name] for r in rows], dtype=float)

    def losses(self) -> np.ndarray:
        return self.column("loss")

    def layer_names(self) -> list[str]:
        return list(dict.fromkeys(r["layer"] for r in self.layers))

    def layer_matrix(self, stat: str) -> tuple[list[str], np.ndarray, np.ndarray]:
        """(layer names, steps, array[layer, step]) of a per-layer statistic, for heat maps."""
        names = [n for n in self.layer_names()
                 if any(r["layer"] == n and r.get(stat) is not None for r in self.layers)]
        steps = np.array(sorted({r["step"] for r in self.layers}), dtype=int)
        index = {s: i for i, s in enumerate(steps)}
        row_of = {n: i for i, n in enumerate(names)}
        grid = np.full((len(names), len(steps)), np.nan)
        for r in self.layers:
            if r["layer"] in row_of and r.get(stat) is not None:
                grid[row_of[r["layer"]], index[r["step"]]] = r[stat]
        return names, steps, grid

    @property
    def first_nonfinite_step(self) -> int | None:
        """The first step whose loss or global grad norm was not finite, or None."""
        for r in self.steps:
            if not r.get("finite", True):
                return r["step"]
        return None

    def to_dataframe(self, stream: str = "steps"):
        """A pandas DataFrame of one stream (needs pandas, which nanlab does not require)."""
        import pandas as pd

        return pd.DataFrame(getattr(self, stream))

    def summary(self) -> dict:
        """A few facts about the run, JSON-safe (non-finite numbers become None)."""
        losses = self.losses()
        last = float(losses[-1]) if len(losses) else None
        return {
            "steps_run": len(self.steps),
            "final_loss": last if last is not None and math.isfinite(last) else None,
            "first_nonfinite_step": self.first_nonfinite_step,
            "events": len(self.events),
            "run_dir": str(self.directory) if self.directory is not None else None,
        }

    def __repr__(self) -> str:
        s = self.summary()
        return (f"RunRecord(steps_run={s['steps_run']}, final_loss={s['final_loss']}, "
                f"first_nonfinite_step={s['first_nonfinite_step']}, events={s['events']})")


def _read_rows(path: Path) -> list[dict]:
    """The rows of a JSON Lines file ([] when there is none); a last line torn by a crash
    in the middle of a write is left out."""
    if not path.exists():
        return []
    lines = [line for line in path.read_text().splitlines() if line.strip()]
    rows = []
    for i, line in enumerate(lines):
        try:
            rows.append(json.loads(line))
        except json.JSONDecodeError:
            if i < len(lines) - 1:
                raise
    return rows


def environment_info() -> dict:
    """Versions and code commit for the manifest.

    >>> sorted(environment_info())
    ['git_commit', 'nanlab', 'numpy', 'platform', 'python', 'torch', 'torch_threads']
    """
    import torch

    import nanlab

    return {
        "python": platform.python_version(),
        "torch": torch.__version__,
        "numpy": np.__version__,
        "nanlab": nanlab.__version__,
        "platform": platform.platform(),
        "torch_threads": torch.get_num_threads(),
        "git_commit": git_commit(),
    }


def git_commit() -> str | None:
    """The commit of the nanlab checkout, or None outside a git work tree.

    >>> commit = git_commit()
    >>> commit is None or len(commit) == 40
    True
    """
    here = Path(__file__).resolve().parent
    try:
        out = subprocess.run(["git", "rev-parse", "HEAD"], cwd=here, capture_output=True,
                             text=True, timeout=5)
    except (OSError, subprocess.SubprocessError):
        return None
    return out.stdout.strip() or None if out.returncode == 0 else None
