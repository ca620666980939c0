"""What the guard costs on a healthy run, next to torch.autograd.detect_anomaly.

Prints numbers and asserts nothing:

(a) median step time of the toy run (``TrainConfig(steps=300, record_every=0)``) in one
    process: the bare Trainer, the Trainer with the guard attached in each mode (no
    fault: the guard only watches), and the bare Trainer under
    ``torch.autograd.detect_anomaly(check_nan=True)``. The kinds run interleaved, round
    after round, so that machine noise hits them alike; a first round warms caches and
    is dropped. Ratios are to the bare Trainer (target for the guard: <= 1.03).
(b) the guard's own work per step, timed apart: ``Guard.check`` called on host floats
    (what the Trainer hands it), in microseconds. That is all the guard adds to a step
    (no hooks, no host sync of its own), so (b) / step time is its cost, free of noise.

Run:  python bench/bench_guard.py  [--steps 300 --rounds 3 --threads 1]
The last line is JSON, to quote.
"""

from __future__ import annotations

import argparse
import json
import os
import time
import warnings
from collections.abc import Callable

import numpy as np
import torch

from nanlab.guard import Guard
from nanlab.train import TrainConfig, Trainer, resolve_device

GUARDS: dict[str, Callable[[], Guard] | None] = {
    "bare": None,
    "stop": lambda: Guard("stop"),
    "skip + spike": lambda: Guard("skip", spike="skip", watch_grad_norm=True),
    "recover + spike": lambda: Guard("recover", spike="recover"),
    "recover + rerun": lambda: Guard("recover", spike="recover", rerun=True),
}
ANOMALY = "detect_anomaly"


def step_times(steps: int, make_guard: Callable[[], Guard] | None, anomaly: bool = False
               ) -> np.ndarray:
    """Seconds per step of one run, from one on_step_end timestamp to the next."""
    trainer = Trainer(TrainConfig(steps=steps, progress=False, record_every=0,
                                  checkpoint_every=50))
    if make_guard is not None:
        make_guard().attach(trainer)
    stamps: list[float] = []
    trainer.add_callback("on_run_start", lambda tr, info: stamps.append(time.perf_counter()))
    trainer.add_callback("on_step_end", lambda tr, info: stamps.append(time.perf_counter()))
    if anomaly:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # "Anomaly Detection has been enabled..."
            with torch.autograd.detect_anomaly(check_nan=True):
                trainer.run()
    else:
        trainer.run()
    return np.diff(stamps)


def check_cost_us(calls: int = 100_000) -> dict[str, float]:
    """Microseconds per Guard.check on healthy values, per configuration."""
    rng = np.random.default_rng(0)
    losses = (1.0 + 0.05 * rng.standard_normal(calls)).tolist()
    norms = (2.0 + 0.2 * rng.standard_normal(calls)).tolist()
    out = {}
    for name, guard in {"check (no detector)": Guard("skip"),
                        "check (loss + grad-norm detector)": Guard("skip", spike="skip",
                                                                    watch_grad_norm=True)
                        }.items():
        start = time.perf_counter()
        for i in range(calls):
            guard.check(i, losses[i], norms[i], batch_index=i)
        out[name] = 1e6 * (time.perf_counter() - start) / calls
        assert guard.counts["skip"] == 0
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=300)
    parser.add_argument("--rounds", type=int, default=3, help="interleaved rounds (+1 warm-up)")
    parser.add_argument("--threads", type=int, default=1,
                        help="torch threads (1: the toy gains little from more, and on a "
                             "busy machine extra threads oversubscribe the cores and make "
                             "step times swing 10x)")
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    load = os.getloadavg()[0]
    print(f"torch {torch.__version__}, device {resolve_device('auto')}, "
          f"{torch.get_num_threads()} torch threads, {os.cpu_count()} CPUs, "
          f"load average {load:.2f}")

    kinds = {**{name: (make, False) for name, make in GUARDS.items()}, ANOMALY: (None, True)}
    times: dict[str, list[np.ndarray]] = {k: [] for k in kinds}
    for round_ in range(args.rounds + 1):
        for name, (make, anomaly) in kinds.items():
            t = step_times(args.steps, make, anomaly)
            if round_ > 0:
                times[name].append(t)
    median_ms = {k: 1e3 * float(np.median(np.concatenate(v))) for k, v in times.items()}
    per_round = {k: [1e3 * float(np.median(t)) for t in v] for k, v in times.items()}
    ratio = {k: median_ms[k] / median_ms["bare"] for k in kinds}
    cost = check_cost_us()

    print(f"\n(a) median step time, {args.rounds} interleaved rounds x {args.steps} steps")
    print(f"  {'':20}{'median ms':>10}{'x bare':>8}   per-round medians (ms)")
    for name in kinds:
        rounds = ", ".join(f"{m:.2f}" for m in per_round[name])
        print(f"  {name:20}{median_ms[name]:10.2f}{ratio[name]:8.3f}   {rounds}")
    print("\n(b) the guard's own work per step")
    for name, us in cost.items():
        print(f"  {name:36}{us:6.2f} us = {100 * us / (1e3 * median_ms['bare']):.3f} % "
              "of a bare step")
    guard_worst = max(ratio[k] for k in GUARDS if k != "bare")
    print(f"\n  worst guard mode: x{guard_worst:.3f} (target <= 1.03); "
          f"detect_anomaly: x{ratio[ANOMALY]:.2f} (ANCHORS: 2-3x)")

    print(json.dumps({
        "bench": "guard", "steps": args.steps, "rounds": args.rounds,
        "device": str(resolve_device("auto")), "torch": torch.__version__,
        "threads": torch.get_num_threads(), "cpus": os.cpu_count(),
        "loadavg_1m": round(load, 2),
        "step_ms_median": {k: round(v, 3) for k, v in median_ms.items()},
        "ratio_to_bare": {k: round(v, 4) for k, v in ratio.items()},
        "guard_worst_ratio": round(guard_worst, 4),
        "detect_anomaly_ratio": round(ratio[ANOMALY], 3),
        "check_us": {k: round(v, 3) for k, v in cost.items()},
        "check_pct_of_step": round(100 * max(cost.values()) / (1e3 * median_ms["bare"]), 4),
        "median_of": "all steps of all rounds; per-round spread printed above",
    }))


if __name__ == "__main__":
    main()
