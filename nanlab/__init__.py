"""nanlab: make loss spikes and NaN losses happen on a Transformer, then find and fix them.

Two products share the package. The **library** works on any model: training, faults,
diagnosis, the guard. The **course** (notebooks, checks, practice) and the **interview**
practice build on it; the library never imports them. ``help(nanlab.<name>)`` says more,
with examples.

The library, room by room from the bottom; a module imports only its room and those
below it (``tests/test_layout.py``), so the path of a file says where it stands:

- ``nanlab.errors``    errors that say what was wrong, the value, and what is allowed
- ``nanlab.layers``    tools for any model's layers: fp16 matmuls on a CPU computed as a GPU
  computes them (``half_matmul``), the normalisation layers and their eps (``norms``)
- ``nanlab.optim``     tools for any optimizer: one way to change the LR a run applies
  (``lr_lever``), adaptive spike cures: ZClip, update clipping, SPAM, soft-capping
  (``cures``), the optimizer numbers the course quotes (``numerics``)
- ``nanlab.toy``       the toy decoder-only Transformer (``model``), the synthetic task whose
  batches are a pure function of (seed, step) (``data``), Megatron-LM's vocabulary-parallel
  embedding and cross-entropy in one process (``vocab_parallel``)
- ``nanlab.runs``      a run on disk: atomic writes (``atomic``), one writer per folder
  (``runlock``), checkpoints loadable with ``weights_only=True`` (``checkpoint``), the run
  record: manifest, per-step and per-layer rows, events (``record``)
- ``nanlab.train``     ``TrainConfig`` (``config``), the loss, LR schedule and grad norm
  (``objective``), gradient accumulation weighted by targets (``accum``), what a restart
  saves and forgets (``resume``), one walker over nested batches (``batches``), the
  model-agnostic trainer with callbacks, AMP, checkpoints and exact replay (``trainer``)
- ``nanlab.analysis``  reading a loss curve: spikes, recovery, stalls (``signals``); one
  judge of a run: healthy, or spike / stall / diverge / nonfinite / error (``judge``)
- ``nanlab.guard``     stop / skip / recover around the optimizer step, the spike detector,
  one decision on every data-parallel rank, spike rules (``guard``, ``snapshots``,
  ``spikes``, ``agree``, ``detectors``, ``framework``, ``hf``, ``lightning``)
- ``nanlab.faults``    faults that fail by their real mechanism, one module per family, their
  cures, the fault x fix matrix, mystery runs, the spike rules' corpus (``catalogue``,
  ``levers``, ``inject``, ``dirty_data``, ``learning_rate``, ``precision``, ``init_eps``,
  ``optimizer_state``, ``myths``, ``grad_accum``, ``hardware``, ``llm_data``,
  ``masked_attention``, ``backward_nan``, ``run``, ``batch_check``, ``fixes``, ``matrix``,
  ``mystery``, ``corpus``)
- ``nanlab.debug``     finding the cause: ``locate`` replays the first bad step, ``diagnose``
  runs the SOP, probes and LR sensitivity, per-sample loss (``trace``, ``locate``,
  ``diagnose``, ``runs``, ``probes``, ``sensitivity``, ``attribution``, ``llm_data_checks``,
  ``hardware_checks``, ``restart_checks``, ``grad_accum_checks``, ``masked_attention_checks``,
  ``backward_nan_checks``)
- ``nanlab.distributed`` data-parallel training on the CPU, every rank guarded alike
- ``nanlab.viz``       loss curves, grad-norm heat maps, per-layer histograms and update
  ratios, float bit layouts, the SOP flowchart, TensorBoard export (``plots``, ``layers``,
  ``diagrams``, ``tensorboard``)

Built on the library:

- ``nanlab.course``    notebooks from one source, exercise checks, practice widgets,
  progress, the claims map, the nbval plugin (``notebooks``, ``checks``, ``quiz``, ``rubric``,
  ``widgets``, ``progress``, ``claims``, ``pytest_plugin``)
- ``nanlab.interview`` interview practice: the question bank, answer frameworks, mock
  interview, STAR story, cheat sheet (``bank``, ``frameworks``, ``mock``, ``widgets``, ``star``,
  ``cheatsheet``)
- ``nanlab.cli``       the ``nanlab`` command line and its exit codes; typed ``--config`` and
  ``--set`` values (``parse``); ``nanlab run --resume`` (``resume``)

The public API, importable from ``nanlab`` itself (each name loads its module on first use)::

    Trainer, TrainConfig             run a model (the toy or yours) with records and checkpoints
    FAULTS, get_fault, inject        the fault catalogue; a fault put into your own run
    run_fault                        a fault on the built-in toy run
    locate, diagnose, load_run       the first bad step; the SOP with its fix proven; a run folder
    Guard                            stop, skip or roll back around the optimizer step
    NanlabError                      every error nanlab raises on bad input

Everything else lives in the rooms above: ``from nanlab.train import train``, ``from
nanlab.analysis.judge import judge``; the course and the interview practice are reached
as ``nanlab.course`` and ``nanlab.interview``.

Quick start in a notebook::

    import nanlab
    trainer = nanlab.Trainer(nanlab.TrainConfig(steps=200))
    trainer.run().losses()[-1]
"""

import importlib

__version__ = "0.1.0"

# name -> the module that defines it; loaded on first use, so ``import nanlab`` stays light
PUBLIC = {
    "Trainer": "nanlab.train", "TrainConfig": "nanlab.train.config",
    "FAULTS": "nanlab.faults", "get_fault": "nanlab.faults", "inject": "nanlab.faults",
    "run_fault": "nanlab.faults",
    "locate": "nanlab.debug", "diagnose": "nanlab.debug", "load_run": "nanlab.debug",
    "Guard": "nanlab.guard",
    "NanlabError": "nanlab.errors",
}
__all__ = sorted(PUBLIC)


def __getattr__(name: str):
    if name in PUBLIC:
        value = getattr(importlib.import_module(PUBLIC[name]), name)
        globals()[name] = value  # the next lookup is a plain attribute
        return value
    raise AttributeError(f"module 'nanlab' has no attribute {name!r}")


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(PUBLIC))
