"""nanlab: make loss spikes and NaN losses happen on a toy Transformer, then find and fix them.

Modules, one idea each:

- ``nanlab.model``    the toy decoder-only Transformer (attention written out by hand)
- ``nanlab.data``     the synthetic task: batches are a pure function of (seed, step)
- ``nanlab.train``    a model-agnostic trainer with callbacks, AMP, checkpoints, exact replay
- ``nanlab.record``   the run record: per-step and per-layer statistics, JSON Lines, manifest
- ``nanlab.checkpoint`` atomic checkpoints loadable with ``torch.load(weights_only=True)``
- ``nanlab.faults``   fault injectors that fail by their real mechanism; ``nanlab.fixes`` the cures
- ``nanlab.matrix``   the fault x fix matrix, measured
- ``nanlab.locate``   replay the first bad step; name the module, pass and tensor that went bad
- ``nanlab.diagnose`` the SOP automated: data -> AMP off -> LR / 10 -> grad norms -> init / eps
- ``nanlab.guard``    stop / skip / recover around the optimizer step; the spike detector
- ``nanlab.distributed`` every data-parallel rank takes the same guard decision
- ``nanlab.signals``  reading a loss curve: spikes, recovery, stalls
- ``nanlab.plots``    loss curves, grad-norm heat maps, activations against the fp16 limit
- ``nanlab.tensorboard`` export of a run record to TensorBoard
- ``nanlab.course``   single-source notebooks: build / check the student labs
- ``nanlab.checks``, ``nanlab.quiz``, ``nanlab.widgets``, ``nanlab.progress``  exercises,
  practice questions and the learner's progress
- ``nanlab.rubric``, ``nanlab.interview``  interview practice: question bank, rubric scoring
- ``nanlab.cli``      the ``nanlab`` command line

Quick start in a notebook::

    from nanlab.train import TrainConfig, train
    run = train(TrainConfig(steps=200))
    run.losses()[-1]
"""

__version__ = "0.1.0"
