"""The MoE router family: a router whose logits grow, computed where fp16 cannot hold them.

A mixture-of-experts layer routes each token by a softmax over its router logits
(:mod:`nanlab.layers.moe`). Nothing in the task loss bounds those logits, and they grow
as routing sharpens. Two safeguards are standard: the router in float32 under any
autocast ("selective precision", Switch Transformer, Fedus et al. 2021, section 2.4;
Megatron-LM's ``--moe-router-dtype fp32``) and the router z-loss, which penalises
``logsumexp(logits)**2`` and keeps the logits small (ST-MoE, Zoph et al. 2022; Megatron-LM's
``--moe-z-loss-coeff``, "a starting value of 1e-3 is recommended" in
megatron/core/transformer/moe/README.md).

``router_low_precision`` drops both: the router is a plain ``nn.Linear`` under fp16
autocast (its logits are fp16, as in a router that is not special-cased) with its
softmax written out, ``exp(x) / sum(exp(x))`` in the logits' own dtype, and no z-loss.
Once a logit passes log(65504) = 11.09 its exp is inf in fp16 and inf / inf = NaN.
Measured on the toy (tests/test_moe_router.py, docs/guides/faults.md): with a softmax that
subtracts the max the same fp16 router stays finite, its logits up to 18; so does it under
bf16 autocast (exp's range is fp32's): the hand-written exp is what meets fp16's range.

On the built-in run the fault acts through a lever: every block's MLP swapped for an
:class:`~nanlab.layers.moe.MoE` (4 experts, top-1) with that router, the optimizer
rebuilt over the new weights, the loss wrapped by :class:`~nanlab.layers.moe.MoELoss`.

>>> from nanlab.faults import get_fault
>>> get_fault("router_low_precision").cure
'router_fp32'
"""

from __future__ import annotations

import torch

from nanlab.faults.catalogue import Fault, Param, register
from nanlab.faults.fixes import FIXES, Fix, NotApplicable
from nanlab.faults.levers import Injection
from nanlab.faults.precision import NaiveSoftmax
from nanlab.layers.moe import MoELoss, install_moe, routers
from nanlab.train.objective import lr_factor
from nanlab.train.trainer import Trainer

Z_LOSS = 1e-3  # the router z-loss weight Megatron-LM's MoE README recommends to start from


def moe_trainer(trainer: Trainer, **moe) -> int:
    """The trainer's toy model given MoE blocks (``install_moe(**moe)``), its optimizer and
    schedule rebuilt over the new weights, its loss wrapped to add the z-loss; returns
    the number of MoE layers.

    >>> from nanlab.train import TrainConfig
    >>> trainer = Trainer(TrainConfig(steps=2, progress=False))
    >>> moe_trainer(trainer), len(routers(trainer.model))
    (2, 2)
    """
    n = install_moe(trainer.model, **moe)
    trainer.params = [p for p in trainer.model.parameters() if p.requires_grad]
    trainer.optimizer = trainer._make_optimizer()
    trainer.scheduler = torch.optim.lr_scheduler.LambdaLR(
        trainer.optimizer, lambda s: trainer.lr_scale * lr_factor(s, trainer.config))
    trainer.loss_fn = MoELoss(trainer.loss_fn, trainer.model)
    trainer.refresh_layers()
    trainer.record.manifest["num_params"] = sum(p.numel() for p in trainer.model.parameters())
    trainer.add_callback("on_step_end", log_routers)
    return n


def log_routers(trainer: Trainer, info) -> None:
    """An on_step_end callback: a "router" event with each router's evidence of the step
    (largest logit and logsumexp, the logits' dtype, tokens per expert).

    >>> from nanlab.train import TrainConfig
    >>> trainer = Trainer(TrainConfig(steps=1, progress=False))
    >>> _ = moe_trainer(trainer)
    >>> event = trainer.run().events[-1]
    >>> event["kind"], sorted(event["routers"]["blocks.0.mlp.router"])
    ('router', ['dtype', 'load', 'logit_max', 'logsumexp_max'])
    """
    trainer.record.log_event("router", info.step, routers={
        name: r.stats() for name, r in routers(trainer.model)})


