"""What a cheaper toy would change: every fault at today's batch and at a smaller one.

The test suite, the labs and the fault x fix matrix are real runs of the toy, and a step's
cost is its matrix products (``bench_baseline.py``), so the toy's batch sets the floor of
CI and of ``nanlab matrix``. This script measures what halving it would cost in teaching:
for each batch size, the clean run's final loss and seconds, and for each fault its first
non-finite step (or the judge's verdict for a fault that stays finite), and whether its
own cure still cures it by the matrix's judge. Faults run in two processes, one thread
each. Prints a table and a JSON line; asserts nothing.

    .venv/bin/python bench/bench_toy_scale.py                  # batch 32 and 16 (~5 min)
    .venv/bin/python bench/bench_toy_scale.py --batch 32 24 16 high_lr no_warmup
"""

from __future__ import annotations

import argparse
import json
import time
from concurrent.futures import ProcessPoolExecutor


def measure(args: tuple[str | None, int, float | None]) -> dict:
    """One fault (None: the clean run) at one batch size: untreated and with its cure,
    judged as the matrix judges a cell, against the clean run's final loss."""
    import torch

    from nanlab import faults
    from nanlab.analysis.judge import judge
    from nanlab.analysis.signals import final_loss

    torch.set_num_threads(1)
    name, batch, clean = args
    began = time.perf_counter()
    if name is None:
        run = faults.run_fault(None, batch_size=batch)
        return {"fault": None, "batch": batch, "final": final_loss(run.record.losses()),
                "seconds": round(time.perf_counter() - began, 2)}
    fault = faults.get_fault(name)
    untreated = faults.run_fault(name, batch_size=batch, stop_when_poisoned=True)
    verdict = judge(untreated, clean=clean)
    row = {"fault": name, "batch": batch, "first_bad": untreated.record.first_nonfinite_step,
           "untreated": f"{verdict.kind}@{verdict.step}", "cure": fault.cure, "cured": None}
    if fault.cure:
        cured = faults.run_fault(name, batch_size=batch, fixes=[fault.cure])
        row["cured"] = judge(cured, clean=clean).outcome
        row["cured_final"] = round(final_loss(cured.record.losses()), 4)
    row["seconds"] = round(time.perf_counter() - began, 2)
    return row


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--batch", type=int, nargs="+", default=[32, 16])
    parser.add_argument("faults", nargs="*", help="fault names (default: every fault)")
    args = parser.parse_args()
    from nanlab import faults

    names = args.faults or sorted(faults.FAULTS)
    began = time.perf_counter()
    with ProcessPoolExecutor(2) as pool:
        clean = {r["batch"]: r for r in pool.map(measure, [(None, b, None)
                                                            for b in args.batch])}
        jobs = [(n, b, clean[b]["final"]) for n in names for b in args.batch]
        rows = list(pool.map(measure, jobs))
    print("clean run: " + ", ".join(f"batch {b}: final loss {c['final']:.4f} in "
                                     f"{c['seconds']:.1f} s" for b, c in clean.items()))
    head = f"{'fault':26}" + "".join(f"{'batch ' + str(b):>34}" for b in args.batch)
    print(head)
    by = {(r["fault"], r["batch"]): r for r in rows if r["fault"]}
    for n in names:
        cells = []
        for b in args.batch:
            r = by[(n, b)]
            bad = r["untreated"] if r["first_bad"] is None else f"nan@{r['first_bad']}"
            cells.append(f"{bad:>14} {str(r['cured']):>10} {r['seconds']:>8.1f} s")
        print(f"{n:26}" + "".join(f"{c:>34}" for c in cells))
    print("columns per batch: first non-finite step (or the untreated verdict), the cure's "
          "outcome, seconds for both runs")
    summary = {b: {"clean_final": round(clean[b]["final"], 4),
                   "clean_seconds": clean[b]["seconds"],
                   "fault_seconds": round(sum(by[(n, b)]["seconds"] for n in names), 1),
                   "cured": sum(by[(n, b)]["cured"] == "cured" for n in names)}
               for b in args.batch}
    print(json.dumps({"wall_s": round(time.perf_counter() - began, 1), "by_batch": summary,
                      "rows": rows}))


if __name__ == "__main__":
    main()
