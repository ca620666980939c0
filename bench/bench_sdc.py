"""Silent data corruption (``bit_flip``, family hardware) measured on the toy: the NaN and
the finite spike it makes, the guard's rerun against the plain skip and the wrong fixes
(each a 200-step run judged against the clean run), and diagnose's verdict. Prints a
table and a JSON line; asserts nothing.

    OMP_NUM_THREADS=1 .venv/bin/python bench/bench_sdc.py      # about 3 minutes on 1 core
"""

import json

import torch

from nanlab import faults
from nanlab.analysis.judge import judge
from nanlab.analysis.signals import final_loss
from nanlab.debug.diagnose import diagnose

STEPS = 200
SPIKE = {"layer": -1, "bit": -3, "element": 33}  # a logit times 2^64: finite


def same_weights(a, b) -> bool:
    return all(torch.equal(p, q) for p, q in zip(a.trainer.model.parameters(),
                                                 b.trainer.model.parameters(), strict=True))


def main() -> None:
    clean = faults.run_fault(None, steps=STEPS)
    clean_final = final_loss(clean.record.losses())
    rows = []
    for label, params in (("default (first nn.Linear, bit -2)", {}),
                          ("spike variant (lm_head, bit -3, element 33)", SPIKE)):
        for fix in (None, "guard_rerun", "skip_nonfinite", "validate_data", "lr_div10",
                    "grad_clip"):
            run = faults.run_fault("bit_flip", fixes=[fix] if fix else [], steps=STEPS,
                                   **params)
            losses = run.record.losses()
            rerun = [e for e in run.record.events if e["kind"] == "rerun"]
            v = judge(run, clean=clean_final)
            rows.append({"variant": label, "fix": fix or "(none)", "verdict": v.kind,
                         "loss_at_40": float(losses[40]) if len(losses) > 40 else None,
                         "rerun": rerun[0]["verdict"] if rerun else None,
                         "final": round(final_loss(losses), 4),
                         "identical_to_clean": same_weights(run, clean)})
    for r in rows:
        print(f"{r['variant']:44s} {r['fix']:15s} {r['verdict']:10s} loss@40 "
              f"{r['loss_at_40']:.4g}  rerun {r['rerun']}  final {r['final']}  "
              f"clean bit for bit: {r['identical_to_clean']}")
    d = diagnose(faults.run_fault("bit_flip", steps=60, checkpoint_every=10))
    print(d.report())
    print(json.dumps({"clean_final": clean_final, "rows": rows,
                      "diagnose": {"cause": d.cause, "detail": d.detail, "fix": d.fix,
                                   "verified": d.fix_verified}}))


if __name__ == "__main__":
    main()
