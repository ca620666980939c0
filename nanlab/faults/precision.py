"""The precision family: fp16's range (max 65504, smallest subnormal 6e-8) met by
arithmetic that a wider type would survive: an exp or a position past the range, Adam's
eps below it.

SOP step 2 (turn mixed precision off, try bf16) reveals them.
"""

from __future__ import annotations

from nanlab.faults.catalogue import Fault, Param, register

register(Fault(
    name="fp16_overflow", family="fp16_overflow",
    summary="a hand-written softmax cross-entropy on the fp16 logits, under fp16 autocast",
    mechanism="the loss is computed by hand in an autocast-disabled region on the fp16 logits "
              "of the lm_head matmul, without a cast to fp32, so exp and sum run in fp16 on "
              "any device, and without subtracting the max; once the model grows confident "
              "and the softmax denominator sum(exp(logits)) passes 65504 (log-sum-exp past "
              "11.09), it is inf: the loss is -log(x / inf) = inf and the backward pass makes "
              "NaN. In fp32 and bf16 (max 3.4e38) exp only overflows past 88.7",
    needs="fp16 autocast and a loss written by hand and kept out of autocast (as custom "
          "label-smoothing or distillation losses often are) without logits.float(); it "
          "strikes late, when the model has learned. Inside autocast the same loss would "
          "fire on the CPU only: CUDA autocast runs exp and sum in fp32, CPU autocast in fp16",
    reveals="amp", cure="bf16", signature="nonfinite",
    conditions=lambda p: {"precision": "fp16", "loss_impl": "naive"},
))

register(Fault(
    name="softmax_overflow", family="softmax_overflow",
    summary="a hand-written softmax, exp(x) / sum(exp(x)), on fp16 scores, under fp16 autocast",
    mechanism="the softmax runs in an autocast-disabled region on the fp16 scores of the "
              "q @ k matmul, without a cast to fp32, so exp runs in fp16 on any device; it "
              "overflows once an attention score passes ~11.09 (fp32: ~88.7) and inf / inf = "
              "NaN. Subtracting the row max first makes every exp <= 1",
    needs="a naive softmax kept out of autocast, fp16 autocast, and attention that sharpens "
          "as the model learns (LR 0.01). Inside autocast the same softmax would fire on the "
          "CPU only: CUDA autocast runs exp and sum in fp32, CPU autocast in fp16",
    reveals="amp", cure="stable_softmax", signature="nonfinite",
    params={"lr": Param(0.01, 1e-6, 10.0)},
    conditions=lambda p: {"precision": "fp16", "lr": p["lr"], "model": {"softmax": "naive"}},
))

register(Fault(
    name="position_overflow", family="fp16_overflow",
    summary="absolute positions past 65504 fed to a sinusoidal encoding in pure fp16",
    mechanism="the position id is cast to fp16 before the multiply; 70000 does not fit "
              "(max 65504) and becomes inf, and sin(inf) is NaN",
    needs="a sinusoidal encoding computed in the model's dtype, a pure-fp16 model, and "
          "a stream that keeps counting positions across windows; the bf16 cure works "
          "because bf16 autocast computes the encoding in fp32 (amp_off would too): in a "
          "pure-bf16 model 70000..70031 all round to 70144, no NaN but no position either",
    reveals="amp", cure="bf16", signature="nonfinite",
    params={"offset": Param(70_000, 0, 10**9)},
    conditions=lambda p: {"precision": "fp16-pure",
                          "model": {"pos_encoding": "sinusoidal", "pos_offset": p["offset"]}},
))

register(Fault(
    name="adam_eps_fp16", family="adam_eps_fp16",
    summary="AdamW with eps = 1e-8 and its state kept in pure fp16",
    mechanism="1e-8 is below fp16's smallest subnormal (6e-8) and rounds to 0; a tiny "
              "gradient's square underflows too, so the update m / (sqrt(v) + eps) is "
              "x / 0 = inf or 0 / 0 = NaN",
    needs="model and optimizer state in fp16 (model.half()), no fp32 master weights",
    reveals="amp", cure="grad_scaler", signature="nonfinite",
    params={"eps": Param(1e-8, 0.0, 1.0)},
    conditions=lambda p: {"precision": "fp16-pure", "adam_eps": p["eps"]},
))
