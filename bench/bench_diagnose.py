"""Seconds ``diagnose`` takes on each built-in fault, and whether it names the right cause.

For each fault: one failed run (stopped once a non-finite update reached the weights,
checkpoints every 10 steps), then ``diagnose(run)`` timed once: the SOP's controlled
replays (data, AMP off, LR / 10, grad norms, init / eps) and the replay proving the fix.
One process, one torch thread. Right means the diagnosed fix is the fault's own cure.

Run:  .venv/bin/python bench/bench_diagnose.py  [--faults nan_input tiny_eps]
The last line is JSON, to quote. Asserts nothing.
"""

from __future__ import annotations

import argparse
import json
import os
import time

import torch

from nanlab import faults
from nanlab.debug.diagnose import diagnose


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--faults", nargs="*", default=sorted(faults.FAULTS))
    args = parser.parse_args()
    torch.set_num_threads(1)
    results = {}
    for name in args.faults:
        run = faults.run_fault(name, checkpoint_every=10, stop_when_poisoned=True)
        start = time.perf_counter()
        found = diagnose(run)
        seconds = time.perf_counter() - start
        cure = faults.get_fault(name).cure
        right = found.fix == cure
        results[name] = {"seconds": round(seconds, 1), "cause": found.cause, "fix": found.fix,
                         "expected_fix": cure, "right": right}
        print(f"{name:18} {seconds:6.1f} s  cause {found.cause!s:22} fix {found.fix!s:15} "
              f"{'right' if right else 'expected ' + str(cure)}", flush=True)
    right = sum(r["right"] for r in results.values())
    print(f"{right} of {len(results)} diagnosed with their own cure; "
          f"total {sum(r['seconds'] for r in results.values()):.0f} s")
    print(json.dumps({"faults": results, "load_1min": round(os.getloadavg()[0], 2)}))


if __name__ == "__main__":
    main()
