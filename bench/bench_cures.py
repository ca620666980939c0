"""The adaptive cures (ZClip, SPAM clipping, StableAdamW update clipping, Gemma 2
soft-capping) measured against the spike and LR faults: the fault x fix matrix cells,
each a real 200-step run judged against the clean run, with the number of steps on which
the cure acted, the spike height and the final loss. Prints a table and a JSON line;
asserts nothing.

    .venv/bin/python bench/bench_cures.py               # spike and LR faults (~2 min x 5)
    .venv/bin/python bench/bench_cures.py --all         # every fault (~4x as long)
    .venv/bin/python bench/bench_cures.py --faults bit_flip oov_token   # these only
    .venv/bin/python bench/bench_cures.py --workers 2
"""

import argparse
import json
import time

from nanlab.faults import FAULTS
from nanlab.faults.fixes import ADAPTIVE_CURES
from nanlab.faults.matrix import fault_fix_matrix, spike_and_lr_faults


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--all", action="store_true", help="every fault, not only spike / LR")
    parser.add_argument("--faults", nargs="+", choices=sorted(FAULTS), metavar="FAULT",
                        help="these faults only")
    parser.add_argument("--workers", type=int, default=1)
    args = parser.parse_args()
    faults = args.faults or (list(FAULTS) if args.all else spike_and_lr_faults())
    start = time.perf_counter()
    m = fault_fix_matrix(faults=faults, fixes=list(ADAPTIVE_CURES), workers=args.workers,
                         progress=False)
    wall = time.perf_counter() - start
    print(m.table())
    print()
    print(f"{'fault':16} {'fix':12} {'outcome':10} {'acted':>5} {'final':>8}  evidence")
    for c in m.cells.values():
        final = f"{c.final_loss:.4g}" if c.final_loss is not None else "-"
        print(f"{c.fault:16} {c.fix or '(none)':12} {c.outcome:10} {c.acted:5d} {final:>8}"
              f"  {c.evidence}")
    counts: dict[str, int] = {}
    for c in m.cells.values():
        if c.fix is not None:
            counts[c.outcome] = counts.get(c.outcome, 0) + 1
    print(f"\n{len(m.cells)} cells ({len(faults)} faults x (none + {len(ADAPTIVE_CURES)} "
          f"cures)) in {wall:.0f} s on {args.workers} worker(s); cure cells: {counts}")
    print(json.dumps({"bench": "cures", "wall_s": round(wall, 1), "workers": args.workers,
                      "outcomes": counts, **m.to_dict()}))


if __name__ == "__main__":
    main()
