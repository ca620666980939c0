"""The init, norm and depth family: weights too large for the depth, a deep stack without
norms, a norm whose eps is 0 meeting a zero-variance row.

SOP step 5 (check init scale and norm eps) reveals the first and the last; the per-layer
grad-norm history (step 4) shows a stack that explodes while it trains.
"""

from __future__ import annotations

from nanlab.faults.catalogue import Fault, Param, register

register(Fault(
    name="bad_init", family="bad_init",
    summary="init std 1.0 (50x GPT-2's 0.02) in a deep stack without LayerNorm",
    mechanism="each layer multiplies the activations by about std * sqrt(fan_in); by the "
              "last blocks an attention score q @ k overflows fp32 to inf, and the softmax's "
              "inf - inf makes the loss NaN at step 0, in the first forward pass",
    needs="no normalisation between layers (a plain deep stack); fp32 is enough",
    reveals="init_eps", cure="sane_init", signature="nonfinite",
    params={"init_std": Param(1.0, 0.0, 100.0), "n_layer": Param(6, 1, 64)},
    conditions=lambda p: {"model": {"init_std": p["init_std"], "n_layer": p["n_layer"],
                                    "use_norms": False}},
    foreign=lambda inj, p: inj.scale_weights(p["init_std"] / 0.02),
))

register(Fault(
    name="deep_explosion", family="deep_explosion",
    summary="a deep stack without LayerNorm whose gradients explode during training",
    mechanism="without norms every block adds to a residual stream that grows with each "
              "update; the per-layer grad norms climb by orders of magnitude over tens of "
              "steps until the arithmetic overflows. Adam's b2 = 0.99 makes its second "
              "moment slow to follow the growing gradients, so each update stays large",
    needs="a deep stack (6 blocks) without LayerNorm, AdamW at a constant 0.015 with "
          "b2 = 0.99, no clipping. Under a cosine decay at 0.02 and b2 = 0.95 the same "
          "stack explodes to a loss of about 1e3 but stays finite on some CPUs: a run "
          "on the edge depends on the summation order",
    reveals="grad_norms", cure="modern_block", signature="nonfinite",
    params={"n_layer": Param(6, 2, 64), "lr": Param(0.015, 1e-6, 10.0),
            "beta2": Param(0.99, 0.0, 0.9999, help="Adam's second-moment decay")},
    conditions=lambda p: {"lr": p["lr"], "beta2": p["beta2"], "schedule": "constant",
                          "model": {"n_layer": p["n_layer"], "use_norms": False}},
))

register(Fault(
    name="tiny_eps", family="tiny_eps",
    summary="LayerNorm eps = 0 meeting a zero-variance row (a padding token)",
    mechanism="a padding token's embedding row is all zeros; the embedding LayerNorm "
              "computes (x - mean) / sqrt(var + eps) = 0 / sqrt(0 + 0) = 0 / 0 = NaN; the "
              "NaN reaches real positions through attention, because 0 * NaN is NaN",
    needs="a norm that sees the raw embedding (BLOOM's embedding LayerNorm, or a model "
          "without absolute positions) and padded batches; fp32 is enough",
    reveals="init_eps", cure="norm_eps", signature="nonfinite",
    params={"eps": Param(0.0, 0.0, 1.0), "pad_prob": Param(0.25, 0.0, 1.0)},
    conditions=lambda p: {"pad_prob": p["pad_prob"],
                          "model": {"norm_eps": p["eps"], "embed_norm": True,
                                    "vocab_size": 33, "pad_id": 32}},
    foreign=lambda inj, p: inj.set_norm_eps(p["eps"]),
))
