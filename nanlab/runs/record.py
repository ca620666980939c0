"""The run record: what happened at every step, kept in memory and as JSON Lines.

Three streams and a manifest, each a list of flat dicts:

- ``steps``:  one row per step (loss, lr, global grad norm, loss scale, finiteness, ...);
  ``finite`` is False when the loss or the global grad norm is not finite. A step the
  GradScaler skipped (its scale overflowed the gradients, e.g. fp16's step 0 at scale
  65536) has a NaN or inf grad norm but ``finite`` True and ``skipped`` True: that is the
  scaler working, not a failure
- ``layers``: one row per layer every ``record_every`` steps (grad norm, parameter
  mean / std, activation abs-max, and ``update_ratio`` = ||the step's update|| / ||the
  layer's weights before it||; folders written before it was recorded load without it)
- ``events``: anything a tool did to the run (a skipped step, a rollback, a stop)
- ``manifest``: config, seed, fault, versions, code commit and device: enough to
  reproduce the run (claim M12).

On disk a run folder holds ``manifest.json``, ``steps.jsonl``, ``layers.jsonl`` and
``events.jsonl``. A folder that already holds a run is never overwritten by a new one: a
record made there stays *pending* (it writes nothing) until the run either resumes it
(:meth:`RunRecord.resume`) or is started with ``overwrite=True``, which first moves the
old run's record, checkpoints and evidence aside (:func:`move_run_aside`) and deletes them
once the new run has safely started; else :meth:`RunRecord.claim` refuses. One process
writes a folder at a time: the trainer holds its lock while it runs
(:meth:`RunRecord.hold`, :mod:`nanlab.runs.runlock`), and rows are flushed and fsynced before
each checkpoint lands, so a checkpoint never covers rows that a crash could still lose.

Reading a folder (:meth:`RunRecord.load`) checks every file: a corrupt or foreign one is
one :class:`NanlabError` line naming the file and what is wrong. A torn last line of a JSON
Lines file (a crash in the middle of a write: no newline after it) is skipped with a
warning; any other bad line is an error naming its line number.

Non-finite numbers are written as ``NaN`` / ``Infinity`` (what Python's ``json`` and
pandas read back), because whether a value was inf or NaN is part of the evidence.

>>> rec = RunRecord()
>>> rec.log_step({"step": 0, "loss": 3.5})
>>> rec.column("loss")
array([3.5])
"""

from __future__ import annotations

import json
import math
import os
import platform
import shutil
import subprocess
import time
import warnings
from contextlib import contextmanager
from importlib import metadata
from pathlib import Path

import numpy as np

from nanlab.errors import NanlabError, StorageError
from nanlab.runs.atomic import (
    atomic_write,
    open_append,
    read_capped,
    remove_stray_temp_files,
    storage_error,
)
from nanlab.runs.runlock import RunLock

