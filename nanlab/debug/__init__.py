"""Finding the cause: replay the first bad step (``locate``), then the SOP (``diagnose``).

- ``trace``:    the hooks and aten-op tracer that number non-finite tensors in order
- ``locate``:   the first module, pass and tensor that went non-finite, by exact replay
- ``diagnose``: the SOP automated, each step a controlled replay, the fix proven
- ``checks``:   the SOP's checks, registered in SOP order; diagnose asks each in turn
- ``sop_checks``: the checks of the SOP's own steps (batch, precision, LR, grad norms,
  init and eps)
- ``user_code``: a NaN made in the user's own module or loss (a division, a log, a root of
  finite inputs): the module, the op, what to clamp
- ``runs``:     a saved run folder read back, ready to replay
- ``probes``:   max attention logit, attention entropy, output log Z, update-to-weight ratio
- ``grad_accum_checks``: the micro-batches and the GradScaler crash of an accumulating run,
  and the audit of the gradient a loop records against one plain replay of its loss
- ``sensitivity``: LR sensitivity over an LR sweep (Wortsman et al. 2023), a table per run
- ``attribution``: per-sample loss of a batch, ranked: which samples carry a spike
- ``llm_data_checks``: diagnose's data step for token ids and junk sequences
- ``hardware_checks``: diagnose's replay of a failed step: a one-off device fault or not
- ``restart_checks``: diagnose's reading of restarts and of layers that woke up (optimizer state)
- ``masked_attention_checks``: diagnose's reading of attention masks: an empty example,
  left padding under a causal mask
- ``precision_bisect``: which module's precision decides a non-finite fp16 / bf16 step,
  by replaying it with modules in fp32, bisecting the module tree
- ``backward_nan_checks``: diagnose's reading of a NaN gradient under a finite forward pass
  and loss: the backward op and the forward function whose derivative made it
- ``moe_router_checks``: diagnose's reading of an MoE run's router events: 16-bit router
  logits past what exp holds in their dtype
- ``fp8_scaling_checks``: diagnose's reading of an FP8 run's scale events: an amax of 0 scaled
  to inf, a stale delayed amax that sent a gradient past e5m2's max
- ``compile_bisect``: eager against ``torch.compile`` (fp16 values rounded between ops, or
  kept in fp32 by a fused kernel), and PyTorch's compiler bisector naming the stage

>>> from nanlab.debug import diagnose, locate
>>> callable(diagnose) and callable(locate)
True
"""

from nanlab.debug.attribution import per_sample_loss
from nanlab.debug.diagnose import Diagnosis, Finding, diagnose
from nanlab.debug.locate import Location, locate
from nanlab.debug.probes import ModelProbe
from nanlab.debug.runs import load_run
from nanlab.debug.sensitivity import lr_sensitivity, lr_sweep

__all__ = ["Diagnosis", "Finding", "Location", "ModelProbe", "diagnose", "load_run", "locate",
           "lr_sensitivity", "lr_sweep", "per_sample_loss"]
