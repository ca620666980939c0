"""Mystery runs: a fault drawn at random, its name sealed, for a learner to find with the SOP.

An instructor makes one run folder per student (or per exam question) from a seed; the
student gets the folder, reads its record and plots, and runs ``nanlab diagnose`` /
``nanlab locate`` or their own replays; the instructor reveals or grades the answer from
the same folder. The fault's name is *sealed* in the manifest (encoded, so a glance at
``manifest.json`` does not give it away, and so that ``diagnose`` can still replay the
run); it is not encrypted: a student who decodes it has learnt base64, not the SOP.
For graded work keep the seeds and grade with :func:`reveal`.

The changed configuration stays visible (precision, learning rate, depth...), as it would
in a real incident: reading it is part of the SOP.

>>> draw(7) in POOL
True
>>> unseal(seal({"name": "nan_input", "params": {}}))["name"]
'nan_input'
"""

from __future__ import annotations

import base64
import json
import random
from collections.abc import Sequence
from pathlib import Path

from nanlab.errors import NanlabError, check_range
from nanlab.faults import FAULTS, SOP_STEPS, get_fault, run_fault
from nanlab.record import holds_run, read_manifest

SLOW = ("deep_explosion", "sigmoid_chain")  # minutes on a CPU: not for a quick exercise
POOL: tuple[str, ...] = tuple(name for name in FAULTS if name not in SLOW)
SEAL_PREFIX = "sealed:v1:"


def draw(seed: int, pool: Sequence[str] = POOL) -> str:
    """The fault of mystery number ``seed``: the same seed always draws the same fault.

    >>> draw(3) == draw(3)
    True
    """
    check_range("seed", seed, 0, integer=True)
    if not pool:
        raise NanlabError("pool is empty; give fault names, e.g. mystery.POOL")
    for name in pool:
        get_fault(name)  # a clear error for an unknown name
    return random.Random(seed).choice(list(pool))


def seal(fault: dict) -> str:
    """Encode a manifest's fault entry so that it is not readable at a glance.

    >>> seal({"name": "nan_input"}).startswith(SEAL_PREFIX)
    True
    """
    raw = json.dumps(fault, sort_keys=True).encode()[::-1]
    return SEAL_PREFIX + base64.b64encode(raw).decode()


def unseal(token: str) -> dict:
    """The fault entry a :func:`seal` token holds.

    >>> unseal(seal({"name": "tiny_eps", "params": {"eps": 0.0}}))
    {'name': 'tiny_eps', 'params': {'eps': 0.0}}
    """
    if not isinstance(token, str) or not token.startswith(SEAL_PREFIX):
        raise NanlabError(f"{str(token)[:40]!r} is not a sealed fault (it must start with "
                          f"{SEAL_PREFIX!r})")
    try:
        fault = json.loads(base64.b64decode(token[len(SEAL_PREFIX):], validate=True)[::-1])
    except (ValueError, RecursionError):  # binascii.Error, UnicodeDecodeError, JSONDecodeError
        fault = None
    if not isinstance(fault, dict) or not isinstance(fault.get("name"), str) \
            or not isinstance(fault.get("params", {}), dict):
        raise NanlabError(f"{token[:40]!r}... is a damaged sealed fault (not one that seal() "
                          "wrote); make the mystery again from its seed")
    return fault


def make(seed: int, out_dir: str | Path, *, pool: Sequence[str] = POOL, steps: int = 200,
         checkpoint_every: int = 10) -> Path:
    """Run mystery number ``seed`` into ``out_dir`` and seal its fault; returns the folder.

    The run stops once a non-finite update reaches the weights (the morning after: the
    record, the checkpoints, nothing to train on). ``nanlab diagnose`` and ``nanlab
    locate`` work on the folder as on any run folder.

    >>> folder = make(7, "runs/mystery-7")  # doctest: +SKIP
    >>> reveal(folder)["name"]  # doctest: +SKIP
    'high_lr_adam'
    """
    out_dir = Path(out_dir)
    if holds_run(out_dir):
        raise NanlabError(f"{str(out_dir)!r} already holds a run; give a new folder")
    name = draw(seed, pool)
    record = run_fault(name, steps=steps, out_dir=str(out_dir),
                       checkpoint_every=checkpoint_every, stop_when_poisoned=True).record
    record.manifest["fault"] = {"sealed": seal(record.manifest["fault"])}
    record.manifest["mystery_seed"] = seed
    record.write_manifest()
    return out_dir


def reveal(run_dir: str | Path) -> dict:
    """The answer of a mystery run folder: the fault, its SOP step, its cure.

    >>> reveal("runs/mystery-7")  # doctest: +SKIP
    {'name': 'high_lr_adam', 'params': {...}, 'summary': ..., 'sop_step': '3. divide ...', ...}
    """
    path = Path(run_dir) / "manifest.json"
    fault = read_manifest(run_dir).get("fault") or {}  # checked: one line if it is not
    if not isinstance(fault, dict):
        raise NanlabError(f"{path}: 'fault' must be an object, got {fault!r:.40}")
    try:
        if "sealed" in fault:
            fault = unseal(fault["sealed"])
        if not fault.get("name"):
            raise NanlabError("has no fault: it is a clean run")
        info = get_fault(fault["name"])
    except NanlabError as e:
        raise NanlabError(f"{path}: {e}") from None
    return {"name": info.name, "params": fault.get("params", {}), "summary": info.summary,
            "sop_step": SOP_STEPS[info.reveals], "cure": info.cure}


def grade(run_dir: str | Path, answer: str) -> str:
    """Feedback on a learner's answer (a fault name or an SOP step key such as ``"lr"``),
    compared case-insensitively, spaces around it trimmed.

    >>> grade("runs/mystery-7", "lr")  # doctest: +SKIP
    'right: the SOP step that names it is 3. divide the learning rate by 10'
    """
    truth = reveal(run_dir)
    step_key = get_fault(truth["name"]).reveals
    answer = (answer or "").strip().lower()  # " LR " is "lr", "NaN_Input" is "nan_input"
    if not answer:
        return "no answer given: name the fault, or the SOP step that reveals it " \
               f"({', '.join(SOP_STEPS)})"
    if answer == truth["name"].lower() or answer == step_key.lower():
        return f"right: the SOP step that names it is {truth['sop_step']}"
    names = {n.lower(): n for n in FAULTS}
    if answer in names and get_fault(names[answer]).reveals == step_key:
        return f"close: right SOP step ({truth['sop_step']}), but a different fault of it"
    return "not this one: go through the SOP again, in order, and replay each step"
