"""A run folder read back: its record, checkpoints, fault and fixes, ready to replay.

Everything read is checked (:meth:`RunRecord.load`, :class:`CheckpointStore`): a corrupt or
foreign folder is one NanlabError line naming the file and what is wrong. Replays are
bounded by what the folder recorded, never by a number in it alone: a manifest's
``steps`` beyond the recorded rows (plus a replay's margin) is cut to them, its schedule
kept (``decay_steps``).
"""

from __future__ import annotations

from pathlib import Path

from nanlab import faults as faults_mod
from nanlab.errors import NanlabError
from nanlab.faults import fixes as fixes_mod
from nanlab.runs.checkpoint import CheckpointStore
from nanlab.runs.record import FOREIGN, RunRecord
from nanlab.train.trainer import TrainConfig

REPLAY_MARGIN = 100  # steps a replay may run past the recorded ones (diagnose's horizon)


def load_run(directory: str | Path) -> faults_mod.FaultRun:
    """Rebuild a run written by the trainer (its record, checkpoints and fault) from disk.

    >>> load_run("no/such/run")
    Traceback (most recent call last):
    nanlab.errors.NanlabError: no/such/run: not a nanlab run folder (no manifest.json in it)
    >>> _ = faults_mod.run_fault("nan_input", steps=60, out_dir="runs/nan")  # doctest: +SKIP
    >>> run = load_run("runs/nan")  # doctest: +SKIP
    >>> run.fault, run.first_bad_step  # doctest: +SKIP
    ('nan_input', 40)
    >>> print(diagnose(run))  # the same as: nanlab diagnose runs/nan  # doctest: +SKIP
    """
    directory = Path(directory)
    record = RunRecord.load(directory)
    manifest = record.manifest
    where = directory / "manifest.json"
    rows = record.steps
    for i, r in enumerate(rows):  # step numbers only go back (a rollback), never skip ahead
        if r["step"] > i:
            raise NanlabError(f"{directory / 'steps.jsonl'}: line {i + 1} is step {r['step']} "
                              f"after only {i} rows (rows missing or edited); {FOREIGN}")
    checkpoints = CheckpointStore(directory / "checkpoints")
    past = [s for s in checkpoints.steps() if s > len(rows)]
    if past:  # a checkpoint lands after the rows before it: none can be past the rows
        raise NanlabError(f"{checkpoints.path(past[-1])}: a checkpoint of step {past[-1]}, past "
                          f"the {len(rows)} recorded steps (rows lost or a file added); "
                          f"{FOREIGN}")
    limit = len(rows) + REPLAY_MARGIN  # the rows, never a file name, bound a replay
    try:
        config = TrainConfig.from_dict(dict(manifest["config"]))
        if config.steps > limit:  # a manifest alone never sets how long a replay runs
            config = config.replace(steps=limit, decay_steps=config.decay_steps or config.steps)
        config = config.replace(out_dir=None, progress=False)
        fault = manifest.get("fault") or {}
        if "sealed" in fault:  # a mystery run (nanlab.faults.mystery): the replays need it
            from nanlab.faults.mystery import unseal

            fault = unseal(fault["sealed"])
        fixes = manifest.get("fixes") or []
        if not isinstance(fixes, list) or not all(isinstance(f, str) for f in fixes):
            raise NanlabError(f"'fixes' must be a list of fix names, got {fixes!r}")
        trainer = faults_mod.build_fault_trainer(fault.get("name"), config,
                                                 fault.get("params", {}))
        for name in fixes:
            fixes_mod.get_fix(name).install(trainer)
    except NanlabError as e:
        raise NanlabError(f"{where}: {e}") from None
    except (KeyError, TypeError, ValueError, AttributeError) as e:
        raise NanlabError(f"{where}: its config or fault cannot be rebuilt ({type(e).__name__}: "
                          f"{str(e)[:120]!r}); {FOREIGN}") from None  # !r: one line
    trainer.record = record
    trainer.checkpoints = checkpoints
    trainer.allow_nonfinite = True  # a replay restores the run's NaN states on purpose
    error = next((e for e in trainer.record.events if e["kind"] == "error"), None)
    if error is not None and not (isinstance(error.get("step"), int)
                                  and error["step"] <= len(rows)):
        raise NanlabError(f"{directory / 'events.jsonl'}: its error event is at step "
                          f"{error.get('step')!r}, past the {len(rows)} recorded steps; {FOREIGN}")
    return faults_mod.FaultRun(fault.get("name"), fault.get("params", {}), fixes,
                               trainer.record, trainer,
                               error.get("error") if error else None,
                               error["step"] if error else None)