STREAMS = ("steps", "layers", "events")
RUN_FILES = ("manifest.json", *(f"{s}.jsonl" for s in STREAMS), "checkpoints", "evidence")
ASIDE_PREFIX = ".overwritten-"  # an old run moved aside by an overwrite, until it is deleted


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
        self._lock = RunLock(self.directory) if self.directory is not None else None
        self._aside: Path | None = None  # the old run an overwrite moved aside, until started()
        # How the JSON Lines files open at the first write: "w" starts them empty (a new
        # run), "a" keeps what is there (after resume() or close()); None: no files.
        self._mode: str | None = None
        # A folder holding an earlier run: nothing is written until claim() or resume().
        self.pending = self.directory is not None and holds_run(self.directory)
        if self.pending:
            self._mode = "a"
        elif self.directory is not None:
            self.directory.mkdir(parents=True, exist_ok=True)
            self.write_manifest()
            self._mode = "w"

    def claim(self, overwrite: bool = False) -> None:
        """Make the folder this run's before anything is written to it (the trainer calls
        it as a new run starts). A folder holding an earlier run is refused, in one line
        naming the ways out, unless ``overwrite``: then the old run's record, checkpoints
        and evidence are removed first (:func:`clear_run`), so none of it is replayed later.

        >>> rec = RunRecord()         # in memory: nothing to claim
        >>> rec.claim(), rec.pending
        (None, False)
        """
        if not self.pending and self._mode == "w" and _has_rows(self.directory):
            self.pending = True  # another run wrote here since this record was made
        if not self.pending:
            self.write_manifest()  # now that this run holds the folder: its manifest
            return
        if not overwrite:
            raise NanlabError(
                f"{self.directory}: already holds a run (manifest.json or record files); a new "
                "run there would mix two runs' records and checkpoints. Either start it with "
                "overwrite=True (Trainer(config, overwrite=True) replaces the old run's record, "
                "checkpoints and evidence) or resume it with "
                "trainer.run(resume_from=<checkpoint step or file>), which appends; or choose "
                "a new out_dir")
        with self._writing():
            self._aside = move_run_aside(self.directory)
        self.pending, self._mode = False, "w"
        self.write_manifest()

    def started(self) -> None:
        """The new run has safely started (its manifest and first checkpoint are on disk):
        delete the old run an overwrite moved aside. A part that cannot be deleted is left
        there, with a warning naming it."""
        aside, self._aside = self._aside, None
        if aside is not None:
            _remove_aside(aside)

    def abandon(self) -> None:
        """The new run ended before it safely started: remove what it wrote and put the old
        run an overwrite moved aside back, as it was."""
        aside, self._aside = self._aside, None
        if aside is None:
            return
        self.close()
        with self._writing():
            clear_run(self.directory)
            for name in sorted(p.name for p in aside.iterdir()):
                os.rename(aside / name, self.directory / name)
            aside.rmdir()
        warnings.warn(f"{self.directory}: the new run ended before its first checkpoint, so "
                      "the old run it was to overwrite is put back as it was", stacklevel=2)

    # -- one writer ----------------------------------------------------------------
    def hold(self) -> None:
        """Hold the folder's lock until :meth:`release` (the trainer does, while it runs):
        a second writer is refused in one line, a stale lock of a dead process taken over.
        Then the temporary files a killed write left are removed, and an old run moved
        aside by an overwrite whose new run has safely started."""
        if self._lock is None or self._lock.held:
            return
        self._lock.acquire()
        for folder in (self.directory, self.directory / "checkpoints"):
            remove_stray_temp_files(folder)
        if any((self.directory / "checkpoints").glob("ckpt_*.pt")) or \
                _has_rows(self.directory):
            for aside in self.directory.glob(f"{ASIDE_PREFIX}*"):
                if aside.is_dir() and not aside.is_symlink() and aside != self._aside:
                    _remove_aside(aside)

    def release(self) -> None:
        """Close the files and let go of the folder's lock."""
        self.close()
        if self._lock is not None:
            self._lock.release()

    @contextmanager
    def _writing(self):
        """A write outside :meth:`hold` (a manifest before the run starts) takes the lock
        for itself: it is refused while another process writes the folder."""
        if self._lock is None or self._lock.held:
            yield
            return
        with self._lock:
            yield

    def _open(self) -> dict:
        """The JSON Lines files, opened at the first write (or flush): until then a
        resume can still keep the rows an earlier run left in the folder."""
        if self.pending:
            self.claim()  # refuses: rows are never written over an earlier run's
        if not self._files and self._mode is not None:
            self._files = {s: open_append(self.directory / f"{s}.jsonl",
                                          fresh=self._mode == "w") for s in STREAMS}
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
        self.pending = False  # a resume continues the run already in the folder
        with self._writing():
            if self._mode is not None:
                self.close()
                for s in STREAMS:
                    setattr(self, s, _read_rows(self.directory / f"{s}.jsonl", s))
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
        half of one, however often the trainer rewrites it. A pending record (an earlier
        run in the folder, see :meth:`claim`) keeps it in memory until the run starts."""
        if self.directory is not None and not self.pending:
            text = json.dumps(self.manifest, indent=2, sort_keys=True, default=str)
            with self._writing():
                atomic_write(self.directory / "manifest.json", text + "\n")

    def _append(self, stream: str, row: dict) -> None:
        getattr(self, stream).append(row)
        if self._open():
            path = self.directory / f"{stream}.jsonl"
            with _named_storage_errors(path):
                self._files[stream].write(json.dumps(row) + "\n")

    def log_step(self, row: dict) -> None:
        self._append("steps", row)

    def log_layers(self, rows: list[dict]) -> None:
        for row in rows:
            self._append("layers", row)

    def log_event(self, kind: str, step: int, **details) -> None:
        """Log something a tool did to the run, e.g. ``log_event("skip", 12, reason=...)``."""
        self._append("events", {"kind": kind, "step": step, **details})

    def events_of(self, kind: str, until_step: int | None = None) -> list[dict]:
        """The events of one kind, in order; with ``until_step``, those at or before it.

        >>> rec = RunRecord()
        >>> rec.log_event("skip", 3); rec.log_event("stop", 4); rec.log_event("skip", 9)
        >>> [e["step"] for e in rec.events_of("skip", until_step=5)]
        [3]
        """
        return [e for e in self.events if e.get("kind") == kind
                and (until_step is None or e["step"] <= until_step)]

    def flush(self) -> None:
        """Flush the rows to the disk and fsync them: the trainer does before a checkpoint
        lands, so a crash never leaves a checkpoint whose earlier rows are lost."""
        for stream, f in self._open().items():
            with _named_storage_errors(self.directory / f"{stream}.jsonl"):
                f.flush()
                os.fsync(f.fileno())

    def close(self) -> None:
        for f in self._files.values():
            f.close()
        self._files = {}

    # -- reading -----------------------------------------------------------------
    @classmethod
    def load(cls, directory: str | Path) -> RunRecord:
        """Read a run folder written by the trainer, checking every file as it goes: a
        corrupt or foreign one raises one NanlabError line naming the file (and the line).

        >>> RunRecord.load("no/such/run")
        Traceback (most recent call last):
        nanlab.errors.NanlabError: no/such/run: not a nanlab run folder (no manifest.json in it)
        """
        directory = Path(directory)
        rec = cls()
        rec.directory = directory
        rec.manifest = read_manifest(directory)
        for s in STREAMS:
            setattr(rec, s, _read_rows(directory / f"{s}.jsonl", s))
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

    @property
    def crash(self) -> tuple[str | None, int | None]:
        """(message, step) of the last crash the run logged (an "error" event), or
        (None, None): ``Trainer.run`` logs one before it re-raises.

        >>> rec = RunRecord()
        >>> rec.log_event("error", 7, error="IndexError: Target 40 is out of bounds.")
        >>> rec.crash
        ('IndexError: Target 40 is out of bounds.', 7)
        """
        crash = next((e for e in reversed(self.events) if e.get("kind") == "error"), None)
        if crash is None:
            return None, None
        step = crash.get("step")
        return str(crash.get("error")), step if isinstance(step, int) else None

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


def holds_run(directory: str | Path) -> bool:
    """Whether a folder holds a run: a manifest, record files or checkpoints.

    >>> holds_run("no/such/folder")
    False
    """
    d = Path(directory)
    return any((d / n).exists() for n in ("manifest.json", *(f"{s}.jsonl" for s in STREAMS))) \
        or any((d / "checkpoints").glob("ckpt_*.pt"))


def _has_rows(directory: Path) -> bool:
    """Whether a folder's JSON Lines files hold anything (a run wrote there)."""
    return any((directory / f"{s}.jsonl").is_file() and (directory / f"{s}.jsonl").stat().st_size
               for s in STREAMS)


