"""Every fault fails by its real mechanism, within 300 steps, with its own signature."""

import math
import warnings

import numpy as np
import pytest
import torch
from foreign_models import TinyEncoderLM, classifier_loss, lm_batches, lm_loss
from shared_runs import shared_run

from nanlab import faults
from nanlab.analysis.judge import judge
from nanlab.analysis.signals import final_loss, find_spikes, is_stalled, recovery_steps
from nanlab.errors import NanlabError
from nanlab.toy.data import CountingTask

CLEAN_FINAL = 0.1  # the clean run is below this by step 200 (see test_train)


def observed(run) -> str:
    losses = run.record.losses()
    if run.error:
        return "error"
    if run.record.first_nonfinite_step is not None:
        return "nonfinite"
    if is_stalled(losses):
        return "stall"
    spikes = [s for s in find_spikes(losses) if s >= 10]
    if spikes and recovery_steps(losses, spikes[0]) is not None:
        return "spike"
    if final_loss(losses) > 5 * CLEAN_FINAL:
        return "diverge"
    return "healthy"


STEPS = {"sigmoid_chain": 60, "dead_relu": 100}


def default_run(name: str) -> faults.FaultRun:
    """The default variant, stopped once poisoned: the run test_diagnose diagnoses (checkpoints
    every 10 steps, which change nothing in the numbers), trained once per session."""
    return shared_run(name, checkpoint_every=10, stop_when_poisoned=True,
                      **({"steps": STEPS[name]} if name in STEPS else {}))


@pytest.mark.parametrize("name", sorted(faults.FAULTS))
def test_default_variant_shows_its_signature_within_300_steps(name):
    fault = faults.get_fault(name)
    run = default_run(name)
    assert observed(run) == fault.signature, run.record.summary()
    assert judge(run).kind == fault.signature, judge(run)  # the library's one judge agrees
    if fault.signature in ("nonfinite", "error"):
        assert run.first_bad_step is not None and run.first_bad_step < 300


@pytest.mark.parametrize("name", [n for n, f in sorted(faults.FAULTS.items())
                                  if f.signature == "nonfinite"])
def test_nonfinite_comes_from_arithmetic_not_from_state(name):
    """Training starts from finite weights, the step before the first bad one is finite,
    and for every fault that is not dirty data each batch is finite too: the NaN is made
    by the arithmetic of the forward pass, the backward pass or the optimizer update."""
    run = default_run(name)  # checkpoint 0 is the only one read
    bad = run.record.first_nonfinite_step
    start = run.trainer.checkpoints.load(0)
    assert all(torch.isfinite(v).all() for v in start["model"].values() if v.is_floating_point())
    assert all(r["finite"] for r in run.record.steps[:bad])
    if faults.get_fault(name).family != "dirty_data":
        for row in run.record.steps[:bad + 1]:
            assert torch.isfinite(run.trainer.batches(row["batch"]).features).all()


def test_zero_std_batch_holds_only_finite_numbers_until_standardised():
    """Its NaN is 0 / 0 inside the pipeline, not a NaN in the data."""
    task = CountingTask()
    fault = faults.get_fault("zero_std")
    fault.install(faults.Injection(batches=task), fault.resolve())
    raw = task.raw_hooks[0](40, task.raw(40))
    assert torch.isfinite(raw.raw_features).all() and raw.raw_features.std() == 0
    assert torch.isnan(task(40).features).all()
    assert torch.isfinite(task(39).features).all()


def test_fp16_overflow_needs_fp16():
    """The hand-written loss overflows once the model is confident: in fp16 only."""
    fp16 = shared_run("fp16_overflow")
    assert 40 <= fp16.record.first_nonfinite_step <= 150
    for fix in ("amp_off", "bf16"):  # the same run, seed and loss in fp32 and in bf16
        run = shared_run("fp16_overflow", fixes=[fix])  # test_cuda_parity reads the bf16 one
        assert "naive_cross_entropy" in repr(run.trainer.loss_fn)  # the same loss
        assert run.record.first_nonfinite_step is None, fix


def test_amp_off_does_not_cure_dirty_data_or_tiny_eps():
    for name in ("nan_input", "tiny_eps"):
        run = faults.run_fault(name, precision="fp16", fixes=["amp_off"], steps=60,
                               stop_when_poisoned=True)
        assert run.trainer.config.precision == "fp32"
        assert run.record.first_nonfinite_step is not None, name


