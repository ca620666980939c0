"""The MoE router family (issue 31): a router in fp16 whose logits grow past exp's range;
the mechanism on plain tensors, the MoE layer's safe defaults, the fault on the toy run,
its two cures, a wrong fix, the diagnose evidence and the refusal on foreign models."""

import math

import pytest
import torch
from foreign_models import FOREIGN, plain_loop

from nanlab import faults
from nanlab.debug.moe_router_checks import exp_limit, router_evidence
from nanlab.errors import NanlabError
from nanlab.faults.fixes import NotApplicable
from nanlab.faults.moe_router import moe_trainer
from nanlab.faults.precision import NaiveSoftmax
from nanlab.layers.moe import MoE, Router, install_moe, routers
from nanlab.toy.model import GPT, GPTConfig, Softmax
from nanlab.train import TrainConfig, Trainer

FAULT = "router_low_precision"
STEPS = 80  # measured: NaN at step 36 (grad_clip: 47); the cured runs are finite to 200


def run(fixes=(), steps=STEPS):
    return faults.run_fault(FAULT, steps=steps, fixes=list(fixes), stop_when_poisoned=True)


@pytest.fixture(scope="module")
def bad():
    return run()


# -- the mechanism, on plain tensors -----------------------------------------------------
def test_exp_of_a_router_logit_past_11_09_is_inf_in_fp16_only():
    logits = torch.tensor([[11.2, 0.0, -1.0, 0.5]], dtype=torch.float16)
    assert exp_limit("float16") == pytest.approx(11.09, abs=0.01)
    assert NaiveSoftmax()(logits).isnan().any()  # exp(11.2) = inf, inf / inf
    assert Softmax()(logits).isfinite().all()  # the max subtracted first: every exp <= 1
    assert torch.softmax(logits, -1).isfinite().all()
    assert NaiveSoftmax()(logits.float()).isfinite().all()  # fp32's exp holds up to 88.7
    assert NaiveSoftmax()(logits.bfloat16()).isfinite().all()  # bf16 has fp32's range


def test_the_router_defaults_are_fp32_and_a_z_loss_and_autocast_cannot_change_them():
    router = Router(8, n_experts=4)
    assert (router.precision, router.z_loss) == ("fp32", 1e-3)
    with torch.autocast("cpu", dtype=torch.float16):
        router(torch.randn(6, 8))
        assert router.stats()["dtype"] == "float32"
        router.precision = "auto"
        router(torch.randn(6, 8))
        assert router.stats()["dtype"] == "float16"
    assert router.z_term is not None and sum(router.stats()["load"]) == 6
    with pytest.raises(NanlabError, match="Router.precision='fp16' is not allowed"):
        Router(8, precision="fp16")


def test_an_moe_layer_routes_each_token_to_top_k_experts():
    moe = MoE(64, n_experts=4, top_k=2)
    x = torch.randn(2, 5, 64, requires_grad=True)
    moe(x).sum().backward()
    assert sum(moe.router.load.tolist()) == 2 * 5 * 2
    assert x.grad.isfinite().all() and moe.router.gate.weight.grad is not None


def test_installing_moe_leaves_the_toy_and_the_global_rng_as_they_were():
    assert not routers(GPT(GPTConfig()))  # the toy's default forward path has no router
    state = torch.get_rng_state()
    model = GPT(GPTConfig())
    after_build = torch.get_rng_state()
    install_moe(model)
    assert torch.equal(torch.get_rng_state(), after_build) and not torch.equal(state,
                                                                             after_build)
    a, b = GPT(GPTConfig()), GPT(GPTConfig())
    install_moe(a), install_moe(b)
    assert torch.equal(a.blocks[0].mlp.router.gate.weight, b.blocks[0].mlp.router.gate.weight)


def test_the_moe_layer_with_its_defaults_trains_finite_where_the_fault_fails():
    """The fault's own conditions (fp16 autocast, LR 0.03), the router at its defaults."""
    trainer = Trainer(faults.fault_config(FAULT).replace(steps=STEPS))
    moe_trainer(trainer)
    record = trainer.run()
    assert record.first_nonfinite_step is None
    assert record.losses()[-10:].mean() < 0.7 * record.losses()[0]  # measured: 1.90 / 3.47
    peaks = [e["routers"]["blocks.0.mlp.router"]["logit_max"] for e in record.events
             if e["kind"] == "router"]
    assert max(peaks) < exp_limit("float16")  # the z-loss kept them below fp16's exp limit


# -- on the toy run --------------------------------------------------------------------
def test_the_fault_fails_when_a_fp16_router_logit_passes_11_09(bad):
    first = bad.record.first_nonfinite_step
    assert first is not None and 25 <= first <= 60, first  # measured: 36
    losses = bad.record.losses()
    assert math.isfinite(losses[first - 1]) and losses[first - 1] < losses[0]
    events = {e["step"]: e["routers"] for e in bad.record.events if e["kind"] == "router"}
    at = events[first]
    assert all(r["dtype"] == "float16" for r in at.values())
    assert max(r["logit_max"] for r in at.values()) > exp_limit("float16")
    assert max(r["logit_max"] for r in events[0].values()) < 2  # small at init


@pytest.mark.parametrize("fix", ["router_fp32", "router_z_loss", "stable_softmax"])
def test_either_cure_alone_keeps_the_run_finite_and_learning(fix):
    """fp32's exp holds the logits, the z-loss keeps them small, and a softmax that
    subtracts the max never takes exp of a positive number, even in fp16."""
    record = run([fix]).record
    assert record.first_nonfinite_step is None
    assert record.losses()[-10:].mean() < 0.6 * record.losses()[0]


def test_clipping_the_gradient_does_not_cure_it():
    """Adam's step hardly depends on the gradient's scale: the logits grow all the same."""
    first = run(["grad_clip"]).record.first_nonfinite_step
    assert first is not None and 25 <= first <= STEPS, first  # measured: 47


def test_the_router_cures_refuse_a_run_without_a_router_before_training():
    for fix in ("router_fp32", "router_z_loss"):
        with pytest.raises(NotApplicable, match="no MoE router"):
            faults.run_fault("nan_input", steps=5, fixes=[fix])


def test_the_evidence_names_the_router_its_dtype_and_the_limit(bad):
    text = router_evidence(bad.record, bad.record.first_nonfinite_step)
    assert text is not None and "float16" in text and "11.09" in text
    assert "tokens per expert" in text and "selective precision" in text
    clean = Trainer(TrainConfig(steps=3, progress=False))
    moe_trainer(clean)
    assert router_evidence(clean.run(), 2) is None  # fp32 router: nothing to say


# -- on models nanlab did not make -----------------------------------------------------
@pytest.mark.parametrize("name", list(FOREIGN))
def test_the_fault_refuses_a_foreign_model_in_one_line(name):
    with pytest.raises(NanlabError, match="needs an MoE router") as err:
        plain_loop(FOREIGN[name], FAULT)
    assert "\n" not in str(err.value)