def move_run_aside(directory: str | Path) -> Path | None:
    """Move a folder's run (manifest, record files, checkpoints, evidence) into a hidden
    folder beside them, ``.overwritten-<pid>-<time>``; returns it (None: no run there).
    Renames in one folder cost nothing and lose nothing: if one part cannot be moved, the
    parts already moved go back and NanlabError says so, the old run intact.

    >>> move_run_aside("no/such/folder") is None
    True
    """
    d = Path(directory)
    present = [n for n in RUN_FILES if (d / n).exists() or (d / n).is_symlink()]
    if not present:
        return None
    aside = d / f"{ASIDE_PREFIX}{os.getpid()}-{time.time_ns()}"
    moved: list[str] = []
    name = aside.name
    try:
        aside.mkdir()
        for name in present:
            os.rename(d / name, aside / name)
            moved.append(name)
    except OSError as e:
        try:
            for back in reversed(moved):
                os.rename(aside / back, d / back)
            aside.rmdir()
        except OSError:
            raise NanlabError(f"{d}: the old run cannot be moved aside ({e.strerror or e}: "
                              f"{name}), and some of it is still in {aside}; nothing ran; move "
                              "it back by hand") from None
        raise NanlabError(f"{d}: the old run cannot be moved aside to overwrite it "
                          f"({e.strerror or e}: {name}); it is left intact and nothing ran; "
                          "allowed: a folder this user can write in, or another folder") from None
    return aside