def test_lr_div10_does_not_cure_dirty_data():
    for name in ("nan_input", "all_masked", "zero_std"):
        run = faults.run_fault(name, fixes=["lr_div10"], steps=60, stop_when_poisoned=True)
        assert run.record.first_nonfinite_step == 40, name


def test_validate_data_cures_dirty_data():
    for name in ("nan_input", "all_masked", "zero_std", "illegal_label"):
        run = shared_run(name, fixes=["validate_data"], steps=60)  # nan_input's: test_interview
        assert run.error is None and run.record.first_nonfinite_step is None, name
        assert [e["kind"] for e in run.record.events] == ["bad_batch"], name
        assert run.record.events[0]["batch"] == 40


def test_recoverable_spike_and_unrecoverable_divergence():
    spike = default_run("lr_jump")  # no NaN: stopping when poisoned changes nothing
    losses = spike.record.losses()
    spikes = [s for s in find_spikes(losses) if s >= 10]
    assert spikes and spikes[0] in (100, 101)
    assert recovery_steps(losses, spikes[0]) is not None
    diverged = default_run("high_lr_adam").record.losses()
    assert np.isfinite(diverged).all() and final_loss(diverged) > 1.0


def test_fault_parameters_are_checked():
    with pytest.raises(NanlabError, match=r"nan_input.at_step=-1 .*from 0 to"):
        faults.run_fault("nan_input", at_step=-1)
    with pytest.raises(NanlabError, match="value='zero'.*'nan', 'inf', '-inf'"):
        faults.get_fault("nan_input").resolve(value="zero")
    with pytest.raises(NanlabError, match="has no parameter 'speed'"):
        faults.get_fault("high_lr").resolve(speed=3)
    with pytest.raises(NanlabError, match="fault='nope'"):
        faults.get_fault("nope")
    with pytest.raises(NanlabError, match="n_layer=0"):
        faults.get_fault("bad_init").resolve(n_layer=0)


def test_every_fault_is_declared_completely():
    for fault in faults.FAULTS.values():
        assert fault.summary and fault.mechanism and fault.needs
        assert fault.reveals in faults.SOP_STEPS
        assert "\n" not in fault.summary
        for name, spec in fault.params.items():
            assert fault.resolve()[name] == spec.default


# -- reuse on models nanlab does not ship ---------------------------------------------
def mlp_batches(step):
    g = torch.Generator().manual_seed(step)
    x = torch.randn(32, 6, generator=g)
    return x, (x[:, 0] > 0).long()


def make_mlp():
    return torch.nn.Sequential(torch.nn.Linear(6, 64), torch.nn.ReLU(), torch.nn.Linear(64, 64),
                               torch.nn.ReLU(), torch.nn.Linear(64, 2))


ARCHS = {
    "encoder_lm": (TinyEncoderLM, lm_batches, lm_loss, {"inputs": "x", "labels": "y"}),
    "mlp": (make_mlp, mlp_batches, classifier_loss, {}),
}


def own_loop(arch: str, fault: str, steps: int = 60, opt="sgd", **params) -> list[float]:
    """The user's own training loop; the fault is applied with faults.inject()."""
    make, batches, loss_fn, keys = ARCHS[arch]
    torch.manual_seed(0)
    model = make()
    optimizer = torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.9) if opt == "sgd" \
        else torch.optim.AdamW(model.parameters(), lr=1e-3)
    injection = faults.inject(fault, model=model, optimizer=optimizer, batches=batches,
                              **keys, **params)
    losses = []
    for step in range(steps):
        batch = injection.batches(step)
        loss = loss_fn(model, batch)
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        losses.append(loss.item())
    return losses


@pytest.mark.parametrize("arch", sorted(ARCHS))
def test_inject_dirty_data_into_a_foreign_model(arch):
    losses = own_loop(arch, "nan_input", at_step=20)
    assert all(math.isfinite(v) for v in losses[:20])
    assert all(math.isnan(v) for v in losses[20:])  # the NaN reached the weights


@pytest.mark.parametrize("arch", sorted(ARCHS))
def test_inject_high_lr_into_a_foreign_model(arch):
    losses = own_loop(arch, "high_lr", lr=20.0)
    assert not all(math.isfinite(v) for v in losses) or max(losses) > 100 * losses[0]


