"""The "any model" suite: diagnose names the cause and proves the fix on models nanlab
did not make (tests/foreign_scenarios.py)."""

import importlib.util
import warnings

import pytest
from foreign_scenarios import SCENARIOS

from nanlab.debug import diagnose


def test_the_suite_covers_what_any_model_means():
    assert len(SCENARIOS) >= 12
    assert len({s.kind.split(" (")[0] for s in SCENARIOS}) >= 6
    assert {s.config.precision for s in SCENARIOS} >= {"fp32", "fp16", "bf16"}
    assert sum(s.own_optimizer for s in SCENARIOS) >= 3
    assert sum(s.own_fault for s in SCENARIOS) * 2 >= len(SCENARIOS)


@pytest.mark.parametrize("scenario", SCENARIOS, ids=lambda s: s.name)
def test_diagnose_names_the_cause_and_proves_the_fix(scenario):
    if scenario.needs and importlib.util.find_spec(scenario.needs) is None:
        pytest.skip(f"needs {scenario.needs}")
    trainer = scenario.build(scenario.config)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        try:
            trainer.run()
        except Exception:  # noqa: BLE001 - a crash is this run's symptom, in its record
            pass
        d = diagnose(trainer, build=scenario.build)
    assert (d.cause, d.fix, d.fix_verified) == (scenario.family, scenario.fix, True), d.report()
