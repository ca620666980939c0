"""Running a fault on the built-in toy run, with or without fixes; a crash is recorded."""

from __future__ import annotations

from dataclasses import dataclass

from nanlab.errors import NanlabError
from nanlab.faults.catalogue import get_fault
from nanlab.faults.levers import Injection
from nanlab.runs.record import RunRecord
from nanlab.train.trainer import TrainConfig, Trainer, stop_if_poisoned


# ---------------------------------------------------------------------------------------
# Running a fault
# ---------------------------------------------------------------------------------------
@dataclass
class FaultRun:
    """The outcome of a run with a fault (and maybe fixes): its record and any crash.

    >>> run = run_fault("nan_input", steps=60)  # doctest: +SKIP
    >>> run.first_bad_step, run.error, run.record.losses()[40]  # doctest: +SKIP
    (40, None, nan)
    >>> run.trainer  # the trainer, for locate() and replays  # doctest: +SKIP
    """

    fault: str | None
    params: dict
    fixes: list[str]
    record: RunRecord
    trainer: Trainer
    error: str | None = None
    error_step: int | None = None

    @property
    def first_bad_step(self) -> int | None:
        """The first non-finite step, or the step that crashed."""
        bad = self.record.first_nonfinite_step
        return bad if bad is not None else self.error_step


def fault_config(name: str | None, base: TrainConfig | None = None, **params) -> TrainConfig:
    """The TrainConfig of the built-in run with a fault's conditions applied.

    >>> fault_config("fp16_overflow").precision, fault_config("tiny_eps").model.norm_eps
    ('fp16', 0.0)
    """
    config = base or TrainConfig(progress=False)
    if name is None:
        return config
    fault = get_fault(name)
    return config.replace(**fault.conditions(fault.resolve(**params)))


def run_fault(name: str | None, *, fixes=(), base: TrainConfig | None = None,
              stop_when_poisoned: bool = False, callbacks=(), **params) -> FaultRun:
    """Run the built-in toy model with a fault (None = clean) and optional fixes.

    Keyword arguments are the fault's parameters first; any other TrainConfig field
    (``steps``, ``seed``, ``out_dir``, ...) may be passed too.
    A crash (e.g. an illegal label) is caught and reported in ``FaultRun.error``.
    ``stop_when_poisoned`` ends the run once a non-finite update reached the weights.
    ``callbacks`` is a list of ``(event, fn)`` pairs added to the trainer.

    >>> bad = run_fault("nan_input", steps=60)  # doctest: +SKIP
    >>> cured = run_fault("nan_input", fixes=["validate_data"], steps=60)  # doctest: +SKIP
    >>> bad.first_bad_step, cured.first_bad_step  # doctest: +SKIP
    (40, None)
    >>> late = run_fault("nan_input", at_step=90, steps=100)   # a fault parameter  # doctest: +SKIP
    """
    from nanlab.faults import fixes as fixes_mod

    fault = get_fault(name) if name is not None else None
    own = fault.params if fault else {}
    train_fields = {k: params.pop(k) for k in list(params)
                    if k not in own and k in TrainConfig.__dataclass_fields__}
    base = (base or TrainConfig(progress=False)).replace(**train_fields)
    p = fault.resolve(**params) if fault else {}
    if not fault and params:
        raise NanlabError(f"parameters {sorted(params)} given without a fault")
    config = base.replace(**fault.conditions(p)) if fault else base
    fixes = [fixes] if isinstance(fixes, str) else list(fixes)  # one name, not its letters
    fix_objs = [fixes_mod.get_fix(f) for f in fixes]
    untouched = set()
    for fix in fix_objs:
        changed = fix.configure(config)
        if changed is None:  # nothing in the config; it may still act on the built run
            untouched.add(fix.name)
        else:
            config = changed
    trainer = build_fault_trainer(name, config, p)
    for fix in fix_objs:
        done = fix.install(trainer)
        if fix.name in untouched and not done:  # e.g. amp_off on a run that is already fp32
            raise fixes_mod.NotApplicable(
                f"fix {fix.name!r} changes nothing in this run ({fix.summary}); a replay "
                f"with it would be the same run. Pick a fix that applies (matrix: n/a)")
    trainer.record.manifest["fixes"] = list(fixes)
    trainer.record.write_manifest()
    if stop_when_poisoned:
        trainer.add_callback("on_step_end", stop_if_poisoned)
    for event, fn in callbacks:
        trainer.add_callback(event, fn)
    return execute(trainer, name, p, list(fixes))


def build_fault_trainer(name: str | None, config: TrainConfig, params: dict) -> Trainer:
    """A Trainer for ``config`` (the fault's conditions already in it) with the fault's
    runtime part installed: the corrupted batches, the LR jump.

    Use it with :func:`execute` to add your own callbacks before the run starts.

    >>> config = fault_config("nan_input", at_step=20).replace(steps=30)
    >>> trainer = build_fault_trainer("nan_input", config, {"at_step": 20})
    >>> run = execute(trainer, "nan_input", {"at_step": 20})  # doctest: +SKIP
    >>> run.first_bad_step  # doctest: +SKIP
    20
    """
    trainer = Trainer(config)
    if name is None:
        return trainer
    fault = get_fault(name)
    p = fault.resolve(**params)
    trainer.record.manifest["fault"] = {"name": name, "params": p}  # written by run()
    injection = Injection(trainer.model, trainer.optimizer, trainer.batches,
                          inputs="features", labels="targets", scheduler=trainer.scheduler,
                          trainer=trainer)
    fault.on_toy(injection, p)
    fault.install(injection, p)
    trainer.batches = lambda i: injection.corrupt(i, injection.source(i))
    trainer.add_callback("on_step_start", lambda tr, info: injection.before_step(info.step))
    return trainer


def execute(trainer: Trainer, name: str | None = None, params: dict | None = None,
            fixes: list[str] | None = None) -> FaultRun:
    """Run a trainer; a crash (what a real bad batch raises) is caught and recorded.

    >>> trainer = build_fault_trainer("illegal_label", fault_config("illegal_label"),
    ...                               {})  # doctest: +SKIP
    >>> run = execute(trainer, "illegal_label")  # doctest: +SKIP
    >>> run.error_step, run.error is not None  # doctest: +SKIP
    (40, True)
    """
    try:
        trainer.run()  # a crash is logged as an "error" event with its step, then raised
    except NotImplementedError:
        raise  # a learner's unfinished callback: let the lab's check say "not done yet"
    except Exception:  # a crash while training is the run's symptom, kept in its record
        if trainer.record.crash[0] is None:
            raise  # raised before training began (a refused folder): not a symptom
    error, error_step = trainer.record.crash
    return FaultRun(name, params or {}, fixes or [], trainer.record, trainer, error, error_step)

