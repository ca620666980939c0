"""Finding the normalisation layers of any model, and the field that holds their eps.

torch's norms keep it in ``eps``, Hugging Face's RMSNorms in ``variance_epsilon``, and
hand-written ones wherever their author put it. The eps fault, the eps fix and
diagnose's eps check all find norms here, so they agree on what a norm is.
"""

from __future__ import annotations

import torch.nn as nn

EPS_FIELDS = ("eps", "variance_epsilon", "epsilon", "eps_")  # where norms keep it
NORM_TYPES = (nn.LayerNorm, nn.GroupNorm, nn.modules.batchnorm._NormBase,
              *([nn.RMSNorm] if hasattr(nn, "RMSNorm") else []))


def norm_modules(model: nn.Module) -> list[tuple[str, nn.Module, str]]:
    """(name, module, eps field) of every normalisation layer: torch's norms, Hugging
    Face's (``variance_epsilon``) and hand-written ones (a class named ``*Norm*`` with a
    float eps field).

    >>> [(n, f) for n, _, f in norm_modules(nn.Sequential(nn.Linear(2, 2), nn.LayerNorm(2)))]
    [('1', 'eps')]
    """
    return [(name, m, field) for name, m in model.named_modules()
            if (field := eps_field(m)) is not None]


def eps_field(m: nn.Module) -> str | None:
    """The name of a normalisation module's eps field, or None for any other module.

    >>> eps_field(nn.LayerNorm(4)), eps_field(nn.Linear(4, 4))
    ('eps', None)
    """
    if not (isinstance(m, NORM_TYPES) or "norm" in type(m).__name__.lower()):
        return None
    return next((f for f in EPS_FIELDS if type(getattr(m, f, None)) is float), None)


__all__ = ["EPS_FIELDS", "NORM_TYPES", "eps_field", "norm_modules"]
