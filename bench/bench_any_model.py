"""diagnose on models nanlab did not make: seconds, cause and proof for each scenario.

The scenarios are the "any model" suite of the tests (``tests/foreign_scenarios.py``:
MLPs, a CNN, a GRU, ``nn.TransformerEncoder``, Hugging Face GPT-2 and Llama). For each:
the bad run (the user's own ``Trainer.run()``, a crash kept in the record), then
``diagnose(trainer, build=...)`` timed once. Right means the cause and the fix are the
scenario's truth and the fix was proven by replay. Scenarios needing a package that is
not installed (``transformers``) are listed as skipped. One process, one torch thread.

Run:  .venv/bin/python bench/bench_any_model.py  [--scenarios gru_all_padding ...]
The last line is JSON, to quote. Asserts nothing.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
import warnings
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))
from foreign_scenarios import SCENARIOS  # noqa: E402

from nanlab.debug.diagnose import diagnose  # noqa: E402


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--scenarios", nargs="*", default=[s.name for s in SCENARIOS])
    args = parser.parse_args()
    torch.set_num_threads(1)
    warnings.simplefilter("ignore")
    results = {}
    for scenario in (s for s in SCENARIOS if s.name in args.scenarios):
        if scenario.missing:
            results[scenario.name] = {"skipped": f"needs {scenario.missing}"}
            print(f"{scenario.name:24} skipped (needs {scenario.missing})")
            continue
        trainer = scenario.bad_run()
        start = time.perf_counter()
        found = diagnose(trainer, build=scenario.build)
        seconds = time.perf_counter() - start
        if scenario.family == "user_code":  # the cure is in the user's code: named, not proven
            right = (found.cause, found.fix) == ("user_code", None) and \
                scenario.where in found.report()
        else:
            right = (found.cause, found.fix, found.fix_verified) == \
                (scenario.family, scenario.fix, True)
        results[scenario.name] = {"kind": scenario.kind, "seconds": round(seconds, 1),
                                  "cause": found.cause, "fix": found.fix,
                                  "proven": found.fix_verified, "right": right}
        print(f"{scenario.name:24} {scenario.kind:28} {seconds:5.1f} s  cause "
              f"{found.cause!s:14} fix {found.fix!s:14} proven {found.fix_verified!s:5} "
              f"{'right' if right else 'WRONG'}")
    ran = [r for r in results.values() if "seconds" in r]
    print(f"right: {sum(r['right'] for r in ran)} of {len(ran)}; diagnose seconds: "
          f"total {sum(r['seconds'] for r in ran):.1f}, "
          f"max {max((r['seconds'] for r in ran), default=0):.1f}")
    print(json.dumps(results))


if __name__ == "__main__":
    main()
