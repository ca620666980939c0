"""Faults that fail by their real mechanism, the cures, and the fault x fix matrix.

- ``catalogue``: a fault as data (mechanism, needs, SOP step, cure, signature), the registry
- ``levers``:    where a fault reaches into any run: the batches, the LR, the weights, the norms
- ``inject``:    a fault applied to any model, optimizer and batch source

One module per fault family registers its faults (and the fixes only it needs):

- ``dirty_data``: a NaN reading, a label out of range, every target masked, a std of 0
- ``learning_rate``: an LR too high, a one-step burst, no warmup
- ``precision``: fp16's range met by exp, a position, Adam's eps
- ``init_eps``:  a large init, a deep stack without norms, norm eps 0
- ``optimizer_state``: a restart that forgets the optimizer or the schedule, a frozen layer
- ``myths``:     dead ReLUs and sigmoid chains: they stall, they do not NaN
- ``grad_accum``: gradient accumulation loops written wrongly, and their two fixes
- ``hardware``:  silent data corruption: one bit flipped once, and the guard's rerun
- ``llm_data``:  LLM data faults (an id past the vocabulary, a junk shard) and their filter
- ``masked_attention``: a query with no key left (left padding, an empty example) and -inf
- ``backward_nan``: a finite forward and a NaN gradient (a single-where log at 0)
- ``moe_router``: an MoE router in fp16 whose logits grow past exp's range (no z-loss)
- ``fp8_scaling``: FP8 scales gone wrong (an amax of 0, a stale delayed amax)

Built on them:

- ``run``:       a fault on the built-in toy run, with or without fixes
- ``batch_check``: SOP step 1, what is wrong with a batch, read against the model's own range
- ``fixes``:     the SOP's cures, each a config change or a callback
- ``matrix``:    every fault against every fix, measured
- ``mystery``:   runs whose fault is drawn from a seed and sealed, for learners to find
- ``corpus``:    the guard's spike rules scored on a labelled corpus of fault runs

>>> from nanlab.faults import get_fault, run_fault
>>> get_fault("nan_input").cure
'validate_data'
"""

# the families register their faults (and fixes) on import, in this order
from nanlab.faults import dirty_data, learning_rate, precision, init_eps  # noqa: F401, I001
from nanlab.faults import optimizer_state, myths, grad_accum, hardware, llm_data  # noqa: F401
from nanlab.faults import masked_attention, backward_nan, moe_router  # noqa: F401
from nanlab.faults import fp8_scaling  # noqa: F401
from nanlab.faults.catalogue import FAULTS, SIGNATURES, SOP_STEPS, Fault, Param, get_fault, register
from nanlab.faults.batch_check import batch_problems
from nanlab.faults.fixes import FIXES, Fix, get_fix
from nanlab.faults.inject import Injection, inject
from nanlab.faults.matrix import Matrix, fault_fix_matrix  # noqa: I001  (matrix runs faults)
from nanlab.faults.run import FaultRun, build_fault_trainer, execute, fault_config, run_fault

__all__ = ["FAULTS", "FIXES", "SIGNATURES", "SOP_STEPS", "Fault", "FaultRun", "Fix",
           "Injection", "Matrix", "Param", "batch_problems", "build_fault_trainer", "execute",
           "fault_config", "fault_fix_matrix", "get_fault", "get_fix", "inject", "register",
           "run_fault"]
