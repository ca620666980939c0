"""Faults that fail by their real mechanism, the cures, and the fault x fix matrix.

- ``catalogue``: the faults as data (mechanism, needs, SOP step, cure, signature)
- ``inject``:    a fault applied to any model, optimizer and batch source
- ``run``:       a fault on the built-in toy run, with or without fixes
- ``fixes``:     the SOP's cures, each a config change or a callback
- ``matrix``:    every fault against every fix, measured
- ``mystery``:   runs whose fault is drawn from a seed and sealed, for learners to find
- ``grad_accum``: gradient accumulation loops written wrongly, and their two fixes
- ``hardware``:  silent data corruption: one bit flipped once, and the guard's rerun
- ``llm_data``:  LLM data faults (an id past the vocabulary, a junk shard) and their filter

>>> from nanlab.faults import get_fault, run_fault
>>> get_fault("nan_input").cure
'validate_data'
"""

# they register their faults and fixes: bit_flip and guard_rerun; the LLM data faults and
# quality_filter; the gradient-accumulation faults, token_weighted, scaler_update_per_step
from nanlab.faults import grad_accum, hardware, llm_data  # noqa: F401
from nanlab.faults.catalogue import FAULTS, SIGNATURES, SOP_STEPS, Fault, Param, get_fault, register
from nanlab.faults.fixes import FIXES, Fix, batch_problems, get_fix
from nanlab.faults.inject import Injection, inject
from nanlab.faults.matrix import Matrix, fault_fix_matrix  # noqa: I001  (matrix runs faults)
from nanlab.faults.run import FaultRun, build_fault_trainer, execute, fault_config, run_fault

__all__ = ["FAULTS", "FIXES", "SIGNATURES", "SOP_STEPS", "Fault", "FaultRun", "Fix",
           "Injection", "Matrix", "Param", "batch_problems", "build_fault_trainer", "execute",
           "fault_config", "fault_fix_matrix", "get_fault", "get_fix", "inject", "register",
           "run_fault"]
