"""diagnose names the right root cause for every built-in fault and on foreign models."""

import json
import subprocess
import sys

import pytest
import torch
from foreign_models import TinyEncoderLM, classifier_loss, lm_batches, lm_loss
from shared_runs import shared_diagnosis

from nanlab import faults
from nanlab.debug.diagnose import diagnose, load_run
from nanlab.errors import NanlabError
from nanlab.train import TrainConfig, Trainer

EXPECTED_DETAIL = {"no_warmup": "no_warmup", "lr_jump": "lr_jump",
                   "resume_fresh_optimizer": "resume_fresh_optimizer",
                   "resume_reset_schedule": "resume_reset_schedule",
                   "adam_unfreeze_spike": "adam_unfreeze_spike",
                   "oov_token": "oov_token", "oov_token_masked": "oov_token_masked",
                   "repeated_token_shard": "repeated_token_shard",
                   **{n: n for n, f in faults.FAULTS.items() if f.family == "grad_accum"}}


@pytest.mark.parametrize("name", sorted(faults.FAULTS))
def test_diagnose_names_the_cause_of_every_builtin_fault(name):
    fault = faults.get_fault(name)
    # every run is read back from its folder (shared_run), as `nanlab diagnose FOLDER` reads
    # one: bit_flip's replay of a step its record went through is clean, as on the live run
    d = shared_diagnosis(name)  # the families' own tests read the same diagnosis
    assert d.cause == fault.family, d.report()
    if name in EXPECTED_DETAIL:
        assert d.detail == EXPECTED_DETAIL[name]
    if fault.cure:
        assert d.fix == fault.cure, d.report()
        assert d.fix_verified, d.report()
    assert d.evidence and any(ch.isdigit() for ch in " ".join(d.evidence))
    report = d.report()
    assert "root cause" in report and fault.family in report
    json.dumps(d.to_dict())  # data, JSON-safe
    if name == "high_lr":  # AMP off hides a high LR (fp16 overflows first) but fools no one
        amp = next(f for f in d.findings if f.step == "amp")
        assert amp.verdict == "ruled out" and "only made the problem loud" in amp.text


def test_a_healthy_run_has_nothing_to_fix():
    d = diagnose(faults.run_fault(None, steps=150))
    assert d.symptom == "healthy" and d.cause is None


def test_diagnose_and_locate_a_run_folder_from_the_cli(tmp_path):
    out = tmp_path / "run"
    faults.run_fault("all_masked", at_step=12, steps=30, out_dir=str(out))
    run = load_run(out)
    assert run.record.first_nonfinite_step == 12
    cli = subprocess.run([sys.executable, "-m", "nanlab", "diagnose", str(out), "--json"],
                         capture_output=True, text=True, timeout=300)
    assert cli.returncode == 0, cli.stderr
    result = json.loads(cli.stdout)
    assert result["cause"] == "dirty_data" and result["fix_verified"]
    loc = subprocess.run([sys.executable, "-m", "nanlab", "locate", str(out)],
                         capture_output=True, text=True, timeout=300)
    assert loc.returncode == 0 and "loss" in loc.stdout


def test_bad_arguments():
    with pytest.raises(NanlabError, match="not a nanlab run folder"):
        diagnose("/nonexistent/run")
    with pytest.raises(NanlabError, match="needs build="):
        diagnose(Trainer(TrainConfig(steps=2, progress=False)))
    with pytest.raises(NanlabError, match="takes a FaultRun"):
        diagnose(42)


# -- models nanlab does not ship --------------------------------------------------------
def build_encoder_with_nan_input(config):
    torch.manual_seed(config.seed)
    trainer = Trainer(config, model=TinyEncoderLM(), batches=lm_batches, loss_fn=lm_loss)
    inj = faults.inject("nan_input", batches=lm_batches, inputs="x", at_step=30)
    trainer.batches = inj.batches
    return trainer


def mlp_batches(step):
    g = torch.Generator().manual_seed(step)
    x = torch.randn(64, 8, generator=g)
    return x, (x[:, :2].sum(1) > 0).long()


def build_mlp(config):
    torch.manual_seed(config.seed)
    model = torch.nn.Sequential(torch.nn.Linear(8, 64), torch.nn.ReLU(),
                                torch.nn.Linear(64, 64), torch.nn.ReLU(), torch.nn.Linear(64, 2))
    return Trainer(config, model=model, batches=mlp_batches, loss_fn=classifier_loss)


def test_diagnose_dirty_data_in_a_foreign_encoder():
    config = TrainConfig(steps=100, lr=1e-3, progress=False, checkpoint_every=10)
    trainer = build_encoder_with_nan_input(config)
    trainer.run()
    d = diagnose(trainer, build=build_encoder_with_nan_input)
    assert d.symptom == "nonfinite" and d.symptom_step == 30
    assert d.cause == "dirty_data" and d.fix == "validate_data" and d.fix_verified, d.report()


def test_diagnose_a_too_high_lr_in_a_foreign_mlp():
    config = TrainConfig(steps=120, optimizer="sgd", lr=5.0, warmup_steps=0, progress=False,
                         checkpoint_every=10)
    trainer = build_mlp(config)
    trainer.run()
    d = diagnose(trainer, build=build_mlp)
    assert d.symptom in ("nonfinite", "diverge")
    assert d.cause == "learning_rate", d.report()
