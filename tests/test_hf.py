"""Hugging Face GPT-2 and Llama as a tested target (the ``nanlab[hf]`` extra).

Both are built from a tiny config (nothing is downloaded) and trained through nanlab's
Trainer. Each applicable fault is injected with ``faults.inject`` as an instructor would;
then diagnose must name the cause and prove its fix, locate must name a module of the
model, and ``Guard("recover")`` must bring the run to the end with a finite loss.

Applicable means the fault fires on these models by its mechanism. Not here: ``high_lr``
/ ``lr_jump`` at their default sizes (a 2-layer model with pre-norm stays finite: a
divergence without NaN, which the suite in test_any_model covers with SGD and AdamW at
LR 1), and ``tiny_eps`` on GPT-2 (its LayerNorms never meet a zero-variance row; Llama's
RMSNorm does, on an all-zero padding embedding).
"""

from __future__ import annotations

import warnings

import pytest
import torch
from foreign_scenarios import IGNORE, base, counting_ids, gpt2, hf_loss, llama, lm_batch

from nanlab import faults
from nanlab.debug import diagnose, locate
from nanlab.guard import Guard
from nanlab.train import Trainer

pytest.importorskip("transformers")

STEPS = 60  # the faults strike at step 30; checkpoints every 10


def embeds_batches(model, pad_every: int = 0):
    """Batches of input embeddings (the form ``nan_input`` needs); with ``pad_every``, every
    that-many'th position is padding: an all-zero embedding row, its label masked."""
    def batches(step):
        ids = counting_ids(step)
        with torch.no_grad():
            x = model.get_input_embeddings()(ids).detach()
        labels = ids.clone()
        if pad_every:
            x[:, ::pad_every] = 0.0
            labels[:, ::pad_every] = IGNORE
        return {"inputs_embeds": x, "labels": labels}
    return batches


def make(arch: str, fault: str, config):
    """The whole run from a config: model, fault injected by nanlab, Trainer."""
    torch.manual_seed(config.seed)
    model = gpt2() if arch == "gpt2" else llama()
    if fault == "nan_input":
        injection = faults.inject("nan_input", batches=embeds_batches(model),
                                  inputs="inputs_embeds", at_step=30)
    elif fault == "tiny_eps":
        injection = faults.inject("tiny_eps", model=model,
                                  batches=embeds_batches(model, pad_every=4))
    elif fault == "bad_init":
        injection = faults.inject("bad_init", model=model, batches=lm_batch)
    else:
        injection = faults.inject(fault, batches=lm_batch, labels="labels", at_step=30)
    return Trainer(config, model=model, batches=injection.batches,
                   loss_fn=hf_loss)


CASES = [  # (arch, fault, the cause diagnose must name, the fix it must prove)
    ("gpt2", "illegal_label", "dirty_data", "validate_data"),
    ("gpt2", "all_masked", "dirty_data", "validate_data"),
    ("gpt2", "nan_input", "dirty_data", "validate_data"),
    ("gpt2", "bad_init", "bad_init", "sane_init"),
    ("llama", "illegal_label", "dirty_data", "validate_data"),
    ("llama", "all_masked", "dirty_data", "validate_data"),
    ("llama", "nan_input", "dirty_data", "validate_data"),
    ("llama", "tiny_eps", "tiny_eps", "norm_eps"),
]


def run_quietly(trainer):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        try:
            trainer.run()
        except Exception:  # noqa: BLE001 - a crash (an illegal label) is the symptom
            pass
    return trainer


@pytest.mark.parametrize("arch, fault, cause, fix", CASES, ids=lambda v: str(v))
def test_diagnose_names_the_cause_and_proves_the_fix(arch, fault, cause, fix):
    config = base(steps=STEPS)
    trainer = run_quietly(make(arch, fault, config))
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        d = diagnose(trainer, build=lambda c: make(arch, fault, c))
    assert (d.cause, d.fix, d.fix_verified) == (cause, fix, True), d.report()


LOCATED = [  # (arch, fault, where locate must find the first non-finite value)
    ("gpt2", "all_masked", "(model)"),  # the loss's 0 / 0, computed inside HF's forward
    ("llama", "all_masked", "(model)"),
    ("gpt2", "nan_input", "data"),  # the NaN came in with the batch
    ("llama", "nan_input", "data"),
    ("llama", "tiny_eps", "model.layers.0.input_layernorm"),  # RMSNorm of a zero row
]


@pytest.mark.parametrize("arch, fault, where", LOCATED, ids=lambda v: str(v))
def test_locate_names_where_the_nan_was_made(arch, fault, where):
    """(An illegal label raises instead of making a NaN, and GPT-2's bad init diverges
    without one: neither has a non-finite value to locate.)"""
    trainer = run_quietly(make(arch, fault, base(steps=STEPS)))
    loc = locate(trainer)
    assert loc.step == trainer.record.first_nonfinite_step
    assert (loc.pass_name if where == "data" else loc.module) == where, loc


@pytest.mark.parametrize("arch", ["gpt2", "llama"])
def test_guard_recover_survives_a_dirty_batch(arch):
    trainer = make(arch, "nan_input", base(steps=STEPS))
    guard = Guard("recover").attach(trainer)
    record = run_quietly(trainer).record
    assert guard.summary()["incidents"] == 1
    assert record.steps[-1]["step"] == STEPS - 1
    assert torch.isfinite(torch.tensor(record.steps[-1]["loss"]))
