"""What the clean baseline costs, and what the run record adds to it.

Prints numbers and asserts nothing:

(a) wall time and peak memory (RSS high-water mark, ``ru_maxrss``) of the 200-step
    baseline ``train(TrainConfig(steps=200, progress=False))``, each repeat in a fresh
    subprocess so the peak is the run's own (``tracemalloc`` cannot see torch's memory);
(b) the cost of the per-layer statistics at their default interval: step time with
    ``record_every=10`` vs ``record_every=0``, in one process, runs interleaved so that
    machine noise hits both alike, next to the same loop written bare (model, AdamW,
    loss, backward, step; no trainer).

The recording cost is reported on the *mean* step time: only one step in ten records,
so the median step would hide it; the extra time of a recording step is shown apart.

Run:  python bench/bench_baseline.py  [--steps 200 --repeats 3 --rounds 5]
The last line is JSON, to quote.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import statistics
import subprocess
import sys
import time

import numpy as np
import torch

from nanlab.toy.data import CountingTask
from nanlab.toy.model import GPT, GPTConfig
from nanlab.train import TrainConfig, Trainer, lm_loss, resolve_device, to_device, train


def max_rss_mib() -> float:
    """This process's RSS high-water mark in MiB (Linux reports KiB, macOS bytes)."""
    rss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    return rss / (1024**2 if sys.platform == "darwin" else 1024)


def child_baseline(steps: int) -> None:
    """Run in a fresh subprocess: one baseline run, its wall time and peak RSS as JSON."""
    rss_before = max_rss_mib()  # after importing torch and nanlab
    start = time.perf_counter()
    record = train(TrainConfig(steps=steps, progress=False))
    wall = time.perf_counter() - start
    print(json.dumps({"wall_s": wall, "peak_rss_mib": max_rss_mib(),
                      "rss_after_import_mib": rss_before, "threads": torch.get_num_threads(),
                      "final_loss": float(record.losses()[-1])}))


def baseline_in_subprocesses(steps: int, repeats: int) -> list[dict]:
    results = []
    for _ in range(repeats):
        out = subprocess.run([sys.executable, __file__, "--child", str(steps)],
                             capture_output=True, text=True, check=True)
        results.append(json.loads(out.stdout.strip().splitlines()[-1]))
    return results


def trainer_step_times(steps: int, record_every: int) -> np.ndarray:
    """Seconds per step of a Trainer run, from one on_step_end timestamp to the next."""
    trainer = Trainer(TrainConfig(steps=steps, progress=False, record_every=record_every))
    stamps: list[float] = []
    trainer.add_callback("on_run_start", lambda tr, info: stamps.append(time.perf_counter()))
    trainer.add_callback("on_step_end", lambda tr, info: stamps.append(time.perf_counter()))
    trainer.run()
    return np.diff(stamps)


