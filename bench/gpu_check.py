"""The course on a CUDA GPU: every fault, diagnose, the guard's cost and the notebooks.

One script for a machine with CUDA, unattended, in under 10 minutes. It prints one table:

(a) every fault with ``device="cuda"``: the first bad step and the signature its run
    shows (``nanlab.analysis.judge``) against the one the catalogue declares, and whether the
    declared cure, replayed on the GPU, gives a healthy run;
(b) ``diagnose`` on each fault's run: the cause it names and whether it proved the fix;
(c) the guard's overhead: the median per-step ratio of a run with ``Guard("stop")`` to
    the bare run, the two advanced in lockstep (as in bench/bench_guard.py);
(d) every solution notebook under nbval (``solutions/*.ipynb``), which picks CUDA by
    itself (``device="auto"``), each with its own time limit.

Determinism: ``torch.use_deterministic_algorithms(True, warn_only=True)`` and
``CUBLAS_WORKSPACE_CONFIG=:4096:8`` (set before CUDA starts), as the PyTorch
documentation page "Reproducibility" asks for bit-identical cuBLAS results; locate and
diagnose replay steps and compare them with the record.

On a machine without CUDA it prints one line saying so and exits 0. ``--device cpu``
runs the per-fault part on the CPU instead (a dry run of the code path).

Run:  python bench/gpu_check.py  [--device cuda --faults fp16_overflow,high_lr
      --no-diagnose --no-notebooks --budget 540]
The last line is JSON, to quote.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def fault_rows(names, device: str, with_diagnose: bool, deadline: float) -> list[dict]:
    from nanlab import faults
    from nanlab.analysis.judge import judge
    from nanlab.debug.diagnose import diagnose

    rows = []
    for name in names:
        fault = faults.get_fault(name)
        row = {"fault": name, "declared": fault.signature}
        if time.monotonic() > deadline:
            rows.append({**row, "note": "not run: time budget spent"})
            continue
        t0 = time.monotonic()
        try:
            run = faults.run_fault(name, device=device, checkpoint_every=10,
                                   stop_when_poisoned=True)
            row["first_bad_step"] = run.first_bad_step
            row["shows"] = judge(run).kind
            if fault.cure:
                cured = faults.run_fault(name, fixes=[fault.cure], device=device)
                row["cure"] = fault.cure
                row["cured"] = judge(cured).healthy
            if with_diagnose:
                d = diagnose(run)
                row["diagnosed"] = d.cause
                row["diagnose_ok"] = d.cause == fault.family and (
                    fault.cure is None or (d.fix == fault.cure and d.fix_verified))
        except Exception as e:  # noqa: BLE001 - one broken fault must not hide the others
            row["note"] = f"{type(e).__name__}: {str(e)[:80]}"
        row["seconds"] = round(time.monotonic() - t0, 1)
        row["ok"] = (row.get("shows") == fault.signature and row.get("cured", True)
                     and row.get("diagnose_ok", True) and "note" not in row)
        rows.append(row)
    return rows


def guard_ratio(device: str, steps: int = 200) -> float:
    """Median over steps of (step with Guard('stop')) / (bare step), in lockstep."""
    import numpy as np

    from nanlab.guard import Guard
    from nanlab.train import TrainConfig, Trainer

    def make(guarded: bool) -> Trainer:
        trainer = Trainer(TrainConfig(steps=steps, device=device, progress=False,
                                      record_every=0, checkpoint_every=0))
        if guarded:
            Guard("stop").attach(trainer)
        return trainer

    bare, guarded = make(False), make(True)
    times = {"bare": [], "guard": []}
    for i in range(steps):
        pair = [("bare", bare), ("guard", guarded)]
        for kind, trainer in pair if i % 2 else pair[::-1]:
            t0 = time.perf_counter()
            trainer.train_step()  # ends in a host sync (loss and grad norm)
            times[kind].append(time.perf_counter() - t0)
    warm = slice(10, None)  # the first steps pay for kernel launches and caches
    return float(np.median(np.array(times["guard"][warm]) / np.array(times["bare"][warm])))


def notebook_rows(deadline: float, per_notebook_s: int) -> list[dict]:
    rows = []
    for nb in sorted((ROOT / "solutions").glob("*.ipynb")):
        left = deadline - time.monotonic()
        if left < 30:
            rows.append({"notebook": nb.name, "ok": None, "note": "not run: time budget spent"})
            continue
        t0 = time.monotonic()
        cmd = [sys.executable, "-m", "pytest", "-p", "nanlab.course.pytest_plugin",
               "--nbval-lax", str(nb.relative_to(ROOT)), "-q", "-p", "no:cacheprovider"]
        try:
            done = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True,
                                  timeout=min(per_notebook_s, left))
            tail = (done.stdout.strip().splitlines() or [""])[-1]
            rows.append({"notebook": nb.name, "ok": done.returncode == 0, "note": tail[:70]})
        except subprocess.TimeoutExpired:
            rows.append({"notebook": nb.name, "ok": False, "note": "timed out"})
        rows[-1]["seconds"] = round(time.monotonic() - t0, 1)
    return rows


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--device", default="cuda", help="cuda (default) or cpu (dry run)")
    parser.add_argument("--faults", default="", help="comma-separated names; default all")
    parser.add_argument("--no-diagnose", action="store_true")
    parser.add_argument("--no-notebooks", action="store_true")
    parser.add_argument("--budget", type=float, default=540.0, help="seconds in all")
    parser.add_argument("--per-notebook", type=int, default=150, help="seconds each")
    args = parser.parse_args()

    os.environ.setdefault("CUBLAS_WORKSPACE_CONFIG", ":4096:8")  # before CUDA starts
    import torch

    if args.device.startswith("cuda") and not torch.cuda.is_available():
        print("gpu_check: no CUDA GPU on this machine (torch.cuda.is_available() is "
              "False); nothing to check. Use --device cpu for a dry run.")
        return 0
    torch.use_deterministic_algorithms(True, warn_only=True)
    start = time.monotonic()
    deadline = start + args.budget

    from nanlab import faults

    names = [n for n in args.faults.split(",") if n] or sorted(faults.FAULTS)
    for n in names:
        faults.get_fault(n)  # an unknown name: a clear error before anything runs
    where = torch.cuda.get_device_name(0) if args.device.startswith("cuda") else "CPU"
    print(f"gpu_check on {where}, torch {torch.__version__}, device={args.device}")
    # TF32 decides how exact the fp32 baselines (the clean run, the amp_off replays) are
    print(f"fp32 matmul precision {torch.get_float32_matmul_precision()!r}, "
          f"cuda.matmul.allow_tf32={torch.backends.cuda.matmul.allow_tf32}, "
          f"cudnn.allow_tf32={torch.backends.cudnn.allow_tf32}")
    # notebooks get what is left after the faults and the guard, at least a third
    fault_deadline = start + (args.budget * (2 / 3 if not args.no_notebooks else 1.0))
    frows = fault_rows(names, args.device, not args.no_diagnose, fault_deadline)
    ratio = guard_ratio(args.device) if time.monotonic() < deadline - 60 else None
    nrows = [] if args.no_notebooks or not args.device.startswith("cuda") else \
        notebook_rows(deadline, args.per_notebook)

    print(f"\n{'fault':18} {'declared':9} {'shows':9} {'bad step':>8} {'cure':15} "
          f"{'cured':6} {'diagnosed':17} {'ok':4} {'s':>6}  note")
    for r in frows:
        print(f"{r['fault']:18} {r['declared']:9} {r.get('shows', '-'):9} "
              f"{str(r.get('first_bad_step', '-')):>8} {r.get('cure', '-'):15} "
              f"{str(r.get('cured', '-')):6} {str(r.get('diagnosed', '-')):17} "
              f"{'yes' if r.get('ok') else 'NO':4} {r.get('seconds', 0):6.1f}  "
              f"{r.get('note', '')}")
    shown = f"{ratio:.3f}" if ratio is not None else "not run (time)"
    print(f"\nguard overhead (Guard('stop') / bare, median per step): {shown}")
    for r in nrows:
        status = {True: "pass", False: "FAIL", None: "skip"}[r["ok"]]
        print(f"notebook {r['notebook']:28} {status:5} {r.get('seconds', 0):6.1f}s  {r['note']}")
    summary = {"device": where, "faults_ok": sum(bool(r.get("ok")) for r in frows),
               "faults": len(frows), "guard_ratio": ratio,
               "notebooks_passed": sum(r["ok"] is True for r in nrows),
               "notebooks": len(nrows), "seconds": round(time.monotonic() - start, 1),
               "rows": frows, "notebook_rows": nrows}
    print(json.dumps(summary, default=str))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
