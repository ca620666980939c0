"""The instructor's table: every registered fault on each healthy model nanlab did not make.

The models are the fault-anywhere suite's (``tests/foreign_models.py``: TinyEncoderLM, a
VAE with a Gaussian decoder, a pre-norm encoder-decoder with key-padding masks, a 1-D
conv regressor and an MLP regressor in raw units), each in the instructors' plain loop
(AdamW, 40 steps, one torch thread) with the fault applied by ``faults.inject``; a
fault with a step strikes at step 10. The LR and optimizer-state faults (``high_lr``,
``high_lr_adam``, ``lr_jump``, ``resume_fresh_optimizer``) run in the tuned loop instead
(``foreign_models.TUNED``: AdamW at the LR sweep's best, warmup + cosine, 100 steps,
the fault's step 40): an update too large for a run only shows on a run near its edge.
A cell is "fires at k: how" (a crash, a non-finite loss, a loss 3x above the clean
run's highest so far), "refuses: its line" (at inject time), "refuses mid-run" or
"silent" ("warns" when the fault said its trigger never showed; a silent cell of the
tuned loop says why under the table). ``--markdown`` prints the table as
``docs/guides/faults.md`` publishes it ("Faults on your own model"), with each fault's
refusal line cut to its first clause.

Run:  .venv/bin/python bench/bench_faults_anywhere.py  [--faults nan_input ...] [--markdown]
(about 80 s on 2 cores). The last line is JSON, to quote. Asserts nothing.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))
from foreign_models import FOREIGN, SILENT_BECAUSE, loop_for, outcome, plain_loop  # noqa: E402

from nanlab import faults  # noqa: E402


def compact(got) -> str:
    """A table cell in a few words: "NaN at 10", "refuses", "silent, warns"."""
    if got.kind == "fires":
        return f"{got.short} at {got.step}"
    if got.kind == "late":
        return f"refuses mid-run at {got.step}"
    if got.kind == "refused":
        return "refuses"
    return "silent, warns" if got.warnings else "silent"


def reason(got) -> str:
    """A refusal's line without the fault's name, up to its first ';'."""
    line = got.detail.split("cannot be applied to a foreign model: ", 1)[-1]
    line = line.removeprefix(got.detail.split(":", 1)[0] + ": ") if ":" in line else line
    return line.split(";")[0].split(" (")[0].split(", and ")[0].split(": build")[0] \
        .replace("|", "/")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--faults", nargs="*", default=sorted(faults.FAULTS))
    parser.add_argument("--markdown", action="store_true")
    args = parser.parse_args()
    torch.set_num_threads(1)
    clean = {}  # the clean run of each model in each loop, run once
    table, seconds, refusals, why = {}, {}, {}, {}
    for name in args.faults:
        loop, p = loop_for(name)
        for m, spec in FOREIGN.items():
            key = (m, *loop.values())
            if key not in clean:
                clean[key] = plain_loop(spec, None, **loop)[0]
            t = time.perf_counter()
            got = outcome(spec, name, clean[key], **loop, **p)
            seconds[name, m] = time.perf_counter() - t
            table.setdefault(name, {})[m] = compact(got)
            if got.kind == "refused":
                refusals.setdefault(name, reason(got))
            if got.kind == "silent" and (name, m) in SILENT_BECAUSE:
                why[name, m] = SILENT_BECAUSE[name, m]
                table[name][m] += " (why below)"
            if not args.markdown:
                print(f"{name:26s} {m:15s} {seconds[name, m]:5.2f}s  {got.cell()}")
    if args.markdown:
        print("| fault | " + " | ".join(FOREIGN) + " | a refusal says |")
        print("|---" * (len(FOREIGN) + 2) + "|")
        for name, cells in table.items():
            print(f"| `{name}` | " + " | ".join(cells[m] for m in FOREIGN)
                  + f" | {refusals.get(name, '')} |")
        if why:
            print("\nWhy a cell of the tuned loop stays silent:\n")
            for (name, m), text in why.items():
                print(f"- `{name}` on {m}: {text}")
    fired = {n: sum(" at " in c and not c.startswith("refuses") for c in cells.values())
             for n, cells in table.items()}
    print(json.dumps({"loops": {n: loop_for(n)[0]["schedule"] for n in table},
                      "models": list(FOREIGN), "table": table, "why_silent": {
                          f"{n} on {m}": text for (n, m), text in why.items()},
                      "fires_on": fired, "seconds": round(sum(seconds.values()), 1)}))

if __name__ == "__main__":
    main()
