"""Acting while training: stop, skip or recover; the spike detector; one decision per rank.

- ``guard``:  the guard around the optimizer step (stop / skip / recover, evidence kept)
- ``snapshots``: a plain loop's kept states, copied into reused buffers, for rollback
- ``spikes``: the loss-spike detector (one-sided running z-score gated by a relative rise)
- ``agree``:  the guard's flags all-reduced, so every data-parallel rank decides alike
- ``framework``: the guard driven from a framework's step hooks (shared by the two below)
- ``hf``:     the guard as a Hugging Face ``TrainerCallback`` (``nanlab[hf]``; not imported here)
- ``lightning``: the guard as a Lightning ``Callback`` (``nanlab[lightning]``; not imported here)
- ``detectors``: the spike rules of Megatron-LM, Lightning, llm-foundry, OLMo-core, ZClip
  and nanlab, read from their sources, behind one interface

>>> from nanlab.guard import Guard
>>> Guard("skip").mode
'skip'
"""

from nanlab.guard.agree import agree, is_distributed
from nanlab.guard.detectors import RULES, Detector, make_detector
from nanlab.guard.guard import VERDICTS, Decision, Guard
from nanlab.guard.spikes import SpikeDetector

__all__ = ["RULES", "VERDICTS", "Decision", "Detector", "Guard", "SpikeDetector", "agree",
           "is_distributed", "make_detector"]
