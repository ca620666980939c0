"""The detector table on the full corpus: every spike rule's recall, precision, false
alarms per 1,000 healthy steps and median lead before the NaN, with the corpus size and
the time it took (making the corpus, then replaying every rule over it).

Prints numbers and asserts nothing. The same table as ``nanlab detectors``; the
definitions are in ``nanlab/faults/corpus.py``.

Run:  OMP_NUM_THREADS=1 python bench/bench_detectors.py  [--quick]
The last line is JSON, to quote.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import sys

import torch

from nanlab.faults.corpus import detector_table


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="the 5-run corpus")
    args = parser.parse_args()
    print(f"torch {torch.__version__}, threads {torch.get_num_threads()}, "
          f"cpus {os.cpu_count()}", flush=True)
    table = detector_table(size="quick" if args.quick else "full",
                           progress=lambda label: print(f"  run: {label}", file=sys.stderr,
                                                        flush=True))
    print(table.text())
    d = table.to_dict()

    def safe(x):
        return None if isinstance(x, float) and math.isnan(x) else x
    print(json.dumps({"corpus": d["corpus"], "seconds": d["seconds"], "best": d["best"],
                      "rules": {r["rule"]: {k: safe(r[k]) for k in (
                          "recall", "precision", "false_alarms_per_1000_healthy_steps",
                          "median_lead_steps")} for r in d["rules"]}}))


if __name__ == "__main__":
    main()
