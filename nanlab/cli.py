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


def cmd_run(args) -> int:
    from nanlab.train import TrainConfig, Trainer

    out = args.out or str(Path("runs") / time.strftime("run-%Y%m%d-%H%M%S"))
    config = TrainConfig(steps=args.steps, seed=args.seed, device=args.device,
                         precision=args.precision, out_dir=out, progress=not args.json)
    record = Trainer(config).run()
    summary = record.summary()
    if args.json:
        print(json.dumps(_json_safe(summary)))
    else:
        bad = summary["first_nonfinite_step"]
        print(f"ran {summary['steps_run']} steps on {record.manifest['device']}, "
              f"precision {config.precision}, seed {config.seed}")
        print(f"final loss: {summary['final_loss']}")
        print(f"first non-finite step: {bad if bad is not None else 'none'}")
        print(f"run directory: {summary['run_dir']}")
    return 0


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="nanlab", description=__doc__.split("\n")[0])
    sub = parser.add_subparsers(dest="command", required=True)

    run = sub.add_parser("run", help="train the default run and summarise it")
    run.add_argument("--steps", type=_positive_int, default=200)
    run.add_argument("--seed", type=_positive_int, default=0)
    run.add_argument("--device", default="auto", help="auto | cpu | cuda")
    run.add_argument("--precision", default="fp32", help="fp32 | fp16 | bf16 | fp16-pure")
    run.add_argument("--out", default=None, help="run directory (default runs/run-<time>)")
    run.add_argument("--json", action="store_true", help="print one JSON object at the end")
    run.set_defaults(func=cmd_run)
    return parser


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    try:
        args = parser.parse_args(argv)
        return args.func(args)
    except NanlabError as e:
        print(f"nanlab: error: {e}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print("nanlab: interrupted", file=sys.stderr)
        return 130
