"""What ``bisect_precision`` costs and answers, next to ``locate`` on the same step.

Each case is a failed fp16 run stopped just after its first non-finite step, with a
checkpoint every 10 steps: the toy's ``softmax_overflow`` and ``fp16_overflow`` runs,
and ``fp16_overflow`` injected into two models of the fault-anywhere suite
(``tests/foreign_models.py``: the price MLP and the conv regressor, in a Trainer without
a GradScaler, as the fault's own loop). ``bisect_precision(trainer)`` is timed
``--repeats`` times (median), and so is ``locate(trainer)``; the replay count and the
one-line answer are printed.

Run:  OMP_NUM_THREADS=1 .venv/bin/python bench/bench_precision_bisect.py [--repeats 3]
The last line is JSON, to quote. Asserts nothing.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import time
import warnings
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))

from nanlab import faults  # noqa: E402
from nanlab.debug.locate import locate  # noqa: E402
from nanlab.debug.precision_bisect import bisect_precision  # noqa: E402
from nanlab.train import TrainConfig, Trainer  # noqa: E402


def _stop(trainer, info):
    if not info.row["finite"]:
        trainer.request_stop("the first non-finite step")


def toy(name: str):
    return faults.run_fault(name, steps=300, checkpoint_every=10, stop_when_poisoned=True,
                            callbacks=[("on_step_end", _stop)], progress=False).trainer


def foreign(name: str):
    from foreign_models import FOREIGN

    spec = FOREIGN[name]
    torch.manual_seed(0)
    model = spec.make()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        inj = faults.inject("fp16_overflow", model=model, batches=spec.batches, **spec.keys)
    trainer = Trainer(TrainConfig(steps=40, lr=spec.lr, precision="fp16", checkpoint_every=10,
                                  warmup_steps=0, grad_scaler=False, progress=False),
                      model=model, batches=inj.batches, loss_fn=spec.loss)
    trainer.add_callback("on_step_end", _stop)
    trainer.run()
    return trainer


CASES = {"softmax_overflow": lambda: toy("softmax_overflow"),
         "fp16_overflow": lambda: toy("fp16_overflow"),
         "price_mlp+fp16_overflow": lambda: foreign("price_mlp"),
         "conv_regressor+fp16_overflow": lambda: foreign("conv_regressor")}


def timed(fn, repeats: int):
    times, out = [], None
    for _ in range(repeats):
        start = time.perf_counter()
        out = fn()
        times.append(time.perf_counter() - start)
    return out, statistics.median(times), times


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--cases", nargs="+", default=list(CASES), choices=list(CASES))
    parser.add_argument("--repeats", type=int, default=3)
    args = parser.parse_args()
    load = os.getloadavg()[0]
    print(f"torch {torch.__version__}, {torch.get_num_threads()} threads, "
          f"{os.cpu_count()} CPUs, load average {load:.2f}")
    print(f"{'case':30} {'step':>5} {'replays':>7} {'bisect s':>9} {'locate s':>9}  answer")
    results = {}
    for name in args.cases:
        trainer = CASES[name]()
        b, bisect_s, runs = timed(lambda t=trainer: bisect_precision(t), args.repeats)
        loc, locate_s, _ = timed(lambda t=trainer: locate(t), args.repeats)
        print(f"{name:30} {b.step:5d} {b.replays:7d} {bisect_s:9.3f} {locate_s:9.3f}  "
              f"{b.line()}")
        results[name] = {"step": b.step, "verdict": b.verdict, "module": b.module,
                         "parts": b.parts, "replays": b.replays,
                         "bisect_s_median": round(bisect_s, 4),
                         "bisect_s_runs": [round(t, 4) for t in runs],
                         "locate_s_median": round(locate_s, 4),
                         "locate": f"{loc.pass_name} {loc.module or ''}".strip(),
                         "line": b.line()}
    print(json.dumps({"bench": "precision_bisect", "torch": torch.__version__,
                      "threads": torch.get_num_threads(), "cpus": os.cpu_count(),
                      "loadavg_1m": round(load, 2), "repeats": args.repeats,
                      "cases": results}))


if __name__ == "__main__":
    main()