def _remove_aside(aside: Path) -> None:
    """Delete an old run moved aside; what cannot be deleted stays, with a warning."""
    try:
        shutil.rmtree(aside)
    except OSError as e:
        warnings.warn(f"{aside}: the overwritten run moved here cannot be deleted "
                      f"({e.strerror or e}); the new run goes on; delete it by hand", stacklevel=3)


def clear_run(directory: str | Path) -> None:
    """Remove a run from its folder: manifest, record files, checkpoints and guard evidence
    (other files are left alone), e.g. a new run that never started before its old one is
    put back.

    >>> clear_run("no/such/folder")       # nothing there: nothing to do
    """
    d = Path(directory)
    try:
        for name in ("manifest.json", *(f"{s}.jsonl" for s in STREAMS)):
            (d / name).unlink(missing_ok=True)
        for sub in ("checkpoints", "evidence"):
            if (d / sub).is_dir():
                shutil.rmtree(d / sub)
    except OSError as e:
        raise NanlabError(f"{d}: the old run cannot be removed ({e.strerror or e}); allowed: "
                          "a folder this user can write in") from None


FOREIGN = "a nanlab run folder has a manifest written by nanlab"


def read_manifest(directory: str | Path) -> dict:
    """A run folder's ``manifest.json``, checked: UTF-8 text holding one JSON object.

    >>> read_manifest("no/such/run")
    Traceback (most recent call last):
    nanlab.errors.NanlabError: no/such/run: not a nanlab run folder (no manifest.json in it)
    """
    path = Path(directory) / "manifest.json"
    if not path.is_file():
        raise NanlabError(f"{directory}: not a nanlab run folder (no manifest.json in it)")
    manifest = _parse(path, _text(path), FOREIGN)
    if not isinstance(manifest, dict):
        raise NanlabError(f"{path}: holds a JSON {type(manifest).__name__}, not an object; "
                          f"{FOREIGN}")
    return manifest


@contextmanager
def _named_storage_errors(path: Path):
    """A failed write of the record, named for what it is (a full disk, no permission)."""
    try:
        yield
    except OSError as e:
        raise storage_error(e, path) or e from None


MANIFEST_CAP = 1 << 20  # bytes; nanlab's manifests are a few KB
ROWS_CAP = 256 << 20  # bytes per JSON Lines file: about a million steps of rows


def _text(path: Path) -> str:
    try:
        data = read_capped(path, MANIFEST_CAP if path.name == "manifest.json" else ROWS_CAP)
    except StorageError as e:
        raise NanlabError(str(e)) from None
    except OSError as e:
        raise NanlabError(f"{path}: cannot be read ({e.strerror or e})") from None
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as e:
        raise NanlabError(f"{path}: not UTF-8 text (byte {e.start}); {FOREIGN}") from None
    if path.name == "manifest.json" and not text.strip():
        raise NanlabError(f"{path}: is empty; {FOREIGN}")
    return text


