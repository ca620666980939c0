"""The ``nanlab`` command line: quick checks and instructor tools without Jupyter.

    nanlab run --steps 200 --precision fp16 --json
    nanlab course build

Errors in the user's input are printed as one line (what was wrong, the value, what is
allowed) and exit with status 2, without a traceback.
"""

from __future__ import annotations

import argparse
import json
import math
import sys
import time
from pathlib import Path

from nanlab.errors import NanlabError


def _json_safe(value):
    """Non-finite floats become None so that the output is strict JSON."""
    if isinstance(value, float) and not math.isfinite(value):
        return None
    if isinstance(value, dict):
        return {k: _json_safe(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_json_safe(v) for v in value]
    return value


def _positive_int(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not an integer") from None
    return value


def _parse_sets(pairs: list[str]) -> dict:
    """``--set key=value`` pairs: numbers become numbers, the rest stay strings."""
    params = {}
    for pair in pairs:
        key, sep, text = pair.partition("=")
        if not sep or not key:
            raise NanlabError(f"--set {pair!r} is not allowed; write --set name=value")
        try:
            value = int(text)
        except ValueError:
            try:
                value = float(text)
            except ValueError:
                value = text
        params[key] = value
    return params


def cmd_run(args) -> int:
    """``nanlab run``: train the built-in run (with a fault, a guard) and summarise it.

    Example::

        nanlab run --steps 200 --precision bf16 --json
        nanlab run --fault nan_input --set at_step=20 --guard recover

    >>> main(["run", "--steps", "20", "--json"])  # doctest: +SKIP
    {"steps_run": 20, "final_loss": ..., "first_nonfinite_step": null, ...}
    0
    """
    from nanlab.faults import run_fault
    from nanlab.train import TrainConfig

    out = args.out or str(Path("runs") / time.strftime("run-%Y%m%d-%H%M%S"))
    params = _parse_sets(args.set)
    if params and not args.fault:
        raise NanlabError("--set needs --fault NAME (the parameters belong to a fault)")
    config = TrainConfig(steps=args.steps, seed=args.seed, device=args.device,
                         precision=args.precision, out_dir=out, progress=not args.json)
    callbacks, guard = [], None
    if args.guard or args.spike:
        from nanlab.guard import Guard

        guard = Guard(args.guard or "skip", spike=args.spike, rerun=args.rerun)
        callbacks = guard.callbacks()
    run = run_fault(args.fault, base=config, callbacks=callbacks, **params)
    record = run.record
    summary = {**record.summary(), "fault": args.fault, "error": run.error,
               "first_bad_step": run.first_bad_step,
               "guard": guard.summary() if guard else None,
               "stop_reason": record.manifest.get("stop_reason")}
    if args.json:
        print(json.dumps(_json_safe(summary)))
    else:
        bad = summary["first_nonfinite_step"]
        print(f"ran {summary['steps_run']} steps on {record.manifest['device']}, "
              f"precision {config.precision}, seed {config.seed}")
        print(f"final loss: {summary['final_loss']}")
        print(f"first non-finite step: {bad if bad is not None else 'none'}")
        if run.error:
            print(f"crashed at step {run.error_step}: {run.error}")
        if guard:
            print(f"guard: {guard.summary()}")
        if summary["stop_reason"]:
            print(f"stopped: {summary['stop_reason']}")
        print(f"run directory: {summary['run_dir']}")
    return 0


def build_parser() -> argparse.ArgumentParser:
    """The ``nanlab`` argument parser: one sub-command per tool.

    >>> args = build_parser().parse_args(["run", "--fault", "nan_input", "--set", "at_step=20"])
    >>> args.command, args.fault, args.set, args.steps
    ('run', 'nan_input', ['at_step=20'], 200)
    """
    parser = argparse.ArgumentParser(prog="nanlab", description=__doc__.split("\n")[0])
    sub = parser.add_subparsers(dest="command", required=True)

    run = sub.add_parser("run", help="train the default run and summarise it")
    run.add_argument("--steps", type=_positive_int, default=200)
    run.add_argument("--seed", type=_positive_int, default=0)
    run.add_argument("--device", default="auto", help="auto | cpu | cuda")
    run.add_argument("--precision", default="fp32", help="fp32 | fp16 | bf16 | fp16-pure")
    run.add_argument("--out", default=None, help="run directory (default runs/run-<time>)")
    run.add_argument("--json", action="store_true", help="print one JSON object at the end")
    run.add_argument("--fault", default=None, help="inject a fault (see: nanlab faults)")
    run.add_argument("--set", action="append", default=[], metavar="KEY=VALUE",
                     help="a fault parameter, e.g. --set at_step=20 (repeatable)")
    run.add_argument("--guard", default=None, help="stop | skip | recover (nanlab.guard)")
    run.add_argument("--spike", default=None, help="act on loss spikes too: skip | recover")
    run.add_argument("--rerun", action="store_true",
                     help="re-run a failed step once: transient or persistent?")
    run.set_defaults(func=cmd_run)

    faults = sub.add_parser("faults", help="list the built-in faults")
    faults.add_argument("name", nargs="?", help="show one fault in full")
    faults.add_argument("--json", action="store_true")
    faults.set_defaults(func=cmd_faults)

    matrix = sub.add_parser("matrix", help="measure every fault against every fix")
    matrix.add_argument("--faults", nargs="*", default=None)
    matrix.add_argument("--fixes", nargs="*", default=None)
    matrix.add_argument("--steps", type=_positive_int, default=200)
    matrix.add_argument("--seed", type=_positive_int, default=0)
    matrix.add_argument("--workers", type=_positive_int, default=None)
    matrix.add_argument("--json", action="store_true")
    matrix.set_defaults(func=cmd_matrix)

    diag = sub.add_parser("diagnose", help="run the SOP on a saved run and name the cause")
    diag.add_argument("run_dir")
    diag.add_argument("--json", action="store_true")
    diag.set_defaults(func=cmd_diagnose)

    loc = sub.add_parser("locate", help="replay a saved run's first bad step, name the op")
    loc.add_argument("run_dir")
    loc.add_argument("--step", type=_positive_int, default=None)
    loc.add_argument("--json", action="store_true")
    loc.set_defaults(func=cmd_locate)

    mys = sub.add_parser("mystery", help="make, reveal or grade a run with a hidden fault")
    mys.add_argument("action", choices=("make", "reveal", "grade"))
    mys.add_argument("run_dir", help="the mystery's run folder")
    mys.add_argument("answer", nargs="?", default="", help="grade: a fault or SOP step")
    mys.add_argument("--seed", type=_positive_int, default=0, help="make: which mystery")
    mys.set_defaults(func=cmd_mystery)

    from nanlab.course import notebooks as course

    course.add_parser(sub)
    return parser


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
    """``nanlab mystery make|reveal|grade RUN_DIR``: a run whose fault a learner must find.

    Example::

        nanlab mystery make runs/mystery-7 --seed 7    # hand the folder to a learner
        nanlab diagnose runs/mystery-7                 # what the learner may run
        nanlab mystery grade runs/mystery-7 lr         # a fault name or an SOP step
        nanlab mystery reveal runs/mystery-7

    >>> main(["mystery", "reveal", "runs/mystery-7"])  # doctest: +SKIP
    """
    from nanlab.faults import mystery

    if args.action == "make":
        folder = mystery.make(args.seed, args.run_dir)
        print(f"mystery {args.seed} written to {folder} (fault sealed); "
              f"learners: nanlab diagnose {folder}")
    elif args.action == "reveal":
        truth = mystery.reveal(args.run_dir)
        print(f"{truth['name']}: {truth['summary']}")
        print(f"revealed by SOP step {truth['sop_step']}; cure: {truth['cure']}")
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

        nanlab matrix                                          # everything, ~4 min
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


def main(argv: list[str] | None = None) -> int:
    """Run the command line with ``argv`` (default: ``sys.argv[1:]``); returns the exit status.

    A bad value prints one line and returns 2, without a traceback.

    >>> main(["run", "--fault", "nan_input", "--set", "at_step=-3"])  # doctest: +SKIP
    nanlab: error: nan_input.at_step=-3 is out of range; allowed: an integer from 0 to 100000
    2
    """
    parser = build_parser()
    try:
        args = parser.parse_args(argv)
        return args.func(args)
    except (NanlabError, ImportError) as e:
        print(f"nanlab: error: {e}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print("nanlab: interrupted", file=sys.stderr)
        return 130
