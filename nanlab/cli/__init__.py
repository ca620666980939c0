"""The ``nanlab`` command line: quick checks and instructor tools without Jupyter.

Beside it: ``parse`` (typed ``--config`` and ``--set`` values) and ``resume`` (``nanlab
run --resume``: the stored run's config, a changed setting refused).

    nanlab run --steps 200 --precision fp16 --json
    nanlab run --fault nan_input --set at_step=20 --guard recover --lr 1e-3
    nanlab course build

Errors in the user's input are printed as one line (what was wrong, the value, what is
allowed) and exit with status 2, without a traceback. ``nanlab run`` ends with an exit
code a script can act on (``EXIT_CODES``): named, fixed numbers, in the way Megatron-LM's
rerun state machine (``megatron/core/rerun_state_machine.py``) tells its job scheduler
what to do with ``EXIT_CODE_RESUME_TO_DISAMBIGUATE = 16`` and
``EXIT_CODE_FAILED_ON_RESULT_VALIDATION = 17``.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import sys
import tempfile
import time
from pathlib import Path

from nanlab.cli.parse import SEED_MAX, finish_parser, parse_config, parse_fault_params, parse_value
from nanlab.errors import (
    TERMINATED_STATUS,
    NanlabError,
    StorageError,
    Terminated,
    check_range,
    error_line,
)

# -- exit codes: an interface, so the numbers never change ------------------------------------
EXIT_CODE_OK: int = 0  # healthy; or every non-finite step was handled by the guard ("guarded")
EXIT_CODE_BAD_INPUT: int = 2  # a bad value or usage error (argparse's too): nothing ran
EXIT_CODE_NONFINITE: int = 3  # a non-finite update reached the weights and nothing guarded it
EXIT_CODE_CRASHED: int = 4  # an exception inside training, recorded as an "error" event
EXIT_CODE_GUARD_GAVE_UP: int = 5  # --guard recover ran out of rollbacks ("give_up" event)
EXIT_CODE_GUARD_STOPPED: int = 6  # the guard's stop-loss ended the run on a bad step
EXIT_CODE_STORAGE: int = 7  # the run folder could not be written (full disk, permission)
EXIT_CODE_INTERRUPTED: int = 130  # Ctrl-C (128 + SIGINT, the shell's convention)
EXIT_CODE_TERMINATED: int = TERMINATED_STATUS  # 143, SIGTERM (128 + 15): saved, resumable
EXIT_CODES = {"healthy": EXIT_CODE_OK, "guarded": EXIT_CODE_OK,
              "bad_input": EXIT_CODE_BAD_INPUT, "nonfinite": EXIT_CODE_NONFINITE,
              "crashed": EXIT_CODE_CRASHED, "guard_gave_up": EXIT_CODE_GUARD_GAVE_UP,
              "guard_stopped": EXIT_CODE_GUARD_STOPPED, "storage": EXIT_CODE_STORAGE,
              "interrupted": EXIT_CODE_INTERRUPTED,
              "terminated": EXIT_CODE_TERMINATED}
EXIT_HELP = """Exit codes (the outcome is in --json too):
  0  healthy / guarded   finished; any non-finite step was skipped or rolled back
  2  bad_input           a bad value or usage; nothing ran
  3  nonfinite           a non-finite update reached the weights, unguarded
  4  crashed             an exception inside training (an "error" event)
  5  guard_gave_up       --guard recover ran out of rollbacks (a "give_up" event)
  6  guard_stopped       the guard's stop-loss stopped the run on a bad step
  7  storage             the run folder could not be written (no space left, no
                         permission, not a regular file): not a training failure;
                         fix the disk, then resume with --resume
  130 interrupted        Ctrl-C (a final checkpoint; resume with --resume)
  143 terminated         SIGTERM, e.g. from Slurm or Kubernetes (a final checkpoint after
                         the step in progress; resume with --resume)"""


class _Parser(argparse.ArgumentParser):
    """argparse with nanlab's errors: one line on stderr, exit status 2, no usage dump."""

    def error(self, message):
        self.exit(EXIT_CODE_BAD_INPUT, f"nanlab: error: {message} (see: {self.prog} --help)\n")


