"""nanlab: make loss spikes and NaN losses happen on a toy Transformer, then find and fix them.

Modules, one idea each:

- ``nanlab.model``    the toy decoder-only Transformer (attention written out by hand)
- ``nanlab.data``     the synthetic task: batches are a pure function of (seed, step)
- ``nanlab.train``    a model-agnostic trainer with callbacks, AMP, checkpoints, exact replay
- ``nanlab.record``   the run record: per-step and per-layer statistics, JSON Lines, manifest
- ``nanlab.checkpoint`` atomic checkpoints loadable with ``torch.load(weights_only=True)``
- ``nanlab.cli``      the ``nanlab`` command line

Quick start in a notebook::

    from nanlab.train import TrainConfig, train
    run = train(TrainConfig(steps=200))
    run.losses()[-1]
"""

__version__ = "0.1.0"