def bare_step_times(steps: int) -> np.ndarray:
    """The same model, optimizer, data and loss, in a plain loop with no trainer."""
    torch.manual_seed(0)
    device = resolve_device("auto")
    model = GPT(GPTConfig()).to(device)
    optimizer = torch.optim.AdamW(model.parameters(), lr=5e-3, betas=(0.9, 0.95), eps=1e-8,
                                  weight_decay=0.0, foreach=False)
    task = CountingTask(seed=0, batch_size=32, seq_len=32, vocab_size=32)
    stamps = [time.perf_counter()]
    for i in range(steps):
        loss = lm_loss(model, to_device(task(i), device))
        optimizer.zero_grad(set_to_none=True)
        loss.backward()
        optimizer.step()
        loss.item()  # one host sync per step, as the trainer does
        stamps.append(time.perf_counter())
    return np.diff(stamps)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=200)
    parser.add_argument("--repeats", type=int, default=3, help="fresh-process baseline runs")
    parser.add_argument("--rounds", type=int, default=5, help="interleaved rounds for (b)")
    parser.add_argument("--child", type=int, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        child_baseline(args.child)
        return

    steps = args.steps
    load = os.getloadavg()[0]
    print(f"torch {torch.__version__}, device {resolve_device('auto')}, "
          f"{torch.get_num_threads()} torch threads, {os.cpu_count()} CPUs, "
          f"load average {load:.2f}")

    # (a) fresh processes
    runs = baseline_in_subprocesses(steps, args.repeats)
    walls = [r["wall_s"] for r in runs]
    peaks = [r["peak_rss_mib"] for r in runs]
    print(f"\n(a) baseline, {steps} steps, {args.repeats} fresh process(es) "
          f"({runs[0]['threads']} threads)")
    print(f"  wall time   median {statistics.median(walls):6.2f} s   "
          f"runs {', '.join(f'{w:.2f}' for w in walls)}")
    print(f"  peak RSS    median {statistics.median(peaks):6.0f} MiB "
          f"(after imports {runs[0]['rss_after_import_mib']:.0f} MiB)")
    print(f"  final loss  {runs[0]['final_loss']:.4f}")

    # (b) interleaved, one process; a first round of each warms caches and is dropped
    kinds = {"record_every=10": lambda: trainer_step_times(steps, 10),
             "record_every=0": lambda: trainer_step_times(steps, 0),
             "bare loop": lambda: bare_step_times(steps)}
    times: dict[str, list[np.ndarray]] = {k: [] for k in kinds}
    for round_ in range(args.rounds + 1):
        for name, run in kinds.items():
            t = run()
            if round_ > 0:
                times[name].append(t)
    mean_ms = {k: 1e3 * statistics.median(float(t.mean()) for t in v) for k, v in times.items()}
    median_ms = {k: 1e3 * float(np.median(np.concatenate(v))) for k, v in times.items()}
    rec = np.stack(times["record_every=10"])  # (rounds, steps)
    recording = np.arange(steps) % 10 == 0
    extra_ms = 1e3 * float(np.median(rec[:, recording]) - np.median(rec[:, ~recording]))
    ratio = mean_ms["record_every=10"] / mean_ms["record_every=0"]

    print(f"\n(b) step time, {args.rounds} interleaved rounds x {steps} steps "
          "(mean = median over rounds of each run's mean)")
    print(f"  {'':18}{'mean ms':>9}{'median ms':>11}")
    for name in kinds:
        print(f"  {name:18}{mean_ms[name]:9.2f}{median_ms[name]:11.2f}")
    print(f"  record cost at record_every=10: x{ratio:.3f} ({100 * (ratio - 1):+.1f}% per step); "
          f"a recording step costs {extra_ms:+.2f} ms more")
    print(f"  trainer (record_every=0) vs bare loop: "
          f"x{mean_ms['record_every=0'] / mean_ms['bare loop']:.3f}")

    print(json.dumps({
        "bench": "baseline", "steps": steps, "device": str(resolve_device("auto")),
        "torch": torch.__version__, "threads": torch.get_num_threads(), "cpus": os.cpu_count(),
        "loadavg_1m": round(load, 2),
        "baseline_wall_s_median": round(statistics.median(walls), 3),
        "baseline_wall_s_runs": [round(w, 3) for w in walls],
        "peak_rss_mib_median": round(statistics.median(peaks), 1),
        "rss_after_import_mib": round(runs[0]["rss_after_import_mib"], 1),
        "final_loss": round(runs[0]["final_loss"], 4),
        "step_ms_mean": {k: round(v, 3) for k, v in mean_ms.items()},
        "step_ms_median": {k: round(v, 3) for k, v in median_ms.items()},
        "record_overhead_ratio": round(ratio, 4),
        "record_overhead_pct": round(100 * (ratio - 1), 2),
        "recording_step_extra_ms": round(extra_ms, 3),
        "trainer_vs_bare_ratio": round(mean_ms["record_every=0"] / mean_ms["bare loop"], 4),
    }))


if __name__ == "__main__":
    main()
