"""Each fault's first bad step on every CPU kernel path this machine has, side by side.

PyTorch's CPU kernels sum in an order that depends on the instruction set they were
compiled for (``ATEN_CPU_CAPABILITY``: default, avx2, avx512) and on the thread count,
so a run near a numerical threshold can fail a few steps earlier or later on another
machine. The course teaches bands and mechanisms, not one machine's step; this script
shows how wide the band is. Each path runs in its own process (the capability is read
when torch loads). Prints a table and a JSON line; asserts nothing.

    .venv/bin/python bench/bench_kernel_paths.py                 # every fault (~13 min)
    .venv/bin/python bench/bench_kernel_paths.py high_lr deep_explosion
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from concurrent.futures import ThreadPoolExecutor

AS_AVX2 = {"ATEN_CPU_CAPABILITY": "avx2", "MKL_ENABLE_INSTRUCTIONS": "AVX2",
           "ONEDNN_MAX_CPU_ISA": "AVX2"}


def cpu_flags() -> set[str]:
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith(("flags", "Features")):
                    return set(line.split(":", 1)[1].split())
    except OSError:
        pass
    return set()


def kernel_paths() -> list[tuple[str, dict[str, str]]]:
    """(label, environment) for every path this processor can run.

    ``ATEN_CPU_CAPABILITY`` picks PyTorch's own vectorised kernels (sums, softmax, the
    optimizer); MKL and oneDNN pick their matrix kernels themselves, so "as AVX2" caps
    all three, which is the closest this machine gets to an AVX2-only processor.
    """
    flags = cpu_flags()
    one, two = {"OMP_NUM_THREADS": "1"}, {"OMP_NUM_THREADS": "2"}
    paths = [("default, 1 thread", one), ("default, 2 threads", two),
             ("no vectors, 1 thread", {**one, "ATEN_CPU_CAPABILITY": "default"})]
    if "avx2" in flags:
        paths.append(("aten avx2, 1 thread", {**one, "ATEN_CPU_CAPABILITY": "avx2"}))
        paths.append(("as AVX2, 1 thread", {**one, **AS_AVX2}))
    if "avx512f" in flags:
        paths.append(("aten avx512, 1 thread", {**one, "ATEN_CPU_CAPABILITY": "avx512"}))
    return paths


def worker(names: list[str]) -> None:
    """In a child process: run the faults and print one JSON line of outcomes."""
    import torch

    from nanlab import faults
    from nanlab.analysis.judge import judge

    torch.set_num_threads(int(os.environ.get("OMP_NUM_THREADS", "1")))
    out = {"capability": torch.backends.cpu.get_cpu_capability(), "faults": {}}
    for name in names or list(faults.FAULTS):
        run = faults.run_fault(name, stop_when_poisoned=True)  # its default run: 200 steps
        verdict = judge(run)
        out["faults"][name] = {"kind": verdict.kind, "step": verdict.step}
    print(json.dumps(out))


def main() -> None:
    names = sys.argv[1:]
    paths = kernel_paths()

    def run(path):
        label, env = path
        proc = subprocess.run([sys.executable, __file__, "--worker", *names],
                              env={**os.environ, **env}, capture_output=True, text=True,
                              check=True)
        return label, json.loads(proc.stdout.strip().splitlines()[-1])

    # two 1-thread paths at a time (two cores), a 2-thread path alone
    single = [p for p in paths if p[1]["OMP_NUM_THREADS"] == "1"]
    with ThreadPoolExecutor(max_workers=2) as pool:
        done = dict(pool.map(run, single))
    done |= dict(run(p) for p in paths if p not in single)
    results = {label: done[label] for label, _ in paths}
    labels = list(results)
    faults = list(next(iter(results.values()))["faults"])
    width = max(len(f) for f in faults)
    print(f"{'fault':{width}}  " + "  ".join(f"{lab:>20}" for lab in labels))
    for name in faults:
        cells = []
        for lab in labels:
            r = results[lab]["faults"][name]
            cells.append(f"{r['kind']} @ {r['step']}" if r["step"] is not None else r["kind"])
        print(f"{name:{width}}  " + "  ".join(f"{c:>20}" for c in cells))
    print(json.dumps({"bench": "kernel_paths", "paths": results}))


if __name__ == "__main__":
    if "--worker" in sys.argv:
        worker([a for a in sys.argv[1:] if a != "--worker"])
    else:
        main()
