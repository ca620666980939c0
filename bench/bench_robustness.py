"""Does each fault fail at the same step whatever the summation order? (thread count)

A fault whose failing step moves a lot, or disappears, with the number of CPU threads is
a run on the edge: on another CPU, or on a GPU, it may not fail where the text says. For
each built-in fault: the step of its signature (first non-finite step, crash or spike;
for a divergence or a stall the final loss instead) on 1, 2 and 4 torch threads, 200
steps, the run stopped once poisoned. The labs pin one thread
(``nanlab.course.checks.start_lab``), so they are exact on CPU either way.

Run:  .venv/bin/python bench/bench_robustness.py  [--faults deep_explosion high_lr]
      [--threads 1 2]   (set OMP_NUM_THREADS to the largest count too, so the pool exists)
The last line is JSON, to quote. Asserts nothing.
"""

from __future__ import annotations

import argparse
import json

import torch

from nanlab import faults
from nanlab.analysis.signals import final_loss, find_spikes

THREADS = (1, 2, 4)


def failing_step(name: str) -> int | float | None:
    """The step of the fault's signature; for a divergence or a stall, the final loss."""
    run = faults.run_fault(name, stop_when_poisoned=True, record_every=0)
    signature = faults.get_fault(name).signature
    if signature in ("diverge", "stall"):
        return round(final_loss(run.record.losses()), 1)
    if signature == "spike":
        spikes = find_spikes(run.record.losses())
        return spikes[0] if spikes else None
    return run.first_bad_step  # the crash step, or the first non-finite one


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--faults", nargs="*", default=sorted(faults.FAULTS))
    parser.add_argument("--threads", nargs="+", type=int, default=list(THREADS))
    args = parser.parse_args()
    table = {}
    for name in args.faults:
        steps = []
        for n in args.threads:
            torch.set_num_threads(n)
            steps.append(failing_step(name))
        table[name] = steps
        known = [s for s in steps if s is not None]
        verdict = ("never fails" if not known else "same step" if len(set(steps)) == 1
                   else "ON THE EDGE" if None in steps else f"moves by {max(known) - min(known)}")
        print(f"{name:18} threads {tuple(args.threads)}: {steps}  {verdict}", flush=True)
    print(json.dumps(table))


if __name__ == "__main__":
    main()
