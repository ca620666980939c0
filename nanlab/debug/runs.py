"""A run folder read back: its record, checkpoints, fault and fixes, ready to replay."""

from __future__ import annotations

from pathlib import Path

from nanlab import faults as faults_mod
from nanlab.checkpoint import CheckpointStore
from nanlab.errors import NanlabError
from nanlab.faults import fixes as fixes_mod
from nanlab.record import RunRecord
from nanlab.train import TrainConfig


def load_run(directory: str | Path) -> faults_mod.FaultRun:
    """Rebuild a run written by the trainer (its record, checkpoints and fault) from disk.

    >>> _ = faults_mod.run_fault("nan_input", steps=60, out_dir="runs/nan")  # doctest: +SKIP
    >>> run = load_run("runs/nan")  # doctest: +SKIP
    >>> run.fault, run.first_bad_step  # doctest: +SKIP
    ('nan_input', 40)
    >>> print(diagnose(run))  # the same as: nanlab diagnose runs/nan  # doctest: +SKIP
    """
    directory = Path(directory)
    if not (directory / "manifest.json").is_file():
        raise NanlabError(f"{str(directory)!r} is not a nanlab run folder "
                          "(no manifest.json in it)")
    record = RunRecord.load(directory)
    manifest = record.manifest
    config = TrainConfig.from_dict(manifest["config"]).replace(out_dir=None, progress=False)
    fault = manifest.get("fault") or {}
    if "sealed" in fault:  # a mystery run (nanlab.faults.mystery): the replays still need the fault
        from nanlab.faults.mystery import unseal

        fault = unseal(fault["sealed"])
    trainer = faults_mod.build_fault_trainer(fault.get("name"), config, fault.get("params", {}))
    for name in manifest.get("fixes") or []:
        fixes_mod.get_fix(name).install(trainer)
    trainer.record = record
    trainer.checkpoints = CheckpointStore(directory / "checkpoints")
    error = next((e for e in trainer.record.events if e["kind"] == "error"), None)
    return faults_mod.FaultRun(fault.get("name"), fault.get("params", {}),
                               manifest.get("fixes") or [], trainer.record, trainer,
                               error["error"] if error else None,
                               error["step"] if error else None)
