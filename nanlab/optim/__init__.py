"""Optimizer-side tools that work on any optimizer.

- ``lr_lever``  one way to change the LR a run applies: a factor at the optimizer's step
- ``cures``     adaptive spike cures as large runs use them (ZClip, update clipping, ...)
- ``numerics``  the optimizer numbers the course quotes, computed once
"""
