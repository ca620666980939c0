"""The learning-rate family: an LR too high for the run, a one-step burst, no warmup.

SOP step 3 (divide the learning rate by 10) reveals them.
"""

from __future__ import annotations

from nanlab.faults.catalogue import Fault, Param, register

register(Fault(
    name="high_lr", family="learning_rate",
    summary="AdamW at a learning rate 40x too high, in fp16 mixed precision",
    mechanism="the oversized updates grow the attention weights until q.k passes fp16's "
              "65504: the scores overflow to inf and the softmax makes NaN. With AMP off "
              "the same run stays finite but diverges: fp16 only made the LR's damage loud",
    needs="fp16 autocast (with its GradScaler) and no clipping; in fp32 see high_lr_adam",
    reveals="lr", cure="lr_div10", signature="nonfinite",
    params={"lr": Param(0.2, 1e-6, 1e4)},
    conditions=lambda p: {"lr": p["lr"], "precision": "fp16"},
    foreign=lambda inj, p: inj.set_lr(p["lr"]),
))

register(Fault(
    name="high_lr_adam", family="learning_rate",
    summary="AdamW at a learning rate 20x too high: diverges, yet stays finite in fp32",
    mechanism="Adam's update is about lr * sign(grad), so the weights jump by about the LR "
              "every step; LayerNorm keeps the activations in range, so the loss climbs "
              "and stays high without ever overflowing",
    needs="AdamW in fp32 (under fp16 the same run turns into NaN: see the matrix)",
    reveals="lr", cure="lr_div10", signature="diverge",
    params={"lr": Param(0.1, 1e-6, 1e4)},
    conditions=lambda p: {"lr": p["lr"]},
    foreign=lambda inj, p: inj.set_lr(p["lr"]),
))

register(Fault(
    name="lr_jump", family="learning_rate",
    summary="the LR jumps 10x for one step mid-run (a scheduler glitch), then returns",
    mechanism="a burst of oversized updates knocks the model off its solution: the loss "
              "spikes; once the LR is back, the same optimizer brings it down again",
    needs="a trained model hit by a short LR burst; no clipping",
    reveals="lr", cure=None, signature="spike",
    params={"at_step": Param(100, 0, 100_000), "factor": Param(10.0, 1.0, 1e6),
            "length": Param(1, 1, 100_000)},
    install=lambda inj, p: inj.set_lr_factor(p["factor"], p["at_step"],
                                             p["at_step"] + p["length"]),
    foreign=lambda inj, p: None,
))

register(Fault(
    name="no_warmup", family="learning_rate",
    summary="a high LR that needs warmup, applied at full size from step 0",
    mechanism="the first Adam steps are full-size while the second-moment estimate is "
              "still noise: the fresh weights are thrown far off and the loss spikes",
    needs="AdamW at a LR that trains well with warmup (here 0.02) but no warmup",
    reveals="lr", cure="warmup_cosine", signature="diverge",
    params={"lr": Param(0.02, 1e-6, 1e4)},
    conditions=lambda p: {"lr": p["lr"], "warmup_steps": 0, "beta2": 0.99},
))