def _low_precision_router(inj: Injection, p: dict) -> None:
    """MoE blocks whose router computes in autocast's fp16, softmax by hand, no z-loss."""
    trainer = inj.trainer
    moe_trainer(trainer, n_experts=p["n_experts"], top_k=p["top_k"], precision="auto",
                z_loss=0.0)
    for _, router in routers(trainer.model):
        router.softmax = NaiveSoftmax()
    inj.model, inj.optimizer, inj.scheduler = trainer.model, trainer.optimizer, trainer.scheduler


register(Fault(
    name="router_low_precision", family="moe_router",
    summary="an MoE router in fp16 under autocast, its softmax written out, no z-loss",
    mechanism="nothing bounds the router logits and they grow as routing sharpens; the "
              "router runs in autocast's fp16 and its softmax exp(x) / sum(exp(x)) runs in "
              "fp16 too, so once a logit passes log(65504) = 11.09 its exp is inf and "
              "inf / inf = NaN. In float32 (selective precision) exp holds up to 88.7; the "
              "router z-loss keeps the logits far below 11",
    needs="a mixture-of-experts layer whose router is not kept in float32 (fp16 autocast), "
          "a softmax without the max subtracted, no router z-loss, and an LR high enough "
          "for the logits to grow (0.03 here); on the toy: its MLPs swapped for 4-expert "
          "top-1 MoE layers",
    reveals="amp", cure="router_fp32", signature="nonfinite",
    params={"lr": Param(0.03, 1e-6, 10.0),
            "n_experts": Param(4, 2, 64, help="experts per MoE layer"),
            "top_k": Param(1, 1, 2, help="experts per token (1: Switch, 2: Mixtral)")},
    conditions=lambda p: {"precision": "fp16", "lr": p["lr"]}, on_toy=_low_precision_router,
    refusal="it needs an MoE router (a gate whose softmax picks experts) in the model's own "
            "code, and nanlab does not add one to your model: route with "
            "nanlab.layers.moe.MoE(precision='auto', z_loss=0) under fp16 autocast to see it",
))


# -- the cures: selective precision, the router z-loss ---------------------------------
def _each_router(trainer: Trainer, fix: str, act) -> list[str]:
    found = routers(trainer.model)
    if not found:
        raise NotApplicable(f"{fix}: this model has no MoE router (nanlab.layers.moe.Router); "
                            "in your own MoE: " + FIXES[fix].summary)
    return [f"{name}: {done}" for name, r in found if (done := act(r))]


def _router_fp32(trainer: Trainer) -> list[str]:
    """Every router computes in float32; a hand-written softmax is left as it is (its exp
    now runs in fp32, which holds it)."""
    def act(r):
        if r.precision == "fp32":
            return None
        r.precision = "fp32"
        return "router logits and softmax in float32 (selective precision)"
    return _each_router(trainer, "router_fp32", act)


def _router_z_loss(trainer: Trainer) -> list[str]:
    """Every router without a z-loss gets ST-MoE's (c_z = 1e-3); the loss adds it."""
    if routers(trainer.model) and not isinstance(trainer.loss_fn, MoELoss):
        trainer.loss_fn = MoELoss(trainer.loss_fn, trainer.model)

    def act(r):
        if r.z_loss > 0:
            return None
        r.z_loss = Z_LOSS
        return f"router z-loss {Z_LOSS:g} x logsumexp(logits)^2"
    return _each_router(trainer, "router_z_loss", act)


FIXES["router_fp32"] = Fix(
    "router_fp32", "compute the MoE router (logits and softmax) in float32 under any "
    "autocast: the Switch Transformer's selective precision", lambda c: None,
    _router_fp32, sop_step="amp")
FIXES["router_z_loss"] = Fix(
    "router_z_loss", "add ST-MoE's router z-loss, 1e-3 x logsumexp(router logits)^2, which "
    "keeps the logits small", lambda c: None, _router_z_loss, sop_step="amp")


__all__ = ["Z_LOSS", "log_routers", "moe_trainer"]
