"""nanlab: make loss spikes and NaN losses happen on a Transformer, then find and fix them.

Two products share the package. The **library** works on any model: training, faults,
diagnosis, the guard. The **course** (notebooks, checks, practice) and the **interview**
practice build on it; the library never imports them. ``help(nanlab.<name>)`` says more,
with examples.

The library, the modules the labs import most at the top:

- ``nanlab.model``       the toy decoder-only Transformer (attention written out by hand)
- ``nanlab.data``        the synthetic task: batches are a pure function of (seed, step)
- ``nanlab.config``      ``TrainConfig``: everything that decides a run, the reason beside each knob
- ``nanlab.train``       a model-agnostic trainer with callbacks, AMP, checkpoints, exact replay
- ``nanlab.objective``   the loss, the LR schedule and the global grad norm a step uses
- ``nanlab.lr_lever``    one way to change the LR a run applies: a factor at the optimizer's
  step, on whatever any scheduler set
- ``nanlab.resume``      how a trainer saves, restores and restarts (and what a restart forgets)
- ``nanlab.accum``       gradient accumulation: micro-batches weighted by their targets, one
  GradScaler step per optimizer step
- ``nanlab.half_matmul`` fp16 matmuls on a CPU computed as a GPU computes them (fp32
  accumulation, one rounding to fp16), many times faster than the CPU's fp16 kernel
- ``nanlab.record``      the run record: per-step and per-layer statistics, JSON Lines, manifest
- ``nanlab.checkpoint``  atomic checkpoints loadable with ``torch.load(weights_only=True)``
- ``nanlab.atomic``      one atomic writer (temp file, fsync, rename) for every file nanlab writes
- ``nanlab.runlock``     one writer per run folder: a lock holding the writer's pid and host
- ``nanlab.batches``     one walker over nested batches (tuples, dicts, dataclasses of tensors)
- ``nanlab.signals``     reading a loss curve: spikes, recovery, stalls
- ``nanlab.norms``       the normalisation layers of any model and the field holding their eps
- ``nanlab.judge``       one judge of a run: healthy, or spike / stall / diverge / nonfinite / error
- ``nanlab.cures``       adaptive cures on any optimizer and model: ZClip, StableAdamW's update
  clipping, SPAM's spike clipping, Gemma 2's logit soft-capping
- ``nanlab.errors``      errors that say what was wrong, the value, and what is allowed
- ``nanlab.vocab_parallel`` Megatron-LM's vocabulary-parallel embedding and cross-entropy in
  one process: how they mask an id outside the vocabulary
- ``nanlab.numerics``    numbers the course quotes, computed once: the gradient below which
  fp16 Adam's v is 0, Kingma & Ba's bound on an Adam step
- ``nanlab.distributed`` data-parallel training on the CPU, every rank guarded alike
- ``nanlab.cli``         the ``nanlab`` command line, its exit codes
- ``nanlab.cli_parse``   typed values for the command line: ``--config`` and ``--set``
- ``nanlab.cli_resume``  ``nanlab run --resume``: the stored run's config, a changed setting refused
- ``nanlab.faults``      faults that fail by their real mechanism, one module per family, their
  cures, the fault x fix matrix, mystery runs, the spike rules' corpus (``catalogue``,
  ``levers``, ``inject``, ``dirty_data``, ``learning_rate``, ``precision``, ``init_eps``,
  ``optimizer_state``, ``myths``, ``grad_accum``, ``hardware``, ``llm_data``, ``run``,
  ``fixes``, ``matrix``, ``mystery``, ``corpus``)
- ``nanlab.debug``       finding the cause: ``locate`` replays the first bad step, ``diagnose``
  runs the SOP, probes and LR sensitivity, per-sample loss (``trace``, ``locate``,
  ``diagnose``, ``runs``, ``probes``, ``sensitivity``, ``attribution``, ``llm_data_checks``,
  ``hardware_checks``, ``restart_checks``, ``grad_accum_checks``)
- ``nanlab.guard``       stop / skip / recover around the optimizer step, the spike detector,
  one decision on every data-parallel rank, spike rules (``guard``, ``snapshots``,
  ``spikes``, ``agree``, ``detectors``, ``framework``, ``hf``, ``lightning``)
- ``nanlab.viz``         loss curves, grad-norm heat maps, per-layer histograms and update
  ratios, float bit layouts, the SOP flowchart, TensorBoard export (``plots``, ``layers``,
  ``diagrams``, ``tensorboard``)

Built on the library:

- ``nanlab.course``      notebooks from one source, exercise checks, practice widgets,
  progress, the claims map, the nbval plugin (``notebooks``, ``checks``, ``quiz``, ``rubric``,
  ``widgets``, ``progress``, ``claims``, ``pytest_plugin``)
- ``nanlab.interview``   interview practice: the question bank, answer frameworks, mock
  interview, STAR story, cheat sheet (``bank``, ``frameworks``, ``mock``, ``widgets``, ``star``,
  ``cheatsheet``)

The public API, importable from ``nanlab`` itself (each name loads its module on first use)::

    Trainer, TrainConfig             run a model (the toy or yours) with records and checkpoints
    FAULTS, get_fault, inject        the fault catalogue; a fault put into your own run
    run_fault                        a fault on the built-in toy run
    locate, diagnose, load_run       the first bad step; the SOP with its fix proven; a run folder
    Guard                            stop, skip or roll back around the optimizer step
    NanlabError                      every error nanlab raises on bad input

``nanlab.train`` and ``nanlab.judge`` are modules, so their functions of the same name are
called as ``nanlab.train.train`` and ``nanlab.judge.judge``. Everything else lives in the
modules above; the course and the interview practice are
reached as ``nanlab.course`` and ``nanlab.interview``.

Quick start in a notebook::

    import nanlab
    trainer = nanlab.Trainer(nanlab.TrainConfig(steps=200))
    trainer.run().losses()[-1]
"""

import importlib

__version__ = "0.1.0"

# name -> the module that defines it; loaded on first use, so ``import nanlab`` stays light
PUBLIC = {
    "Trainer": "nanlab.train", "TrainConfig": "nanlab.config",
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
