"""``nanlab run --resume``: the run in the folder, as its manifest stores it.

A resume continues one run, so the stored config is the config: the precision, the LR,
the fault and its parameters, the fixes and the guard all come from ``manifest.json``,
never from the command line's defaults. A setting given on the command line must agree
with the stored one; a different one is refused in one line naming each difference
(stored value, given value), because applying it would silently change the run midway
(steps 20-29 in fp32 after 0-19 in bf16, and a manifest that says fp32 for all of them).
``--steps`` is the one setting a resume may change: it extends the run (or finishes it),
and the LR schedule keeps the length it had (``decay_steps`` is pinned to the stored
``steps``), so every step's LR is the one a replay computes from the manifest.

>>> stored = TrainConfig(lr=1e-3, precision="bf16", checkpoint_every=10, steps=20)
>>> differences(stored, {"lr": 5e-3, "steps": 30}, None, {}, None, None, {})
['lr: stored 0.001, given 0.005']
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

from nanlab.errors import NanlabError
from nanlab.runs.checkpoint import CheckpointStore
from nanlab.runs.record import FOREIGN, read_manifest
from nanlab.train.config import TrainConfig
from nanlab.train.resume import refuse_nonfinite

ALLOWED = "the stored values (or leave them out), --steps N to extend the run, or a new --out"


@dataclass
class StoredRun:
    """What a run folder's manifest says was run, and its newest checkpoint.

    >>> StoredRun(TrainConfig(), None, {}, [], None, 50).fault is None
    True
    """

    config: TrainConfig
    fault: str | None
    params: dict
    fixes: list[str]
    guard: dict | None  # the Guard's settings, or None: no guard
    newest: int  # the step of the newest checkpoint, where the resume starts
    started: str | None = None  # when the run first started (kept in the manifest)


def stored_run(out: Path) -> StoredRun:
    """Read the run in ``out``: one NanlabError line if it cannot be resumed (no manifest,
    a manifest that does not rebuild, no checkpoint, a mystery's sealed fault).

    >>> stored_run(Path("no/such/run"))
    Traceback (most recent call last):
    nanlab.errors.NanlabError: no/such/run: not a nanlab run folder (no manifest.json in it)
    """
    manifest = read_manifest(out)
    where = out / "manifest.json"
    fault = manifest.get("fault") or {}
    if not isinstance(fault, dict):
        raise NanlabError(f"{where}: 'fault' must be an object, got {fault!r}; {FOREIGN}")
    if "sealed" in fault:
        raise NanlabError(f"--resume: {str(out)!r} is a mystery run (its fault is sealed); "
                          "resuming it would rewrite the learner's evidence; allowed: a run "
                          "made by nanlab run")
    try:
        config = TrainConfig.from_dict(dict(manifest["config"]))
    except NanlabError as e:
        raise NanlabError(f"{where}: {e}") from None
    except (KeyError, TypeError, ValueError) as e:
        raise NanlabError(f"{where}: its config cannot be rebuilt ({type(e).__name__}: "
                          f"{str(e)[:120]!r}); {FOREIGN}") from None  # !r: one line
    fixes, guard = manifest.get("fixes") or [], manifest.get("guard")
    if not isinstance(fixes, list) or not all(isinstance(f, str) for f in fixes):
        raise NanlabError(f"{where}: 'fixes' must be a list of fix names, got {fixes!r}")
    if guard is not None and not isinstance(guard, dict):
        raise NanlabError(f"{where}: 'guard' must be an object, got {guard!r}; {FOREIGN}")
    steps = CheckpointStore(out / "checkpoints").steps()
    if not steps:
        raise NanlabError(f"--resume: {str(out)!r} has no checkpoints to resume from; "
                          "allowed: a run folder trained with --checkpoint-every N > 0")
    params = fault.get("params") or {}
    return StoredRun(config, fault.get("name"), params if isinstance(params, dict) else {},
                     fixes, guard, steps[-1], manifest.get("started"))


def resume_flags(overwrite: bool, resume, allow_nonfinite: bool, out) -> None:
    """Refuse, in one line, the resume flags that do not go together.

    >>> resume_flags(False, None, True, "runs/r")
    Traceback (most recent call last):
    nanlab.errors.NanlabError: --allow-nonfinite is not allowed without --resume; ...
    """
    if overwrite and resume is not None:
        raise NanlabError("--overwrite and --resume are not allowed together; allowed: one")
    if allow_nonfinite and resume is None:
        raise NanlabError("--allow-nonfinite is not allowed without --resume; allowed: "
                          "--resume [STEP] --allow-nonfinite")
    if resume is not None and out is None:
        raise NanlabError("--resume needs --out, the folder of the run to resume")


def start_step(out: Path, run: StoredRun, asked: int = -1, allow_nonfinite: bool = False) -> int:
    """The checkpoint a resume starts from: the newest (``--resume``, ``asked`` -1) or the
    step asked (``--resume STEP``). One whose weights or optimizer state hold NaN or inf is
    refused in one line naming the tensors and the newest finite checkpoint before it,
    unless ``allow_nonfinite`` (``--allow-nonfinite``): a resume from it trains on NaN.

    >>> start_step(Path("r"), StoredRun(TrainConfig(), None, {}, [], None, 50), 70)
    Traceback (most recent call last):
    nanlab.errors.NanlabError: --resume 70: 'r' has no checkpoint of step 70; allowed: ...
    """
    store = CheckpointStore(out / "checkpoints")
    step = run.newest if asked < 0 else asked
    if step not in store.steps():
        raise NanlabError(f"--resume {step}: {str(out)!r} has no checkpoint of step {step}; "
                          f"allowed: one of its checkpoint steps {store.steps() or 'none'}")
    if not allow_nonfinite:
        refuse_nonfinite(store.load(step), f"--resume: {store.path(step)}", store, step,
                         override="--allow-nonfinite", step_as="--resume {}")
    return step


def _same(value):
    """A value as JSON reads it back: a tuple and the manifest's list compare equal."""
    return json.loads(json.dumps(value, default=str))


def _flat(d: dict, prefix: str = "") -> dict:
    out = {}
    for k, v in d.items():
        out.update(_flat(v, f"{prefix}{k}.") if isinstance(v, dict) else {f"{prefix}{k}": v})
    return out


def _given_config(changes: dict, fault: str | None, params: dict, fixes: list[str]):
    """The config this command line would run as a new run (the fault's conditions and
    the fixes applied): a resume that repeats the first command line agrees with it."""
    from nanlab.faults import fault_config, get_fix

    config = fault_config(fault, TrainConfig().replace(**changes), **params)
    for name in fixes:
        config = get_fix(name).configure(config) or config
    return config


def differences(stored: TrainConfig, changes: dict, fault: str | None, params: dict,
                fixes: list[str] | None, guard: dict | None, run: dict) -> list[str]:
    """Each setting given on the command line that differs from the stored run, in words.

    ``changes`` are the ``--config`` settings given; ``fault`` and ``params`` the
    ``--fault`` / ``--set`` given (None: not given); ``fixes`` the ``--fix`` names given
    (None: not given); ``guard`` the Guard settings of the guard flags given (None: not
    given); ``run`` the stored fault, params, fixes and guard (:class:`StoredRun` fields).

    >>> differences(TrainConfig(precision="bf16"), {"precision": "fp32"}, None, {}, None,
    ...             None, {})
    ["precision: stored 'bf16', given 'fp32'"]
    """
    found = []
    if fault is not None and fault != run.get("fault"):
        found.append(f"fault: stored {run.get('fault') or 'none'}, given {fault}")
    elif fault is not None:
        from nanlab.faults import get_fault

        ours, theirs = _same(get_fault(fault).resolve(**params)), _same(run.get("params", {}))
        found += [f"fault {fault}.{k}: stored {theirs.get(k)!r}, given {ours.get(k)!r}"
                  for k in sorted(set(ours) | set(theirs)) if ours.get(k) != theirs.get(k)]
    if fixes is not None and fixes != run.get("fixes", []):
        found.append(f"fixes: stored {', '.join(run.get('fixes', [])) or 'none'}, given "
                     f"{', '.join(fixes) or 'none'}")
    if guard is not None:
        theirs = run.get("guard")
        if theirs is None:
            found.append(f"guard: stored none, given --guard {guard.get('mode')}")
        else:
            ours, theirs = _same(guard), _same(theirs)
            found += [f"guard {k}: stored {theirs.get(k)!r}, given {ours.get(k)!r}"
                      for k in sorted(set(ours) | set(theirs)) if ours.get(k) != theirs.get(k)]
    given = _flat(_given_config(
        changes, fault if fault is not None else run.get("fault"),
        params if fault is not None else run.get("params", {}),
        fixes if fixes is not None else run.get("fixes", [])).to_dict())
    have = _flat(stored.to_dict())
    for key in sorted(_flat(changes)):
        if key != "steps" and _same(given[key]) != _same(have[key]):
            found.append(f"{key}: stored {have[key]!r}, given {given[key]!r}")
    return found


def resume_config(out: Path, run: StoredRun, changes: dict, fault: str | None, params: dict,
                  fixes: list[str] | None, guard: dict | None) -> TrainConfig:
    """The config a resume runs: the stored one, ``--steps`` applied. Refuses, in one line,
    any other setting that differs from the stored run, and ``--steps`` below the newest
    checkpoint (those steps have run: nothing would, and the record would say otherwise).

    >>> run = StoredRun(TrainConfig(steps=20), None, {}, [], None, 20)
    >>> resume_config(Path("r"), run, {"steps": 30}, None, {}, None, None).decay_steps
    20
    """
    found = differences(run.config, changes, fault, params, fixes, guard,
                        {"fault": run.fault, "params": run.params, "fixes": run.fixes,
                         "guard": run.guard})
    if found:
        raise NanlabError(f"--resume: {str(out)!r} continues the run stored in its manifest.json, "
                          f"and this command changes it ({'; '.join(found)}); a resume that "
                          f"applied it would change the run midway; allowed: {ALLOWED}")
    config = run.config
    steps = changes.get("steps", config.steps)
    if steps < run.newest:
        raise NanlabError(f"--resume --steps {steps}: {str(out)!r} has run {run.newest} steps "
                          f"already (its newest checkpoint); allowed: --steps {run.newest} or more "
                          "to extend it, or leave --steps out to finish it")
    if steps != config.steps and config.decay_steps is None and config.schedule == "cosine":
        config = config.replace(decay_steps=config.steps)  # the schedule keeps its length
    return config.replace(steps=steps)


__all__ = ["StoredRun", "differences", "resume_config", "resume_flags", "start_step",
           "stored_run"]
