"""Steps and wall seconds to failure for every fault, and the wall time of the full
fault x fix matrix. Prints a table and a JSON line; asserts nothing.

    .venv/bin/python bench/bench_faults.py            # faults only (~1 min)
    .venv/bin/python bench/bench_faults.py --matrix   # and the full matrix (~13 min on 2 cores)
"""

import json
import sys
import time

import torch

from nanlab import faults
from nanlab.analysis.signals import find_spikes, is_stalled


def first_failure(run) -> int | None:
    """The step at which the fault showed itself: non-finite, crash, spike or stall."""
    if run.first_bad_step is not None:
        return run.first_bad_step
    spikes = [s for s in find_spikes(run.record.losses()) if s >= 10]
    if spikes:
        return spikes[0]
    return None


def main() -> None:
    torch.set_num_threads(1)
    rows = {}
    print(f"{'fault':18} {'signature':9} {'fails at':>8} {'seconds':>8}  note")
    for name, fault in faults.FAULTS.items():
        start = time.perf_counter()
        seen = {}

        def stamp(trainer, info, seen=seen, start=start):
            if "t" not in seen and (not info.row["finite"]):
                seen["t"] = time.perf_counter() - start
        # A stall shows by step 60 (the clean run is at ~1.5 there, a stalled one at ~3.5).
        steps = 60 if fault.signature == "stall" else 300
        run = faults.run_fault(name, steps=steps, stop_when_poisoned=True,
                               callbacks=[("on_step_end", stamp)])
        total = time.perf_counter() - start
        step = first_failure(run)
        note = ""
        if fault.signature == "stall":
            note = f"stalled after {steps} steps: {is_stalled(run.record.losses())}"
            step = steps if is_stalled(run.record.losses()) else None
        if fault.signature == "diverge":
            losses = run.record.losses()
            note = f"final loss {losses[-1]:.3g} (clean: ~0.02)"
            above = [i for i, v in enumerate(losses) if i > 50 and v > 1.0]
            step = above[0] if above else None  # still above 1.0 after step 50: diverged
        seconds = seen.get("t", total)
        rows[name] = {"signature": fault.signature, "fails_at_step": step,
                      "seconds": round(seconds, 2)}
        print(f"{name:18} {fault.signature:9} {str(step):>8} {seconds:8.2f}  {note}")
    result = {"bench": "faults", "threads": 1, "faults": rows}
    if "--matrix" in sys.argv:
        from nanlab.faults.matrix import fault_fix_matrix

        start = time.perf_counter()
        m = fault_fix_matrix(progress=False, workers=2)
        result["matrix_wall_s"] = round(time.perf_counter() - start, 1)
        result["matrix_cells"] = len(m.cells)
        print(m.table())
        print(f"matrix: {len(m.cells)} cells in {result['matrix_wall_s']} s")
    print(json.dumps(result))


if __name__ == "__main__":
    main()