def _parse(path: Path, text: str, hint: str, line: int | None = None):
    try:
        return json.loads(text)
    except (json.JSONDecodeError, RecursionError) as e:
        where = (f"line {line}" if line is not None else
                 f"line {e.lineno}, column {e.colno}" if isinstance(e, json.JSONDecodeError)
                 else "nested too deeply")
        what = f"{where} is not valid JSON" if line is not None else f"not valid JSON ({where})"
        raise NanlabError(f"{path}: {what}; {hint}") from None


_NUMBERS = {"steps": ("loss", "lr", "grad_norm", "loss_scale"),
            "layers": ("grad_norm", "param_mean", "param_std", "act_absmax", "update_ratio"),
            "events": ()}


def _row_problem(row, stream: str) -> str | None:
    """What is wrong with one row of a stream, or None."""
    if not isinstance(row, dict):
        return f"holds a JSON {type(row).__name__}, not an object"
    step = row.get("step")
    if (step is not None or stream != "events") and (
            not isinstance(step, int) or isinstance(step, bool) or step < 0):
        return f"'step' must be an integer >= 0, got {step!r}"
    if stream == "layers" and not isinstance(row.get("layer"), str):
        return f"'layer' must be a name, got {row.get('layer')!r}"
    if stream == "events" and not isinstance(row.get("kind"), str):
        return f"'kind' must be a name, got {row.get('kind')!r}"
    for key in _NUMBERS[stream]:
        v = row.get(key)
        if v is not None and (isinstance(v, bool) or not isinstance(v, (int, float))):
            return f"{key!r} must be a number or null, got {v!r}"
    batch = row.get("batch")
    if stream == "steps" and batch is not None and (
            not isinstance(batch, int) or isinstance(batch, bool) or batch < 0):
        return f"'batch' must be an integer >= 0, got {batch!r}"
    for key in ("finite", "skipped") if stream == "steps" else ():
        if key in row and not isinstance(row[key], bool):
            return f"{key!r} must be true or false, got {row[key]!r}"
    return None


def _read_rows(path: Path, stream: str = "events") -> list[dict]:
    """The rows of a JSON Lines file ([] when there is none), each checked. A last line
    torn by a crash in the middle of a write (not valid JSON, no newline after it) is left
    out with a warning; any other bad line raises NanlabError naming the file and line."""
    if not path.exists():
        return []
    text = _text(path)
    lines = text.split("\n")
    rows = []
    hint = "a nanlab run folder has JSON Lines files written by nanlab"
    for i, line in enumerate(lines):
        if not line.strip():
            continue
        if i == len(lines) - 1:  # no newline after it: perhaps torn by a crash
            try:
                row = json.loads(line)
            except (json.JSONDecodeError, RecursionError):
                warnings.warn(f"{path}: line {i + 1} is torn (a crash in the middle of a "
                              "write?); it is left out", stacklevel=3)
                continue
        else:
            row = _parse(path, line, hint, line=i + 1)
        problem = _row_problem(row, stream)
        if problem:
            raise NanlabError(f"{path}: line {i + 1}: {problem}; {hint}")
        rows.append(row)
    return rows


def nanlab_version() -> str:
    """The installed package's version (read from its metadata, so the run record does not
    import the package's front door and everything behind it).

    >>> nanlab_version() == metadata.version("nanlab")
    True
    """
    try:
        return metadata.version("nanlab")
    except metadata.PackageNotFoundError:  # a source tree on sys.path, not installed
        return "unknown"


def environment_info() -> dict:
    """Versions and code commit for the manifest.

    >>> sorted(environment_info())
    ['git_commit', 'nanlab', 'numpy', 'platform', 'python', 'torch', 'torch_threads']
    """
    import torch

    return {
        "python": platform.python_version(),
        "torch": torch.__version__,
        "numpy": np.__version__,
        "nanlab": nanlab_version(),
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
