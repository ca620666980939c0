"""Checkpoints: written atomically, loaded with ``torch.load(weights_only=True)``.

Atomic means a crash mid-write never leaves a half checkpoint behind: the state goes
to a temporary file in the same folder, which is then renamed over the final name
(``os.replace`` is atomic on POSIX and Windows; :mod:`nanlab.runs.atomic` does it).
``weights_only=True`` means loading a checkpoint cannot run code hidden in it, so only
tensors and plain Python values (dicts, lists, numbers, strings) go in.

Reading one checks it: an empty, truncated or foreign file, or one holding objects that
``weights_only=True`` refuses, is one :class:`NanlabError` line naming the file. A file in
the folder not named like the store's own (``ckpt_final.pt``) is not one of its steps.

Without a folder, checkpoints are kept in memory as the bytes ``torch.save`` writes,
so the notebook path and the disk path share one format.

``keep`` bounds how many are kept (the newest k, as Hugging Face's ``save_total_limit``),
but never at the cost of the last good state: the newest checkpoint whose weights and
optimizer state are all finite is kept in addition (:meth:`CheckpointStore.rotate`). A
run that trains on NaN for longer than k checkpoints would otherwise rotate every
healthy checkpoint away, and a resume could only reload NaN.

>>> store = CheckpointStore()          # in memory
>>> store.save(0, {"x": torch.ones(2)})
>>> store.load(0)["x"]
tensor([1., 1.])
"""

from __future__ import annotations

import io
import os
import re
import stat
import zipfile
from pathlib import Path

import torch

from nanlab.errors import NanlabError
from nanlab.runs.atomic import atomic_torch_save


def atomic_save(obj, path: str | Path) -> None:
    """torch.save to ``path`` through a temp file and a rename (:mod:`nanlab.runs.atomic`).

    A crash in the middle of a save leaves the old file (or none), never half a file.

    >>> import torch
    >>> atomic_save({"w": torch.ones(2)}, "ckpt/ckpt_000000.pt")
    >>> safe_load("ckpt/ckpt_000000.pt")["w"]
    tensor([1., 1.])
    """
    atomic_torch_save(obj, path)


def safe_load(source: str | Path | bytes) -> dict:
    """Load a checkpoint with ``weights_only=True`` (no code runs), onto the CPU.

    ``source`` is a path or the bytes of a saved checkpoint.

    >>> import io, torch
    >>> buf = io.BytesIO(); torch.save({"step": 3}, buf)
    >>> safe_load(buf.getvalue())
    {'step': 3}

    A file that is not a readable checkpoint, or one that holds objects ``weights_only``
    refuses, raises one NanlabError line (it is never loaded another way).

    >>> safe_load(b"not a checkpoint")  # doctest: +ELLIPSIS
    Traceback (most recent call last):
    nanlab.errors.NanlabError: checkpoint: not a readable checkpoint (empty, truncated ...)
    """
    name = "checkpoint" if isinstance(source, bytes) else str(source)
    f = io.BytesIO(source) if isinstance(source, bytes) else source
    _refuse_unsafe_file(f, name)
    try:
        return torch.load(f, map_location="cpu", weights_only=True)
    except OSError as e:
        raise NanlabError(f"{name}: cannot be read ({e.strerror or e})") from None
    except Exception as e:  # torch raises many kinds for a bad file; none is a traceback
        if re.search(r"Unsupported global|allowed global|Unsupported class", str(e)):
            raise NanlabError(
                f"{name}: refused for safety: it holds objects that "
                "torch.load(weights_only=True) does not allow (a nanlab checkpoint holds only "
                "tensors and plain Python values), so it is not loaded") from None
        raise NanlabError(f"{name}: not a readable checkpoint (empty, truncated or not "
                          f"written by torch.save: {type(e).__name__})") from None


