"""Each fault's run trained once per test session, then read back by every test that needs it.

The same faults are trained by test_faults, test_diagnose, test_locate, test_cuda_parity and
others. :func:`shared_run` takes :func:`nanlab.faults.run_fault`'s arguments, trains the run
into a run folder the first time they are asked for, and from then on returns
:func:`nanlab.load_run` of that folder (each call a fresh FaultRun, so a test that edits its
run leaves the next test's alone), with the trainer put back in the state the live run left
it in (its last checkpoint: the final one every run with checkpoints saves).

The folders live in the session's temporary folder that every xdist worker shares
(``tests/conftest.py`` sets :data:`ROOT`); a file lock per run makes one worker train it while
another waits for it. The folder's name is a hash of everything that decides the run: the
fault, its resolved parameters, the fixes, the resolved TrainConfig, the callbacks, the
thread count and the CPU kernel path.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import os
import pickle
import shutil
from pathlib import Path

import torch
from filelock import FileLock

from nanlab import faults
from nanlab.debug.diagnose import Diagnosis, diagnose
from nanlab.debug.runs import load_run
from nanlab.train import TrainConfig

ROOT: Path | None = None  # set once per session by tests/conftest.py


def stop_at_first_nonfinite(trainer, info):
    """A callback: stop just after the first non-finite step (stop_when_poisoned lets the
    GradScaler's skipped steps go on; this stops at those too), so the trainer's weights
    are still those of the bad step."""
    if not info.row["finite"]:
        trainer.request_stop("the first non-finite step")


def failed_run(name: str, **params) -> faults.FaultRun:
    """The built-in run with a fault, stopped just after its first non-finite step: what
    test_locate and test_cuda_parity replay. steps=300 fixes the LR schedule (the cosine
    length); the run stops long before."""
    run = shared_run(name, steps=300, checkpoint_every=10, stop_when_poisoned=True,
                     callbacks=[("on_step_end", stop_at_first_nonfinite)], **params)
    assert run.first_bad_step is not None, name
    return run


def run_key(name: str | None, fixes=(), callbacks=(), stop_when_poisoned=False,
            **kwargs) -> str:
    """A hash of everything that decides the run ``run_fault(name, ...)`` trains."""
    fault = faults.get_fault(name) if name is not None else None
    own = fault.params if fault else {}
    params = {k: v for k, v in kwargs.items() if k in own}
    train = {k: v for k, v in kwargs.items() if k not in own}
    base = TrainConfig(progress=False).replace(**train)
    config = faults.fault_config(name, base, **params)
    parts = {
        "fault": name, "params": fault.resolve(**params) if fault else {},
        "fixes": [fixes] if isinstance(fixes, str) else list(fixes),
        "config": config.to_dict(),
        "stop_when_poisoned": stop_when_poisoned,
        "callbacks": [(event, f"{fn.__module__}.{fn.__qualname__}") for event, fn in callbacks],
        "threads": torch.get_num_threads(),
        "kernels": torch.backends.cpu.get_cpu_capability(),
    }
    blob = json.dumps(parts, sort_keys=True, default=repr)
    return f"{name or 'clean'}-{hashlib.sha256(blob.encode()).hexdigest()[:16]}"


def shared_run(name: str | None, *, fixes=(), callbacks=(), stop_when_poisoned=False,
               **kwargs) -> faults.FaultRun:
    """``faults.run_fault(name, ...)`` with the same arguments (``out_dir`` and ``base``
    excepted), trained once per session and read back from its run folder."""
    if ROOT is None:
        raise RuntimeError("shared_run needs tests/conftest.py's session fixture (ROOT unset)")
    key = run_key(name, fixes, callbacks, stop_when_poisoned, **kwargs)
    folder = ROOT / key
    with FileLock(str(ROOT / f"{key}.lock")):
        if not folder.is_dir():
            partial = ROOT / f"{key}.partial-{os.getpid()}"
            shutil.rmtree(partial, ignore_errors=True)
            faults.run_fault(name, fixes=fixes, callbacks=callbacks, out_dir=str(partial),
                             stop_when_poisoned=stop_when_poisoned, **kwargs)
            os.rename(partial, folder)  # whole or absent: a crashed build is built again
    run = load_run(folder)
    saved = run.trainer.checkpoints.steps()
    if saved:  # the state the live trainer was left in, for tests that read its weights
        run.trainer.restore(max(saved))
    return run


# The diagnosis of the shared runs diagnose reads as `nanlab diagnose FOLDER` would, made
# once per session as the run is trained once: test_diagnose checks every fault's, and a
# family's own tests check more of the same diagnosis.
DIAGNOSED = {"checkpoint_every": 10, "stop_when_poisoned": True}


def shared_diagnosis(name: str, **kwargs) -> Diagnosis:
    """``diagnose(shared_run(name, **kwargs))`` (default: the run test_diagnose reads,
    ``DIAGNOSED``), made once per session and read back by every worker (pickled by this
    suite, for this suite: the file never leaves the session's folder). The Diagnosis
    comes without ``location`` (locate's report object); a test that needs it replays."""
    if ROOT is None:
        raise RuntimeError("shared_diagnosis needs tests/conftest.py's session fixture")
    kwargs = kwargs or dict(DIAGNOSED)
    key = run_key(name, **kwargs)
    path = ROOT / f"{key}.diagnosis.pickle"
    with FileLock(str(ROOT / f"{key}.diagnosis.lock")):
        if not path.exists():
            found = dataclasses.replace(diagnose(shared_run(name, **kwargs)), location=None)
            partial = ROOT / f"{key}.diagnosis.partial-{os.getpid()}"
            partial.write_bytes(pickle.dumps(found))
            os.rename(partial, path)
    return pickle.loads(path.read_bytes())
