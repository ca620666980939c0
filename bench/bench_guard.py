"""What the guard costs on a healthy run, next to torch.autograd.detect_anomaly.

Prints numbers and asserts nothing:

(a) median step time of the toy run (``TrainConfig(steps=300, record_every=0)``) in one
    process: the bare Trainer, the Trainer with the guard attached in each mode (no
    fault: the guard only watches), and the bare Trainer under
    ``torch.autograd.detect_anomaly(check_nan=True)``. All kinds advance in lockstep,
    one step each in a random order, so that a busy neighbour on a shared machine
    slows them alike (run after run, the medians swung 12 -> 20 ms for every kind); the
    ratio to the bare Trainer is the median of per-step ratios (target for the guard:
    <= 1.03). A first round warms caches and is dropped.
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


def lockstep_times(steps: int) -> dict[str, np.ndarray]:
    """Seconds per step of every kind, the runs advanced in lockstep: step i of each kind
    runs within milliseconds of the others' step i (in a random order), so a busy
    neighbour on the machine slows them all alike, and per-step ratios cancel it."""
    trainers = {}
    for name, make in {**GUARDS, ANOMALY: None}.items():
        trainer = Trainer(TrainConfig(steps=steps, progress=False, record_every=0,
                                      checkpoint_every=50))
        if make is not None:
            make().attach(trainer)
        trainers[name] = trainer
    names = list(trainers)
    times = {name: np.zeros(steps) for name in names}
    order = np.random.default_rng(0)
    for i in range(steps):
        # A fresh random order each step: a rotation would always put the same kind
        # right after detect_anomaly, whose garbage (a traceback per op) that kind's
        # step then collects: 5 % slower for no fault of its own.
        for name in order.permutation(names):
            trainer = trainers[name]
            if i % trainer.config.checkpoint_every == 0:
                trainer.save_checkpoint()  # as Trainer.run does; not timed
            start = time.perf_counter()
            if name == ANOMALY:
                with torch.autograd.detect_anomaly(check_nan=True):
                    trainer.train_step()
            else:
                trainer.train_step()
            times[name][i] = time.perf_counter() - start
    return times


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

    kinds = [*GUARDS, ANOMALY]
    times: dict[str, list[np.ndarray]] = {k: [] for k in kinds}
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # "Anomaly Detection has been enabled..."
        for round_ in range(args.rounds + 1):
            t = lockstep_times(args.steps)
            if round_ > 0:  # the first round warms caches and is dropped
                for k in kinds:
                    times[k].append(t[k])
    steps_ms = {k: 1e3 * np.concatenate(v) for k, v in times.items()}
    median_ms = {k: float(np.median(v)) for k, v in steps_ms.items()}
    # the median over steps of (kind's step i) / (bare step i): load cancels out
    ratio = {k: float(np.median(steps_ms[k] / steps_ms["bare"])) for k in kinds}
    per_round = {k: [float(np.median(t / b)) for t, b in zip(v, times["bare"], strict=True)]
                 for k, v in times.items()}
    cost = check_cost_us()

    print(f"\n(a) step time, {args.rounds} rounds x {args.steps} steps, kinds in lockstep")
    print(f"  {'':20}{'median ms':>10}{'x bare':>8}   per-round ratio to bare")
    for name in kinds:
        rounds = ", ".join(f"{m:.3f}" for m in per_round[name])
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
        "ratio_is": "median over steps of (kind step i) / (bare step i), kinds in lockstep",
    }))


if __name__ == "__main__":
    main()