def _refuse_unsafe_file(f, name: str) -> None:
    """Refuse, before torch reads it, what could hang or exhaust memory: a path that is not
    a regular file (a FIFO, a device), or an archive with compressed entries (torch.save
    stores them uncompressed, so a small file that inflates to gigabytes is not ours)."""
    if not isinstance(f, io.BytesIO):
        try:
            regular = stat.S_ISREG(os.stat(f).st_mode)
        except OSError as e:
            raise NanlabError(f"{name}: cannot be read ({e.strerror or e})") from None
        if not regular:
            raise NanlabError(f"{name}: is not a regular file; a checkpoint is a file "
                              "torch.save wrote")
    try:
        with zipfile.ZipFile(f) as archive:
            packed = [i.filename for i in archive.infolist()
                      if i.compress_type != zipfile.ZIP_STORED]
    except (zipfile.BadZipFile, OSError, ValueError):
        packed = []  # not an archive: torch.load says what it is
    finally:
        if isinstance(f, io.BytesIO):
            f.seek(0)
    if packed:
        raise NanlabError(f"{name}: refused: {len(packed)} compressed entr"
                          f"{'y' if len(packed) == 1 else 'ies'} ({packed[0]}); torch.save "
                          "writes them uncompressed, and a compressed one can inflate "
                          "without bound")


def nonfinite_tensors(state, prefix: str = "") -> list[str]:
    """Where a (nested) state holds a non-finite float, in words: one entry per tensor.

    A checkpoint is only a good place to go back to if every floating-point tensor in it
    is finite: the weights, and the optimizer state too (Adam's ``exp_avg_sq`` overflows
    to inf while the weights are still finite, and then freezes or poisons every later
    update).

    >>> v = torch.tensor([1.0, float("inf")])
    >>> nonfinite_tensors({"model": {"w": torch.ones(2)},
    ...                    "optimizer": {"state": {0: {"exp_avg_sq": v}}}})
    ['optimizer.state.0.exp_avg_sq: 1 inf, 0 NaN of 2']
    """
    found = []
    if isinstance(state, torch.Tensor):
        if state.is_floating_point() and not bool(torch.isfinite(state).all()):
            nan = int(torch.isnan(state).sum())
            inf = int(torch.isinf(state).sum())
            found.append(f"{prefix}: {inf} inf, {nan} NaN of {state.numel()}")
    elif isinstance(state, dict):
        for key, value in state.items():
            found += nonfinite_tensors(value, f"{prefix}.{key}" if prefix else str(key))
    elif isinstance(state, (list, tuple)):
        for i, value in enumerate(state):
            found += nonfinite_tensors(value, f"{prefix}[{i}]")
    return found


STATE_PARTS = ("model", "optimizer", "scheduler", "scaler")  # what a resume loads


def nonfinite_state(state) -> list[str]:
    """:func:`nonfinite_tensors` of what a resume loads from a trainer's checkpoint: the
    weights, the optimizer state (and the schedule and GradScaler), not the RNG state.
    A dict without those parts is checked whole.

    >>> nonfinite_state({"model": {"w": torch.tensor([1.0, float("nan")])}, "step": 3})
    ['model.w: 0 inf, 1 NaN of 2']
    """
    if isinstance(state, dict) and any(k in state for k in STATE_PARTS):
        state = {k: state[k] for k in STATE_PARTS if k in state}
    return nonfinite_tensors(state)


CHECKPOINT_NAME = re.compile(r"ckpt_(\d{6,})\.pt")


