"""The "any model" suite: diagnose names the cause and proves the fix on models nanlab
did not make (tests/foreign_scenarios.py)."""

import warnings

import pytest
import torch
from foreign_scenarios import SCENARIOS, base, mlp, mse, sensor_batch

from nanlab import faults
from nanlab.debug import diagnose
from nanlab.errors import NanlabError
from nanlab.train import Trainer


def test_the_suite_covers_what_any_model_means():
    assert len(SCENARIOS) >= 12
    assert len({s.kind.split(" (")[0] for s in SCENARIOS}) >= 6
    assert {s.config.precision for s in SCENARIOS} >= {"fp32", "fp16", "bf16"}
    assert sum(s.own_optimizer for s in SCENARIOS) >= 3
    assert sum(s.own_fault for s in SCENARIOS) * 2 >= len(SCENARIOS)


@pytest.mark.parametrize("scenario", SCENARIOS, ids=lambda s: s.name)
def test_diagnose_names_the_cause_and_proves_the_fix(scenario):
    if scenario.missing:
        pytest.skip(f"needs {scenario.missing}")
    trainer = scenario.bad_run()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        d = diagnose(trainer, build=scenario.build)
    if scenario.family == "user_code":  # the cure is a clamp in the user's code: no fix
        assert (d.cause, d.fix) == ("user_code", None), d.report()
        assert scenario.where in d.report(), d.report()
    else:
        assert (d.cause, d.fix, d.fix_verified) == (scenario.family, scenario.fix, True), \
            d.report()


# -- bad arguments: one clear line each, naming what was wrong --------------------------
def _mlp_trainer(config):
    torch.manual_seed(config.seed)
    return Trainer(config, model=mlp(), batches=sensor_batch, loss_fn=mse)


def test_nan_input_on_integer_ids_says_which_input_it_needs_at_inject_time():
    with pytest.raises(NanlabError, match=r"inputs='input_ids' is a torch.int64 tensor"):
        faults.inject("nan_input", at_step=0, inputs="input_ids",
                      batches=lambda s: {"input_ids": torch.zeros(2, 3).long()})


def test_a_build_that_returns_no_trainer_is_named():
    trainer = _mlp_trainer(base(steps=20))
    trainer.run()
    with pytest.raises(NanlabError, match="must return a nanlab Trainer; got Linear"):
        diagnose(trainer, build=lambda config: torch.nn.Linear(2, 2))


def test_locate_without_checkpoints_says_how_to_get_them():
    from nanlab.debug import locate

    trainer = _mlp_trainer(base(steps=20, checkpoint_every=0))
    trainer.run()
    with pytest.raises(NanlabError, match="checkpoint_every > 0"):
        locate(trainer, step=10)
