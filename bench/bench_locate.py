"""What ``locate`` costs on a failed run, next to the training step it replays.

For each fault, one failed run (stopped at its first non-finite step, checkpoints every
``--every`` steps), then ``locate(trainer)`` timed ``--repeats`` times (median): the
checkpoint load, the exact replay of the steps in between, the hooked step (module
hooks, backward hooks, op-level trace, optimizer checks) and the restore of the
trainer. The mean plain training step of the same run is printed beside it; normal
training pays nothing, since locate adds no hook until it is called.

Run:  .venv/bin/python bench/bench_locate.py  [--faults deep_explosion nan_input]
The last line is JSON, to quote. Asserts nothing.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import time

import torch

from nanlab import faults
from nanlab.debug.locate import locate


def failed_run(name: str, every: int) -> tuple[faults.FaultRun, float]:
    """The run, stopped after its first non-finite step, and its mean step seconds."""
    stamps: list[float] = []

    def on_end(trainer, info):
        stamps.append(time.perf_counter())
        if not info.row["finite"]:
            trainer.stop_requested = True

    run = faults.run_fault(name, steps=300, checkpoint_every=every,
                           callbacks=[("on_run_start", lambda tr, i: stamps.append(
                               time.perf_counter())), ("on_step_end", on_end)])
    steps = [b - a for a, b in zip(stamps, stamps[1:], strict=False)]
    return run, statistics.mean(steps) if steps else float("nan")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--faults", nargs="+", default=["deep_explosion", "nan_input"])
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--every", type=int, default=10, help="checkpoint_every")
    args = parser.parse_args()
    load = os.getloadavg()[0]
    print(f"torch {torch.__version__}, {torch.get_num_threads()} threads, "
          f"{os.cpu_count()} CPUs, load average {load:.2f}")
    print(f"{'fault':16} {'step':>5} {'ckpt':>5} {'replayed':>8} {'locate s':>9} "
          f"{'step ms':>8}  first non-finite")
    results = {}
    for name in args.faults:
        run, step_s = failed_run(name, args.every)
        times = []
        for _ in range(args.repeats):
            start = time.perf_counter()
            loc = locate(run.trainer)
            times.append(time.perf_counter() - start)
        median = statistics.median(times)
        where = f"{loc.pass_name} {loc.module or ''} {loc.tensor or ''}".strip()
        print(f"{name:16} {loc.step:5d} {loc.checkpoint:5d} {loc.replayed_steps:8d} "
              f"{median:9.3f} {1e3 * step_s:8.2f}  {where}")
        results[name] = {"step": loc.step, "checkpoint": loc.checkpoint,
                         "replayed_steps": loc.replayed_steps, "events": loc.n_events,
                         "locate_s_median": round(median, 4),
                         "locate_s_runs": [round(t, 4) for t in times],
                         "train_step_ms_mean": round(1e3 * step_s, 3),
                         "reproduced": loc.reproduced, "pass": loc.pass_name,
                         "module": loc.module, "tensor": loc.tensor}
    print(json.dumps({"bench": "locate", "torch": torch.__version__,
                      "threads": torch.get_num_threads(), "cpus": os.cpu_count(),
                      "loadavg_1m": round(load, 2), "checkpoint_every": args.every,
                      "repeats": args.repeats, "target_s": 30, "faults": results}))


if __name__ == "__main__":
    main()
