"""nanlab: make loss spikes and NaN losses happen on a toy Transformer, then find and fix them.

Modules, one idea each (``help(nanlab.<module>)`` for more, with examples):

- ``nanlab.model``      the toy decoder-only Transformer (attention written out by hand)
- ``nanlab.data``       the synthetic task: batches are a pure function of (seed, step)
- ``nanlab.train``      a model-agnostic trainer with callbacks, AMP, checkpoints, exact replay
- ``nanlab.record``     the run record: per-step and per-layer statistics, JSON Lines, manifest
- ``nanlab.checkpoint`` atomic checkpoints loadable with ``torch.load(weights_only=True)``
- ``nanlab.faults``     fault injectors that fail by their real mechanism, on any model
- ``nanlab.fixes``      the SOP's cures, each a config change or a callback
- ``nanlab.matrix``     the fault x fix matrix, measured
- ``nanlab.locate``     replay the first bad step; name the module, pass and tensor that went bad
- ``nanlab.diagnose``   the SOP automated: data -> AMP off -> LR / 10 -> grad norms -> init / eps
- ``nanlab.mystery``    mystery runs: a fault drawn from a seed and sealed, to find and grade
- ``nanlab.guard``      stop / skip / recover around the optimizer step; the spike detector
- ``nanlab.distributed`` every data-parallel rank takes the same guard decision
- ``nanlab.signals``    reading a loss curve: spikes, recovery, stalls
- ``nanlab.plots``      loss curves, grad-norm heat maps, activations against the fp16 limit
- ``nanlab.tensorboard`` export of a run record to TensorBoard
- ``nanlab.errors``     errors that say what was wrong, the value, and what is allowed
- ``nanlab.course``     single-source notebooks: build / check the student labs
- ``nanlab.checks``     exercise checks: passed / not done yet / not yet right, and hints
- ``nanlab.quiz``       grading of the practice questions, plain Python
- ``nanlab.widgets``    the practice questions as ipywidgets (Check and Hint buttons)
- ``nanlab.progress``   the learner's progress file, and ``show_progress()``
- ``nanlab.rubric``     rubric scoring of free-text answers (English and Chinese)
- ``nanlab.interview``  interview practice: question bank, mock interview, STAR story
- ``nanlab.claims``     the source article's claims, and the lab that reproduces or corrects each
- ``nanlab.pytest_plugin`` nbval check: solutions must pass, unfilled labs must not
- ``nanlab.cli``        the ``nanlab`` command line

Quick start in a notebook::

    from nanlab.train import TrainConfig, train
    run = train(TrainConfig(steps=200))
    run.losses()[-1]
"""

__version__ = "0.1.0"