class _ConfigFlag(argparse.Action):
    """``--lr X`` is ``--config lr=X``: one typed parser, one order, one duplicate check."""

    def __call__(self, parser, namespace, values, option_string=None):
        items = list(getattr(namespace, "config", None) or [])  # never the shared default
        items.append(f"{self.const}={values}" if self.const else values)
        namespace.config = items


def _json_safe(value):
    """Non-finite floats become None so that the output is strict JSON."""
    if isinstance(value, float) and not math.isfinite(value):
        return None
    if isinstance(value, dict):
        return {k: _json_safe(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_json_safe(v) for v in value]
    return value


def _int_arg(name: str, low: int, high: int | None = None):
    """An argparse type: a strict integer within bounds, the error in nanlab's words."""
    def parse(text: str) -> int:
        try:
            value = parse_value(name, text, int)
            check_range(name, value, low, high, integer=True)
        except NanlabError as e:
            raise argparse.ArgumentTypeError(str(e)) from None
        return value
    parse.__name__ = name
    return parse


# -- the run folder -------------------------------------------------------------------------
def _prepare_out(text: str | None, flag: str = "--out",
                 existing: bool = False) -> tuple[Path, list[Path]]:
    """The run folder, checked and made before anything runs; and the folders made.
    ``existing``: a folder holding a run is allowed (--overwrite, --resume)."""
    if text is None:
        base = Path("runs") / time.strftime("run-%Y%m%d-%H%M%S")
        path, n = base, 1
        while path.exists():
            n += 1
            path = base.with_name(f"{base.name}-{n}")
    elif not text.strip():
        raise NanlabError(f"{flag} {text!r} is empty; allowed: a folder name, e.g. runs/r1")
    else:
        path = Path(text)
    made: list[Path] = []
    try:
        if path.exists() and not path.is_dir():
            raise NanlabError(f"{flag} {str(path)!r} is a file, not a folder; allowed: a new "
                              "folder, or an empty one")
        if not existing and path.is_dir() and any((path / n).exists() for n in
                                 ("manifest.json", "steps.jsonl", "checkpoints")):
            raise NanlabError(f"{flag} {str(path)!r} already holds a run (a second run there "
                              "would mix two runs' records and checkpoints); allowed: a new "
                              "folder, an empty one, --overwrite or --resume")
        made = [p for p in (path, *path.parents) if not p.exists()]
        path.mkdir(parents=True, exist_ok=True)
        tempfile.TemporaryFile(dir=path).close()  # can we write in it?
    except OSError as e:
        _remove_empty(made)
        raise NanlabError(f"{flag} {str(path)!r} cannot be written ({e.strerror or e}); "
                          "allowed: a folder this user can create and write in") from None
    return path, made


def _remove_empty(folders: list[Path]) -> None:
    """Remove the folders made for a run that never started (deepest first; only if empty)."""
    for folder in folders:
        try:
            folder.rmdir()
        except OSError:
            return


# -- the outcome of a run -------------------------------------------------------------------
def run_outcome(run) -> tuple[str, int, str]:
    """What a finished run's exit code is: ``(outcome, exit code, reason)``, read from its
    record (a :class:`nanlab.faults.FaultRun` or a :class:`nanlab.runs.record.RunRecord`).

    In order: the storage failed (7), crashed (4), guard gave up (5), guard stopped (6),
    non-finite (3, as :func:`nanlab.analysis.judge.judge` says: an update reached the
    weights, or the last steps were all non-finite), guarded (0: every non-finite step
    skipped or rolled back), healthy (0).

    >>> from nanlab.runs.record import RunRecord
    >>> rec = RunRecord()
    >>> rec.log_step({"step": 0, "loss": 3.5, "finite": True, "skipped": False})
    >>> run_outcome(rec)
    ('healthy', 0, 'every step finite (1 step)')
    >>> rec.log_step({"step": 1, "loss": float("nan"), "finite": False, "skipped": False})
    >>> run_outcome(rec)
    ('nonfinite', 3, 'non-finite at step 1')
    """
    from nanlab.analysis.judge import judge

    record = getattr(run, "record", run)
    events = record.events
    crash = next((e for e in events if e["kind"] == "error"), None)
    error = getattr(run, "error", None) or (crash or {}).get("error")
    if (crash or {}).get("storage"):
        return "storage", EXIT_CODE_STORAGE, f"stopped at step {crash.get('step')}: {error}"
    if error:
        step = getattr(run, "error_step", None)
        step = step if step is not None else (crash or {}).get("step")
        return "crashed", EXIT_CODE_CRASHED, f"crashed at step {step}: {error}"
    gave_up = [e for e in events if e["kind"] == "give_up"]
    if gave_up:
        return "guard_gave_up", EXIT_CODE_GUARD_GAVE_UP, str(gave_up[-1].get("reason"))
    stops = [str(e.get("reason", "")) for e in events if e["kind"] == "stop"]
    stops = [r.removeprefix("guard: ") for r in stops if r.startswith("guard:")]
    if stops:
        return "guard_stopped", EXIT_CODE_GUARD_STOPPED, f"stop-loss: {stops[-1]}"
    if record.steps:
        verdict = judge(run)
        if verdict.kind == "nonfinite":
            return "nonfinite", EXIT_CODE_NONFINITE, verdict.reason
    bad = [r for r in record.steps if not r.get("finite", True)]
    if bad:
        return "guarded", EXIT_CODE_OK, (f"{len(bad)} non-finite step(s) from step "
                                         f"{bad[0]['step']}, each skipped or rolled back")
    n = len(record.steps)
    return "healthy", EXIT_CODE_OK, f"every step finite ({n} step{'s' if n != 1 else ''})"


def _flat(d: dict, prefix: str = "") -> dict:
    out = {}
    for k, v in d.items():
        out.update(_flat(v, f"{prefix}{k}.") if isinstance(v, dict) else {f"{prefix}{k}": v})
    return out


def _summary(run, guard, asked) -> dict:
    """What ran, read from the finished run: its trainer, manifest and record."""
    record, trainer = run.record, run.trainer
    config, rows = trainer.config, record.steps
    outcome, code, reason = run_outcome(run)
    before, after = _flat(asked.to_dict()), _flat(config.to_dict())
    last = rows[-1] if rows else {}
    final = last.get("loss")
    fault = record.manifest.get("fault") or {}
    return {
        "outcome": outcome, "exit_code": code, "reason": reason,
        "steps_run": trainer.step, "steps": config.steps, "steps_computed": len(rows),
        "steps_discarded": len(rows) - trainer.step,
        "rollbacks": sum(e["kind"] == "rollback" for e in record.events),
        "final_loss": final if isinstance(final, float) and math.isfinite(final) else None,
        "final_step": last.get("step"), "first_nonfinite_step": record.first_nonfinite_step,
        "events": len(record.events), "run_dir": str(record.directory),
        "fault": run.fault, "fault_params": fault.get("params", {}), "fixes": run.fixes,
        "error": run.error, "error_step": run.error_step, "first_bad_step": run.first_bad_step,
        "guard": guard.summary() if guard else None,
        "guard_settings": record.manifest.get("guard"),
        "stop_reason": record.manifest.get("stop_reason"),
        "device": record.manifest.get("device"), "precision": config.precision,
        "seed": config.seed, "changed_by_fault": {k: [before[k], v] for k, v in after.items()
                                                  if before.get(k) != v},
        "config": config.to_dict(),
    }


def _print_summary(s: dict) -> None:
    c = s["config"]
    print(f"ran {s['steps_run']} of {s['steps']} steps on {s['device']}: precision "
          f"{s['precision']}, seed {s['seed']}, {c['optimizer']} lr {c['lr']:g}, warmup "
          f"{c['warmup_steps']}, checkpoint every {c['checkpoint_every']}")
    if s["steps_discarded"]:
        print(f"  {s['steps_computed']} steps computed, {s['steps_discarded']} discarded by "
              f"{s['rollbacks']} rollback{'s' if s['rollbacks'] != 1 else ''}")
    if s["fault"]:
        params = ", ".join(f"{k}={v!r}" for k, v in s["fault_params"].items()) or "no parameters"
        print(f"fault: {s['fault']} ({params}); fixes: {', '.join(s['fixes']) or 'none'}")
    if s["changed_by_fault"]:
        changes = "; ".join(f"{k}: {a} -> {b}" for k, (a, b) in s["changed_by_fault"].items())
        print(f"  changed by the fault{' and fixes' if s['fixes'] else ''}: {changes}")
    final = "nan or inf" if s["final_loss"] is None else f"{s['final_loss']:.6g}"
    print(f"final loss: {final} (step {s['final_step']})")
    bad = s["first_nonfinite_step"]
    print(f"first non-finite step: {bad if bad is not None else 'none'}")
    if s["error"] and s["outcome"] != "storage":  # the outcome line names a storage failure
        print(f"crashed at step {s['error_step']}: {s['error']}")
    if s["guard"]:
        g, mode = s["guard"], s["guard_settings"] or {}
        spike = f", spike {mode['spike']}" if mode.get("spike") else ""
        print(f"guard {mode.get('mode')}{spike}: {g['nonfinite']} non-finite, {g['spike']} "
              f"spike(s), {g['skip']} skipped, {g['rollback']} rollback"
              f"{'s' if g['rollback'] != 1 else ''}, {g['stop']} stop(s), "
              f"{g['transient']} transient; evidence kept: {g['evidence']}")
    if s["stop_reason"]:
        print(f"stopped: {s['stop_reason']}")
    print(f"outcome: {s['outcome']} (exit {s['exit_code']}): {s['reason']}")
    print(f"run directory: {s['run_dir']}")


def _make_guard(args, config):
    if not (args.guard or args.spike):
        for flag, given in (("--rerun", args.rerun), ("--max-rollbacks", args.max_rollbacks)):
            if given not in (None, False):
                raise NanlabError(f"{flag} is not allowed without a guard; allowed: --guard "
                                  f"stop|skip|recover (or --spike skip|recover) with {flag}")
        return None
    from nanlab.guard import Guard

    extra = {} if args.max_rollbacks is None else {"max_rollbacks": args.max_rollbacks}
    guard = Guard(args.guard or "skip", spike=args.spike, rerun=args.rerun, **extra)
    if "recover" in (guard.mode, guard.spike) and not config.checkpoint_every:
        raise NanlabError("checkpoint_every=0 is not allowed with a recovering guard (it rolls "
                          "back to checkpoints); allowed: --checkpoint-every N > 0, or --guard "
                          "stop|skip")
    if args.max_rollbacks is not None and "recover" not in (guard.mode, guard.spike):
        raise NanlabError("--max-rollbacks is not allowed without recovery; allowed: --guard "
                          "recover or --spike recover")
    return guard


def cmd_run(args) -> int:
    """``nanlab run``: train the built-in run (with a fault, fixes, a guard), summarise what
    ran, and return its exit code (``EXIT_CODES``). ``--resume`` continues the run in
    ``--out`` with its stored config (:mod:`nanlab.cli.resume`).

    Example::

        nanlab run --steps 200 --precision bf16 --lr 1e-3 --json
        nanlab run --fault nan_input --set at_step=20 --guard recover
        nanlab run --config model.n_layer=4 --config grad_scaler=yes --precision fp16

    >>> main(["run", "--steps", "20", "--json"])  # doctest: +SKIP
    {"outcome": "healthy", "exit_code": 0, ..., "steps_run": 20, ...}
    0
    """
    from nanlab.cli.resume import resume_flags
    from nanlab.faults import fault_config, get_fix, run_fault
    from nanlab.train.trainer import TrainConfig

    changes = parse_config(args.config)
    params = parse_fault_params(args.fault, args.set)
    fixes = [get_fix(name).name for name in args.fix]
    resume_flags(args.overwrite, args.resume, args.allow_nonfinite, args.out)
    if args.resume is not None:
        run, guard, asked = _resume(args, changes, params, fixes)
    else:
        asked = TrainConfig().replace(progress=not args.json, **changes)
        full = fault_config(args.fault, asked, **params)
        if full.accum_steps > full.batch_size:  # the toy's batch rows: refused before a folder
            raise NanlabError(f"accum_steps={full.accum_steps} is more than the batch's "
                              f"{full.batch_size} rows; allowed: 1 to {full.batch_size}")
        guard = _make_guard(args, full)
        out, made = _prepare_out(args.out, existing=args.overwrite)
        asked = asked.replace(out_dir=str(out))
        callbacks = [*(guard.callbacks() if guard else ())]
        if args.overwrite:
            callbacks.append(("on_run_start", lambda tr, info: setattr(tr, "overwrite", True)))
        try:
            run = run_fault(args.fault, fixes=fixes, base=asked, callbacks=callbacks, **params)
        except NanlabError:
            _remove_empty(made)  # a run that never started leaves no folder behind
            raise
    summary = _summary(run, guard, asked)
    if args.json:
        print(json.dumps(_json_safe(summary)))
    else:
        _print_summary(summary)
    return summary["exit_code"]


def _resume(args, changes: dict, params: dict, fixes: list[str]):
    """``--resume``: the run in --out rebuilt from its manifest (as ``load_run`` rebuilds
    it for a replay), the flags given checked against it, then continued from its newest
    checkpoint or STEP's (:func:`start_step`). Returns the run, its guard, its config."""
    from nanlab.cli.resume import resume_config, start_step, stored_run
    from nanlab.faults import build_fault_trainer, execute, get_fix
    from nanlab.guard import Guard

    out, made = _prepare_out(args.out, existing=True)
    try:
        stored = stored_run(out)
    except NanlabError:
        _remove_empty(made)  # --out named no run: leave no folder behind
        raise
    stored.newest = start_step(out, stored, args.resume, args.allow_nonfinite)
    given_guard = _make_guard(args, stored.config) if (
        args.guard or args.spike or args.rerun or args.max_rollbacks is not None) else None
    config = resume_config(out, stored, changes, args.fault, params,
                           fixes if args.fix else None,
                           given_guard.settings if given_guard else None)
    config = config.replace(out_dir=str(out), progress=not args.json)
    try:
        guard = given_guard or (Guard(**stored.guard) if stored.guard else None)
        trainer = build_fault_trainer(stored.fault, config, stored.params)
    except (TypeError, ValueError) as e:  # NanlabError included: a manifest edited by hand
        raise NanlabError(f"{out / 'manifest.json'}: its fault or guard cannot be rebuilt "
                          f"({error_line(e)})") from None
    trainer.record.manifest["fixes"] = stored.fixes
    if stored.started:
        trainer.record.manifest["started"] = stored.started  # one run, one start
    for name in stored.fixes:
        get_fix(name).install(trainer)
    if guard:
        guard.attach(trainer)

    def resume(tr, info):  # what Trainer.run(resume_from=newest) does first
        tr.restore(stored.newest, allow_nonfinite=args.allow_nonfinite)
        tr.record.log_event("resume", tr.step, source=str(tr.checkpoints.path(stored.newest)),
                            dropped=tr.record.resume(tr.step))
    trainer.add_callback("on_run_start", resume)
    return execute(trainer, stored.fault, stored.params, stored.fixes), guard, config


def build_parser() -> argparse.ArgumentParser:
    """The ``nanlab`` argument parser: one sub-command per tool. ``--steps``, ``--lr`` and
    the other training flags are ``--config KEY=VALUE`` under another name.

    >>> args = build_parser().parse_args(["run", "--fault", "nan_input", "--set", "at_step=20",
    ...                                   "--lr", "1e-3", "--config", "model.n_layer=4"])
    >>> args.command, args.fault, args.set, args.config
    ('run', 'nan_input', ['at_step=20'], ['lr=1e-3', 'model.n_layer=4'])
    """
    parser = _Parser(prog="nanlab", description=__doc__.split("\n")[0])
    sub = parser.add_subparsers(dest="command", required=True)

    run = sub.add_parser("run", help="train the default run and summarise it", epilog=EXIT_HELP,
                         formatter_class=argparse.RawDescriptionHelpFormatter)
    run.add_argument("--config", action=_ConfigFlag, default=[], metavar="KEY=VALUE",
                     help="a training setting (a TrainConfig field), typed by the field: "
                          "lr=1e-3, grad_scaler=yes, model.n_layer=4 (repeatable)")
    for flag, key, text in (("--steps", "steps", "steps to train (200)"),
                            ("--seed", "seed", "seed (0)"),
                            ("--device", "device", "auto | cpu | cuda | cuda:N"),
                            ("--precision", "precision", "fp32 | fp16 | bf16 | fp16-pure"),
                            ("--lr", "lr", "peak learning rate (5e-3)"),
                            ("--optimizer", "optimizer", "adamw | sgd"),
                            ("--warmup-steps", "warmup_steps", "linear warmup steps (20)"),
                            ("--checkpoint-every", "checkpoint_every",
                             "steps between checkpoints; 0 = none (50)")):
        run.add_argument(flag, action=_ConfigFlag, const=key, default=argparse.SUPPRESS,
                         metavar=key.upper(), help=f"{text}; = --config {key}=...")
    run.add_argument("--out", default=None, help="run directory (default runs/run-<time>)")
    run.add_argument("--overwrite", action="store_true",
                     help="--out holds a run: replace it (moved aside, deleted once the new "
                          "run has started)")
    run.add_argument("--resume", nargs="?", const=-1, type=_int_arg("resume", 0),
                     metavar="STEP", help="--out holds a run: resume it from its newest "
                     "checkpoint (or STEP's), stored settings; one with NaN/inf is refused")
    run.add_argument("--allow-nonfinite", action="store_true",
                     help="--resume from a checkpoint even if it holds NaN/inf")
    run.add_argument("--json", action="store_true", help="print one JSON object at the end")
    run.add_argument("--fault", default=None, help="inject a fault (see: nanlab faults)")
    run.add_argument("--set", action="append", default=[], metavar="KEY=VALUE",
                     help="a fault parameter, e.g. --set at_step=20 (repeatable)")
    run.add_argument("--fix", action="append", default=[], metavar="NAME",
                     help="apply a fix (nanlab.faults.fixes), e.g. --fix lr_div10 (repeatable)")
    run.add_argument("--guard", default=None, help="stop | skip | recover (nanlab.guard)")
    run.add_argument("--spike", default=None, help="act on loss spikes too: stop | skip | recover")
    run.add_argument("--rerun", action="store_true",
                     help="re-run a failed step once: transient or persistent?")
    run.add_argument("--max-rollbacks", type=_int_arg("max_rollbacks", 0), default=None,
                     help="recover: give up after this many rollbacks (3)")
    run.set_defaults(func=cmd_run)

    faults = sub.add_parser("faults", help="list the built-in faults")
    faults.add_argument("name", nargs="?", help="show one fault in full")
    faults.add_argument("--json", action="store_true")
    faults.set_defaults(func=cmd_faults)

    matrix = sub.add_parser("matrix", help="measure every fault against every fix")
    matrix.add_argument("--faults", nargs="*", default=None)
    matrix.add_argument("--fixes", nargs="*", default=None)
    matrix.add_argument("--steps", type=_int_arg("steps", 1), default=200)
    matrix.add_argument("--seed", type=_int_arg("seed", 0, SEED_MAX), default=0)
    matrix.add_argument("--workers", type=_int_arg("workers", 1), default=None)
    matrix.add_argument("--json", action="store_true")
    matrix.set_defaults(func=cmd_matrix)

    det = sub.add_parser("detectors", help="score every spike rule on a labelled corpus")
    det.add_argument("--quick", action="store_true", help="the 5-run corpus (seconds)")
    det.add_argument("--json", action="store_true")
    det.set_defaults(func=cmd_detectors)

    diag = sub.add_parser("diagnose", help="run the SOP on a saved run and name the cause")
    diag.add_argument("run_dir")
    diag.add_argument("--json", action="store_true")
    diag.set_defaults(func=cmd_diagnose)

    loc = sub.add_parser("locate", help="replay a saved run's first bad step, name the op")
    loc.add_argument("run_dir")
    loc.add_argument("--step", type=_int_arg("step", 0), default=None)
    loc.add_argument("--json", action="store_true")
    loc.set_defaults(func=cmd_locate)

    mys = sub.add_parser("mystery", help="make, reveal, grade or hint a run with a hidden fault")
    mys.add_argument("action", choices=("make", "reveal", "grade", "hint"))
    mys.add_argument("run_dir", help="the mystery's run folder")
    mys.add_argument("answer", nargs="?", default="", help="grade: a fault or SOP step")
    mys.add_argument("--seed", type=_int_arg("seed", 0, SEED_MAX), default=0,
                     help="make: which mystery")
    mys.set_defaults(func=cmd_mystery)

    return finish_parser(parser, sub)  # nanlab course (the course extra); help in plain text


def cmd_diagnose(args) -> int:
    """``nanlab diagnose RUN_DIR``: the SOP on a saved run; cause, evidence, proven fix.

    Example::

        nanlab run --fault nan_input --out runs/nan
        nanlab diagnose runs/nan          # or --json
    """
    from nanlab.debug.diagnose import diagnose

    d = diagnose(args.run_dir)
    print(json.dumps(_json_safe(d.to_dict())) if args.json else d.report())
    return 0


def cmd_mystery(args) -> int:
    """``nanlab mystery make|reveal|grade|hint RUN_DIR``: a run whose fault a learner must find.

    Example::

        nanlab mystery make runs/mystery-7 --seed 7    # hand the folder to a learner
        nanlab diagnose runs/mystery-7                 # what the learner may run
        nanlab mystery hint runs/mystery-7             # hints read from the run itself
        nanlab mystery grade runs/mystery-7 lr         # a fault name or an SOP step (3 tries)
        nanlab mystery reveal runs/mystery-7

    ``make`` exits 0 once the mystery is written, whatever its run did (the run is meant to
    break, and its exit code would hint at the sealed fault); 2 on bad input.

    >>> main(["mystery", "reveal", "runs/mystery-7"])  # doctest: +SKIP
    """
    from nanlab.faults import mystery

    if args.action == "make":
        _, made = _prepare_out(args.run_dir, "run_dir")
        try:
            folder = mystery.make(args.seed, args.run_dir)
        except NanlabError:
            _remove_empty(made)
            raise
        print(f"mystery {args.seed} written to {folder} (fault sealed); "
              f"learners: nanlab diagnose {folder}")
    elif args.action == "reveal":
        truth = mystery.reveal(args.run_dir)
        print(f"{truth['name']}: {truth['summary']}")
        print(f"revealed by SOP step {truth['sop_step']}; cure: {truth['cure']}")
    elif args.action == "hint":
        for i, text in enumerate(mystery.hints(args.run_dir), 1):
            print(f"hint {i}: {text}")
    else:
        print(mystery.grade(args.run_dir, args.answer))
    return 0


def cmd_locate(args) -> int:
    """``nanlab locate RUN_DIR [--step N]``: replay the first bad step, name the op.

    Example::

        nanlab locate runs/nan            # or --step 40, --json
    """
    from nanlab.debug.diagnose import load_run
    from nanlab.debug.locate import locate

    loc = locate(load_run(args.run_dir).trainer, args.step)
    print(json.dumps(_json_safe(loc.to_dict())) if args.json else loc.report())
    return 0


def cmd_faults(args) -> int:
    """``nanlab faults [NAME]``: list the faults, or show one in full.

    >>> main(["faults", "tiny_eps"])  # doctest: +ELLIPSIS
    tiny_eps (tiny_eps): LayerNorm eps = 0 meeting a zero-variance row (a padding token)
    ...
    0
    """
    from nanlab.faults import FAULTS, get_fault

    if args.name:
        fault = get_fault(args.name)
        if args.json:
            print(json.dumps(_fault_dict(fault)))
        else:
            print(fault.describe())
        return 0
    if args.json:
        print(json.dumps([_fault_dict(f) for f in FAULTS.values()]))
        return 0
    width = max(map(len, FAULTS))
    for f in FAULTS.values():
        print(f"{f.name:{width}}  {f.family:17}  {f.signature:9}  {f.summary}")
    return 0


def _fault_dict(fault) -> dict:
    return {"name": fault.name, "family": fault.family, "summary": fault.summary,
            "mechanism": fault.mechanism, "needs": fault.needs, "reveals": fault.reveals,
            "cure": fault.cure, "signature": fault.signature,
            "params": {k: p.default for k, p in fault.params.items()}}


def cmd_matrix(args) -> int:
    """``nanlab matrix``: every fault against every fix, measured (minutes).

    Example::

        nanlab matrix                                          # everything, ~13 min on 2 cores
        nanlab matrix --faults nan_input --fixes validate_data lr_div10
    """
    from nanlab.faults.matrix import fault_fix_matrix

    m = fault_fix_matrix(args.faults, args.fixes, steps=args.steps, seed=args.seed,
                         workers=args.workers, progress=not args.json)
    if args.json:
        print(json.dumps(_json_safe(m.to_dict())))
    else:
        print(m.table())
        print()
        print(m.evidence())
    return 0


def cmd_detectors(args) -> int:
    """``nanlab detectors``: recall, precision, false alarms per 1,000 healthy steps and
    median lead before the NaN of every spike rule, on a corpus made by the package.

    Example::

        nanlab detectors            # 41 runs, a few minutes on 2 cores
        nanlab detectors --quick --json
    """
    from nanlab.faults.corpus import detector_table

    def progress(label: str) -> None:
        print(f"  run: {label}", file=sys.stderr, flush=True)
    table = detector_table(size="quick" if args.quick else "full",
                           progress=None if args.json else progress)
    print(json.dumps(_json_safe(table.to_dict())) if args.json else table.text())
    return 0


def main(argv: list[str] | None = None) -> int:
    """Run the command line with ``argv`` (default: ``sys.argv[1:]``); returns the exit status
    (``EXIT_CODES``). A bad value prints one line and returns 2, without a traceback.

    >>> main(["run", "--fault", "nan_input", "--set", "at_step=-3"])  # doctest: +SKIP
    nanlab: error: nan_input.at_step=-3 is out of range; allowed: an integer from 0 to 100000
    2
    """
    parser = build_parser()
    try:
        args = parser.parse_args(argv)
        return args.func(args)
    except Terminated as e:  # SIGTERM: the run is saved, resumable
        print(f"nanlab: {e}", file=sys.stderr)
        return EXIT_CODE_TERMINATED
    except SystemExit as e:  # argparse: --help (0), or a usage error already printed (2)
        return 0 if e.code is None else e.code if isinstance(e.code, int) else 1
    except (NanlabError, ImportError) as e:
        message = " ".join(line.strip() for line in str(e).splitlines() if line.strip())
        print(f"nanlab: error: {message}", file=sys.stderr)
        return EXIT_CODE_BAD_INPUT
    except BrokenPipeError:  # the reader went away (`nanlab faults --json | head -c 1`)
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())  # no error at exit
        return 1
    except StorageError as e:  # a full disk or a folder that cannot be written
        print(f"nanlab: error: {e}", file=sys.stderr)
        return EXIT_CODE_STORAGE
    except KeyboardInterrupt:
        print("nanlab: interrupted", file=sys.stderr)
        return EXIT_CODE_INTERRUPTED