class CheckpointStore:
    """Checkpoints by step number, in a folder or in memory.

    ``directory=None`` keeps them in memory (as bytes); a folder holds
    ``ckpt_000050.pt``-style files written with :func:`atomic_save`. ``keep=0`` keeps every
    checkpoint; ``keep=k`` the newest k after each save, plus the newest finite one
    (:meth:`rotate`).

    >>> store = CheckpointStore()                  # or CheckpointStore("runs/x/checkpoints")
    >>> store.save(0, {"step": 0}); store.save(50, {"step": 50})
    >>> store.steps(), store.nearest(70)
    ([0, 50], 50)
    >>> store.load(50)["step"]
    50
    """

    def __init__(self, directory: str | Path | None = None, keep: int = 0):
        self.directory = Path(directory) if directory is not None else None
        self._memory: dict[int, bytes] = {}
        self.keep = keep
        self._finite: dict[int, bool] = {}  # step -> all finite (known from the save or a load)
        self.kept_finite: int | None = None  # the last rotation kept this step beyond keep

    def path(self, step: int) -> Path:
        if self.directory is None:
            raise NanlabError("this checkpoint store keeps checkpoints in memory, not on disk")
        return self.directory / f"ckpt_{step:06d}.pt"

    def save(self, step: int, state: dict) -> None:
        """Write the checkpoint of ``step`` (whole or not at all), then :meth:`rotate`."""
        self._finite.pop(step, None)  # a new state at this step (a rollback saves again)
        finite = not nonfinite_state(state) if self.keep else None  # from the state in hand
        if self.directory is None:
            buf = io.BytesIO()
            torch.save(state, buf)
            self._memory[step] = buf.getvalue()
        else:
            atomic_save(state, self.path(step))
        if self.keep:
            self._finite[step] = finite
            self.rotate()

    def is_finite(self, step: int) -> bool:
        """Whether every tensor a resume loads from ``step`` is finite (loaded once, cached).

        >>> store = CheckpointStore()
        >>> store.save(0, {"model": {"w": torch.ones(1)}})
        >>> store.save(5, {"model": {"w": torch.tensor([float("inf")])}})
        >>> store.is_finite(0), store.is_finite(5)
        (True, False)
        """
        if step not in self._finite:
            self._finite[step] = not nonfinite_state(self.load(step))
        return self._finite[step]

    def newest_finite(self, before: int | None = None) -> int | None:
        """The newest step (below ``before``, if given) whose checkpoint is all finite, or
        None: where a resume can go back to after a run went NaN.

        >>> store = CheckpointStore()
        >>> store.save(0, {"model": {"w": torch.ones(1)}})
        >>> store.save(5, {"model": {"w": torch.tensor([float("nan")])}})
        >>> store.newest_finite(), store.newest_finite(before=0)
        (0, None)
        """
        earlier = [s for s in self.steps() if before is None or s < before]
        return next((s for s in reversed(earlier) if self.is_finite(s)), None)

    def rotate(self) -> list[int]:
        """Delete all but the newest ``keep`` checkpoints, never the newest finite one.

        The newest finite checkpoint is found before anything is deleted and is never a
        candidate, and each delete is one ``os.unlink`` (atomic): a crash mid-rotation
        leaves more checkpoints, never fewer finite ones. ``kept_finite`` names the step
        kept beyond ``keep`` for being the last finite one (None if the newest ``keep``
        hold one). Returns the deleted steps. Hugging Face's Trainer keeps its best
        checkpoint beyond ``save_total_limit`` the same way (``_sorted_checkpoints``).

        >>> store = CheckpointStore(keep=1)
        >>> store.save(0, {"model": {"w": torch.ones(1)}})
        >>> for step in (5, 10):
        ...     store.save(step, {"model": {"w": torch.tensor([float("nan")])}})
        >>> store.steps(), store.kept_finite
        ([0, 10], 0)
        """
        steps = self.steps()
        if not self.keep or len(steps) <= self.keep:
            self.kept_finite = None
            return []
        newest = steps[-self.keep:]
        good = self.newest_finite()
        self.kept_finite = good if good is not None and good not in newest else None
        doomed = [s for s in steps if s not in newest and s != good]
        for step in doomed:  # oldest first
            if self.directory is None:
                del self._memory[step]
            else:
                self.path(step).unlink(missing_ok=True)
            self._finite.pop(step, None)
        return doomed

    def steps(self) -> list[int]:
        if self.directory is None:
            return sorted(self._memory)
        if not self.directory.is_dir():
            return []
        # only the store's own names: a stray ckpt_final.pt or a temp file is not a step
        found = (CHECKPOINT_NAME.fullmatch(p.name) for p in self.directory.glob("ckpt_*.pt"))
        return sorted(int(m.group(1)) for m in found if m)

    def load(self, step: int) -> dict:
        """The checkpoint of ``step``, checked (:func:`safe_load`; it must hold a dict)."""
        available = self.steps()
        if step not in available:
            raise NanlabError(
                f"no checkpoint at step={step}; available steps: {available or 'none'}"
            )
        state = safe_load(self._memory[step] if self.directory is None else self.path(step))
        if not isinstance(state, dict):
            where = self.path(step) if self.directory is not None else f"checkpoint {step}"
            raise NanlabError(f"{where}: holds a {type(state).__name__}, not a checkpoint's dict "
                              "of state")
        return state

    def nearest(self, step: int) -> int:
        """The latest checkpoint at or before ``step`` (a checkpoint at step k holds the
        state before step k runs)."""
        earlier = [s for s in self.steps() if s <= step]
        if not earlier:
            raise NanlabError(
                f"no checkpoint at or before step={step}; available steps: "
                f"{self.steps() or 'none'} (set checkpoint_every > 0 to keep some)"
            )
        return earlier[-1]
