"""The instructor's table: every registered fault on each healthy model nanlab did not make.

The models are the fault-anywhere suite's (``tests/foreign_models.py``: TinyEncoderLM, a
VAE with a Gaussian decoder, a pre-norm encoder-decoder with key-padding masks, a 1-D
conv regressor and an MLP regressor in raw units), each in the README's plain loop
(AdamW, 40 steps, one torch thread) with the fault applied by ``faults.inject``; a
fault with a step strikes at step 10. A cell is "fires at k: how" (a crash, a non-finite
loss, a loss 3x above the clean run's highest so far), "refuses: its line" (at inject
time), "refuses mid-run" or "silent" ("warns" when the fault said its trigger never
showed). ``--markdown`` prints the table as the README has it, refusals shortened.

Run:  .venv/bin/python bench/bench_faults_anywhere.py  [--faults nan_input ...] [--markdown]
(about 30 s on 2 cores). The last line is JSON, to quote. Asserts nothing.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))
from foreign_models import FOREIGN, outcome, plain_loop  # noqa: E402

from nanlab import faults  # noqa: E402

STEPS = 40


def short(cell: str) -> str:
    """A refusal's reason cut to its first clause, for a table cell."""
    if not cell.startswith("refuses: "):
        return cell.split(" (", 1)[0] if cell.startswith("fires") else cell
    reason = cell.removeprefix("refuses: ").split(": ", 1)[-1]
    if "cannot be applied to a foreign model: " in cell:
        reason = cell.split("cannot be applied to a foreign model: ", 1)[1]
    return "refuses: " + reason.split(";")[0].split(", and ")[0].split(" (")[0][:70]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--faults", nargs="*", default=sorted(faults.FAULTS))
    parser.add_argument("--markdown", action="store_true")
    args = parser.parse_args()
    torch.set_num_threads(1)
    clean = {m: plain_loop(spec, None, STEPS)[0] for m, spec in FOREIGN.items()}
    table, seconds = {}, {}
    for name in args.faults:
        p = {"at_step": 10} if "at_step" in faults.get_fault(name).params else {}
        for m, spec in FOREIGN.items():
            t = time.perf_counter()
            got = outcome(spec, name, clean[m], STEPS, **p)
            seconds[name, m] = time.perf_counter() - t
            table.setdefault(name, {})[m] = got.cell()
            if not args.markdown:
                print(f"{name:26s} {m:15s} {seconds[name, m]:5.2f}s  {got.cell()}")
    if args.markdown:
        print("| fault | " + " | ".join(FOREIGN) + " |")
        print("|---" * (len(FOREIGN) + 1) + "|")
        for name, cells in table.items():
            print(f"| `{name}` | " + " | ".join(short(cells[m]) for m in FOREIGN) + " |")
    fired = {n: sum(c.startswith("fires") for c in cells.values()) for n, cells in table.items()}
    print(json.dumps({"steps": STEPS, "models": list(FOREIGN), "table": table,
                      "fires_on": fired, "seconds": round(sum(seconds.values()), 1)}))


if __name__ == "__main__":
    main()
