"""Two optimizer numbers the course quotes, computed once so that labs, bank and cheat
sheet agree.

- :func:`adam_v_underflow_grad`: below which gradient Adam's second moment ``v`` rounds
  to exactly 0 when it is stored in fp16 (pure fp16 training, Lab 04);
- :func:`adam_step_bound`: the largest step of one coordinate, in units of the learning
  rate (Kingma & Ba 2015, "Adam: a method for stochastic optimization", section 2.1;
  Labs 03 and 05).

>>> f"{adam_v_underflow_grad(0.95):.2g}", f"{adam_v_underflow_grad(0.999):.2g}"
('0.00077', '0.0055')
>>> round(adam_step_bound(0.9, 0.999), 2), adam_step_bound(0.9, 0.95)
(3.16, 1.0)
"""

from __future__ import annotations

import math

import torch


def adam_v_underflow_grad(beta2: float, dtype: torch.dtype = torch.float16) -> float:
    """The largest ``|g|`` whose first second-moment increment ``(1 - beta2) * g**2``
    rounds to 0 in ``dtype``.

    Round-to-nearest sends everything up to half the smallest subnormal to 0 (for fp16,
    2^-24 / 2 = 2^-25, about 3e-8), so the bound is ``sqrt(2^-25 / (1 - beta2))``. A
    weight whose gradients stay below it keeps ``v = 0`` in a pure-fp16 Adam; with
    ``eps = 1e-8``, itself 0 in fp16, its update is ``m / 0``.

    >>> f"{adam_v_underflow_grad(0.95):.2g}"    # nanlab's TrainConfig betas (0.9, 0.95)
    '0.00077'
    >>> f"{adam_v_underflow_grad(0.999):.2g}"   # PyTorch's default beta2
    '0.0055'
    """
    if not 0.0 <= beta2 < 1.0:
        raise ValueError(f"beta2 must be in [0, 1), got {beta2}")
    info = torch.finfo(dtype)
    half_smallest = info.tiny * info.eps / 2  # half the smallest subnormal
    return math.sqrt(half_smallest / (1.0 - beta2))


def adam_step_bound(beta1: float, beta2: float) -> float:
    """Kingma & Ba's bound on one coordinate's Adam step (bias-corrected, eps = 0), in
    units of the LR: ``max(1, (1 - beta1) / sqrt(1 - beta2))``.

    The second case is a gradient that was 0 for long and is suddenly large: ``m`` takes
    ``(1 - beta1) * g`` at once, ``v`` only ``(1 - beta2) * g**2``. With PyTorch's betas
    (0.9, 0.999) a step can reach about 3.16 LR; with beta2 = 0.95 it stays at the LR.

    >>> round(adam_step_bound(0.9, 0.999), 2)
    3.16
    >>> adam_step_bound(0.9, 0.95)
    1.0
    """
    if not (0.0 <= beta1 < 1.0 and 0.0 <= beta2 < 1.0):
        raise ValueError(f"betas must be in [0, 1), got ({beta1}, {beta2})")
    return max(1.0, (1.0 - beta1) / math.sqrt(1.0 - beta2))