@pytest.mark.parametrize("arch", sorted(ARCHS))
def test_inject_bad_init_into_a_foreign_model(arch):
    clean = own_loop(arch, "nan_input", at_step=10_000, steps=1)[0]
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        losses = own_loop(arch, "bad_init", init_std=2.0, steps=20)
    if arch == "encoder_lm":  # its LayerNorms undo most of a large init: said, and it still shows
        assert any("normalisation modules" in str(w.message) for w in caught)
        assert losses[0] > 3 * clean
    else:
        assert not all(math.isfinite(v) for v in losses) or max(losses) > 100 * clean


def test_inject_all_masked_and_illegal_label_into_a_foreign_mlp():
    with pytest.raises(IndexError, match="out of bounds"):
        own_loop("mlp", "illegal_label", at_step=3)


def test_inject_refuses_what_needs_the_builtin_model():
    with pytest.raises(NanlabError, match="cannot be applied to a foreign model"):
        faults.inject("softmax_overflow", model=make_mlp())
    with pytest.raises(NanlabError, match="needs optimizer"):
        faults.inject("high_lr", model=make_mlp(), batches=mlp_batches)


# -- the fault x fix matrix ------------------------------------------------------------
@pytest.fixture(scope="module")
def clean_final():
    return final_loss(shared_run(None).record.losses())  # test_optimizer_state's too


@pytest.mark.parametrize("name", [n for n, f in sorted(faults.FAULTS.items()) if f.cure])
def test_each_fault_is_cured_by_its_own_fix(name, clean_final):
    """The matrix's judge on the fault's runs (200 steps, seed 0, as its cells): the cured
    run is test_cuda_parity's, the untreated one test_diagnose's (stopped once a
    non-finite update reached the weights: the verdict is made by then)."""
    fault = faults.get_fault(name)
    cured = judge(shared_run(name, fixes=[fault.cure]), clean=clean_final)
    assert cured.outcome == "cured", cured
    untreated = shared_run(name, checkpoint_every=10, stop_when_poisoned=True)
    verdict = judge(untreated, clean=clean_final)
    assert verdict.outcome == "not cured", verdict


def test_matrix_table_and_wrong_fixes():
    from nanlab.faults.matrix import fault_fix_matrix

    m = fault_fix_matrix(faults=["nan_input", "tiny_eps"],
                         fixes=["validate_data", "lr_div10", "amp_off", "norm_eps"],
                         workers=1, progress=False)
    assert m.outcome("nan_input", "validate_data") == "cured"
    assert m.outcome("nan_input", "lr_div10") == "not cured"
    assert m.outcome("tiny_eps", "norm_eps") == "cured"
    assert m.outcome("tiny_eps", "lr_div10") == "not cured"
    assert m.outcome("tiny_eps", "amp_off") == "n/a"  # the run is fp32 already
    table = m.table()
    assert "nan_input" in table and "validate_data" in table and "n/a" in table
    data = m.to_dict()
    assert {c["fault"] for c in data["cells"]} == {"nan_input", "tiny_eps"}


def test_every_cell_the_matrix_trains_builds():
    """Where ``Fix.applies`` says a fix acts, the run builds with it: no cell of the full
    matrix stops it with NotApplicable after it started (double_where did, on every fault
    but its own). Decided without training, every fault against every fix."""
    from nanlab.faults.fixes import FIXES, build_with_fixes

    assert len(FIXES) > 30
    refused = []
    for name in faults.FAULTS:
        config = faults.fault_config(name).replace(progress=False, out_dir=None)
        def build(c, name=name):
            return faults.build_fault_trainer(name, c, {})
        for fix in FIXES.values():
            if fix.applies(config, build=build):
                try:
                    build_with_fixes(build, config, [fix.name])
                except NanlabError as e:
                    refused.append((name, fix.name, str(e)))
    assert not refused, refused


def test_a_fix_that_changes_nothing_is_an_error_not_a_silent_clean_run():
    """amp_off on an fp32 run would replay the same run: say so instead of running."""
    with pytest.raises(NanlabError, match="fix 'amp_off' changes nothing in this run"):
        faults.run_fault("tiny_eps", fixes=["amp_off"], steps=2)
