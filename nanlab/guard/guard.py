"""The guard around the optimizer step: stop, skip or recover when a step goes bad.

A NaN does not stop a run by itself (claim B3): the optimizer writes it into every
weight and the loop trains on, burning compute. The guard looks at the step's loss and
global grad norm *after* backward and *before* the update, and acts:

- ``stop``: stop-loss (claim M9). Drop the update, keep the evidence (weights, optimizer
  state, gradients and the offending batch, loadable with ``weights_only=True``), stop.
- ``skip``: drop the update: the optimizer step *and* the LR-scheduler step, as
  Megatron-LM and DeepSpeed do on an fp16 overflow. Every skip is counted and logged
  with its reason (DeepSpeed users complain that skipped steps are silent, #8415).
- ``recover`` (claims M1, M10, PaLM): keep the evidence, roll back to the last good
  checkpoint at or before the failure, never train on the batches around the failure
  again; if the same incident comes back anyway, go back further and cut the LR (/10);
  give up loudly after ``max_rollbacks`` rollbacks for that incident.

**Incidents.** An incident is a failing batch, named by its batch index (its data
position: the same data however a rollback rewinds the step counter), and the step where
it failed. A failure *repeats* an incident when its batch failed before (a loop that does
not skip it, a second epoch), or when it comes before the run got ``repeat_window`` steps
past the incident it last rolled back for (the data was skipped, and the run failed again
at the same place: the data was not, or not only, to blame). Any other failure is a new
incident with a budget of its own: five isolated dirty batches are five incidents, each
cured by a skip. The escalation ladder, per incident:

1. its first failure: back to the last checkpoint at or before it, its batches skipped,
   the LR kept (PaLM);
2. each repeat: one checkpoint further back than the state that failed again, the LR
   times ``lr_factor`` (OPT, the article);
3. a repeat after ``max_rollbacks`` rollbacks for it: stop, event "give_up".

One evidence file per failure acted on, never overwritten, written atomically:
``evidence/evidence_step000040_batch000040_n1.pt`` (``n`` counts the guard's files).

A **spike detector** can act before the NaN: a one-sided running z-score of the loss
(optionally the grad norm too) over the last ``window`` finite values. ``spike=``
chooses what a spike triggers.

With ``rerun=True`` a failed step is first run again from the same state (the update has
not happened yet) to tell a one-off fault (a bit flip, a flaky device: *transient*) from
one that reproduces (data, or data and model state together: *persistent*), as
Megatron-LM's ``RerunStateMachine`` does. A transient fault is not worth a rollback.

Cheap while healthy: no hooks, no host sync of its own (it reads the trainer's one
sync per step, ``info.loss_value`` / ``info.grad_norm_value``), O(1) work per step. Under
``torch.distributed`` it adds one all-reduce of two flags per step, so that every rank
takes the same decision (:mod:`nanlab.distributed`).

How the big systems do it, and what nanlab adds:

=============  =========================================================================
Megatron-LM    validates the loss every step (fatal by default); ``--check-for-spiky-loss``
               flags a loss >= 10x the max of the early steps; on an fp16 overflow it
               skips the optimizer and scheduler step after an all-reduce MAX of the
               found-inf flag; the RerunStateMachine re-runs a step in place, then from a
               checkpoint on another GPU, to classify the fault.
DeepSpeed      skips the step on overflow ("OVERFLOW! ... Skipping step"), lowers the
               loss scale; the skip is easy to miss in the logs.
OLMo-core      ``SkipStepOptimizer``: skips when loss or grad norm > mean + 6 sigma of
               the last 128 steps, once 64 are in, without a host sync (one-sided:
               ``loss - mean <= 6 * std`` passes, a low loss is never skipped; a NaN
               in the window makes every comparison False, so it skips 128 steps).
Lightning      ``SpikeDetection``: window 10, rtol 2.0; raises, and writes the ids of the
               spiky batch and the one before it to a file that nothing reads back.
PaLM 540B      about 20 spikes: restart about 100 steps before, skip 200-500 batches;
               the same batches from an earlier state did not spike.
OPT-175B       manual restarts, the LR cut each time.
=============  =========================================================================

nanlab does all of it in one object: the rollback, the data skip (actually read back by
the trainer) and the LR cut wired together, bounded retries, the evidence kept, every
action an event with its reason, a one-sided z-score gated by a relative rise, and the
same guard in nanlab's Trainer and in a plain loop.

In nanlab's Trainer::

    guard = Guard("recover", spike="recover").attach(trainer)
    trainer.run()
    guard.summary()

With ``nanlab.faults.run_fault``: ``run_fault("nan_input", callbacks=guard.callbacks())``.

In your own loop (``keep`` and ``rollback`` are only needed for ``recover``)::

    guard = Guard("recover").watch(model, optimizer)
    step, pos = 0, 0
    while step < steps:
        if step % 10 == 0:
            guard.keep(step, pos)                  # a good state to come back to
        pos = guard.next_position(pos)           # jumps over batches the guard dropped
        loss = loss_fn(model, batches(pos))
        optimizer.zero_grad()
        loss.backward()
        norm = torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        decision = guard.check(step, loss.item(), norm.item(), batch_index=pos)
        if decision.action == "rollback":
            step, pos = guard.rollback()
            continue
        if decision.action == "stop":
            break
        if decision.ok:
            optimizer.step()
        step, pos = step + 1, pos + 1
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch

from nanlab.errors import NanlabError, check_choice, check_range
from nanlab.guard.agree import agree, is_distributed
from nanlab.guard.snapshots import PlainLoop
from nanlab.guard.spikes import RTOL, WARMUP, WINDOW, SpikeWatch, Z
from nanlab.runs.checkpoint import atomic_save, nonfinite_tensors
from nanlab.train.batches import frozen, plain

MODES = ("stop", "skip", "recover")
SPIKE_ACTIONS = (None, "stop", "skip", "recover")
ACTIONS = ("ok", "skip", "stop", "rollback")
VERDICTS = ("transient", "persistent")
LR_CUTS = ("repeat", "always")
LR_FACTOR = 0.1  # see Guard
SKIP_BEFORE, SKIP_AFTER = 1, 2  # see Guard
MAX_ROLLBACKS = 3  # per incident
REPEAT_WINDOW = 2  # see Guard


@dataclass
class Decision:
    """What the guard decided about one step. ``ok`` means: apply the update.

    ``action``: "ok", "skip" (drop this update), "stop" (end the run) or "rollback" (go
    back to ``to_step``, multiply the LR by ``lr_factor``, never train on ``skip_batches``).

    >>> d = Guard("skip").check(7, loss=float("nan"), grad_norm=float("nan"))
    >>> d.action, d.ok, d.trigger
    ('skip', False, 'nonfinite')
    """

    action: str
    step: int
    trigger: str | None = None  # "nonfinite" | "spike"
    reason: str = ""
    z: float = math.nan  # the loss z-score, when the detector is on and warmed up
    verdict: str | None = None  # "transient" | "persistent", with rerun=True
    to_step: int | None = None
    lr_factor: float = 1.0
    skip_batches: tuple[int, ...] = ()
    repeat: bool = False  # a rollback for an incident that came back
    incident: int | None = None  # its number in guard.incidents (1-based), with recover

    @property
    def ok(self) -> bool:
        return self.action == "ok"


class Guard(PlainLoop):
    """Stop, skip or recover on a non-finite step or a loss spike; see the module docstring.

    ``mode`` is what a non-finite loss or grad norm triggers; ``spike`` what a loss spike
    triggers (None: no detector). Detector: ``window``, ``warmup``, ``z``, ``rtol``,
    ``watch_grad_norm`` (off by default: the clean toy run's grad norm legitimately jumps
    3x around step 40, z = 9.7 with a window of 20; OLMo-core watches it over 128 steps).

    Recovery, escalating (each rollback goes to the last checkpoint at or before the
    failure; for a spike at step t, at or before t - 1, since update t - 1 did the harm):

    - The first rollback of an incident only skips data, as PaLM did. A repeat (see the
      module docstring) goes back one checkpoint further (the state it had restored may
      already be bad: weights grown too large to take any step) and multiplies the LR
      by ``lr_factor``. ``lr_cut="always"`` cuts at every rollback (the article, M1).
    - ``repeat_window=2``: steps past an incident's failure before another failure is a
      new incident. On the toy ``high_lr`` fails again at the very same step (28, 28);
      dirty batches 10 apart fail 6 steps apart once the skips have shifted the data.
    - ``lr_factor=0.1``: the article's /10, compounding. Measured on the toy: after two
      dirty-data NaNs, cutting at every rollback ends 2x (x0.5) to 4.6x (/10) above the
      clean run's loss, skipping data alone ends within 10 % of it; on a 10x-too-high
      LR (``high_lr``), x0.5 on repeats gives up after 3 rollbacks, /10 survives.
      OPT-175B cut 10 %, then to 2/3 of GPT-3's LR, by hand.
    - ``skip_before=1, skip_after=2``: never train on batches ``b - 1 .. b + 2`` around
      the failing batch ``b``. The batch before, because it may have moved the weights
      into the bad place (Lightning skips it too); two after, because bad data comes in
      runs (a corrupt shard). PaLM skipped 200-500 batches per spike, about 0.1-0.2 % of
      its run; 0.2 % of the toy's 200 steps is less than one batch, so a few is generous.
    - ``max_rollbacks=3``, per incident: after that many rollbacks for one incident its
      next repeat stops the run with a clear reason (event "give_up") instead of looping.

    ``rerun=True`` runs a failed step again first (see the module docstring).
    ``sync_ranks`` (None = when ``torch.distributed`` runs with more than one rank):
    all-reduce the decision flags so every data-parallel rank acts alike.
    ``evidence_dir``: where ``stop`` / ``recover`` write the bad state (default: the
    trainer's run folder; in memory when there is none).

    >>> guard = Guard("skip")
    >>> guard.check(0, loss=2.3, grad_norm=1.0).action
    'ok'
    >>> guard.check(1, loss=float("nan"), grad_norm=float("nan")).action
    'skip'
    """

    def __init__(self, mode: str = "stop", *, spike: str | None = None, window: int = WINDOW,
                 warmup: int = WARMUP, z: float = Z, rtol: float = RTOL,
                 watch_grad_norm: bool = False, lr_factor: float = LR_FACTOR,
                 lr_cut: str = "repeat", skip_before: int = SKIP_BEFORE,
                 skip_after: int = SKIP_AFTER, max_rollbacks: int = MAX_ROLLBACKS,
                 repeat_window: int = REPEAT_WINDOW, rerun: bool = False,
                 sync_ranks: bool | None = None, evidence_dir: str | Path | None = None):
        check_choice("mode", mode, MODES)
        check_choice("spike", spike, SPIKE_ACTIONS)
        check_range("lr_factor", lr_factor, 0.0, 1.0)
        check_choice("lr_cut", lr_cut, LR_CUTS)
        if lr_factor == 0:
            raise NanlabError("lr_factor=0 is out of range; allowed: a number > 0 and <= 1 "
                              "(0.5 halves the LR at each rollback, 1 keeps it)")
        check_range("skip_before", skip_before, 0, integer=True)
        check_range("skip_after", skip_after, 0, integer=True)
        check_range("max_rollbacks", max_rollbacks, 0, integer=True)
        check_range("repeat_window", repeat_window, 0, integer=True)
        self.mode, self.spike = mode, spike
        self.detectors = SpikeWatch(window, warmup, z, rtol, watch_grad_norm)
        self.loss_detector, self.norm_detector = self.detectors.loss, self.detectors.norm
        self.lr_factor, self.lr_cut = lr_factor, lr_cut
        self.skip_before, self.skip_after = skip_before, skip_after
        self.max_rollbacks, self.rerun, self.sync_ranks = max_rollbacks, rerun, sync_ranks
        self.repeat_window = repeat_window
        self.evidence_dir = Path(evidence_dir) if evidence_dir is not None else None
        self.settings = {"mode": mode, "spike": spike, "window": window, "warmup": warmup,
                         "z": z, "rtol": rtol, "watch_grad_norm": watch_grad_norm,
                         "lr_factor": lr_factor, "lr_cut": lr_cut, "skip_before": skip_before,
                         "skip_after": skip_after, "max_rollbacks": max_rollbacks,
                         "repeat_window": repeat_window, "rerun": rerun,
                         "sync_ranks": sync_ranks}
        self.counts = {"nonfinite": 0, "spike": 0, "skip": 0, "rollback": 0, "stop": 0,
                       "transient": 0}
        self.events: list[dict] = []  # everything the guard did, also in a plain loop
        self.evidence: list[dict] = []  # the bad states kept (a path when written to disk)
        self.skip_batches: set[int] = set()  # plain loop: batches never to train on
        self.incidents: list[dict] = []  # recover: one per incident, its rollbacks counted
        self.rollbacks = 0  # all incidents together
        self.lr_scale = 1.0  # plain loop: the product of all LR cuts so far
        self.trainer = None
        self._model: torch.nn.Module | None = None
        self._optimizer = self._scheduler = None
        self._kept: dict[int, tuple[dict, Any, float, tuple]] = {}  # plain loop states
        self._spare: list[dict] = []  # buffers of states dropped, for the next keep
        self._detector_at: dict[int, tuple] = {}  # trainer: detector state per checkpoint
        self._checked: dict[int, list[str]] = {}  # saved state -> its non-finite tensors
        self._last: Decision | None = None
        self._current: dict | None = None  # the incident of the last rollback
        self._pending: Decision | None = None
        self._rng: tuple | None = None  # (cpu, cuda) RNG states at the step's start
        self._scaler_handles_inf = False

    # -- the decision (shared by the trainer and a plain loop) ---------------------------
    def check(self, step: int, loss: float, grad_norm: float | None = None, *,
              batch_index: int | None = None, batch: Any = None, finite: bool | None = None,
              rerun: Callable[[], tuple[float, float]] | None = None) -> Decision:
        """Decide about one step from its loss and grad norm (host floats, already synced).

        ``finite`` overrides the finiteness test (the Trainer passes its own, which lets a
        GradScaler handle inf gradients). ``batch`` is kept as evidence on stop / recover.
        ``rerun`` (used with ``rerun=True``) recomputes the same step's loss and grad norm
        from the same state, gradients in place, and returns them.

        >>> Guard("stop").check(5, float("inf"), 1.0).reason
        'non-finite loss (loss inf, grad norm 1)'
        """
        loss, grad = float(loss), math.nan if grad_norm is None else float(grad_norm)
        if finite is None:
            finite = math.isfinite(loss) and (grad_norm is None or math.isfinite(grad))
        z, spike = self.detectors.test(loss, grad) if finite and self.spike else (math.nan, False)
        bad_here, spike_here = not finite, spike
        bad, spike = self._agree(bad_here, spike)
        if not bad and not spike:
            self.detectors.observe(loss, grad)
            self._last = Decision("ok", step, z=z)
            return self._last

        trigger = "nonfinite" if bad else "spike"
        self.counts[trigger] += 1
        reason = self._reason(trigger, loss, grad, z, local=bad_here or spike_here)
        verdict = None
        if self.rerun and rerun is not None:
            verdict = self._classify(step, trigger, loss, grad, rerun)
            if verdict == "transient":
                self.counts["transient"] += 1
                self._log("guard", step, trigger=trigger, action="ok", verdict=verdict,
                          loss=loss, grad_norm=grad, z=z, batch=batch_index,
                          reason=f"{reason}; the rerun was clean: transient, update applied")
                self._last = Decision("ok", step, trigger, reason, z, verdict)
                return self._last
        if finite:  # spikes enter the window too (as in OLMo-core), so that a lasting
            self.detectors.observe(loss, grad)  # shift of level is accepted, not skipped
        action = self.mode if trigger == "nonfinite" else self.spike
        decision = Decision(action, step, trigger, reason, z, verdict)
        if action == "recover":
            decision = self._plan_rollback(decision, batch_index)
        self._log("guard", step, trigger=trigger, action=decision.action, verdict=verdict,
                  loss=loss, grad_norm=grad, z=z, batch=batch_index, reason=decision.reason)
        if action == "recover" and decision.action == "stop":
            self._log("give_up", step, reason=decision.reason, rollbacks=self.rollbacks,
                      incident=decision.incident)
        if decision.action == "skip":
            self.counts["skip"] += 1
            decision.reason = f"{reason}; skip #{self.counts['skip']}"
            self._log("skip", step, record=False, batch=batch_index, reason=decision.reason)
        elif decision.action in ("stop", "rollback"):
            self._keep_evidence(decision, loss, grad, batch_index, batch)
            if decision.action == "stop":
                self.counts["stop"] += 1
                self._log("stop", step, record=False, reason=decision.reason)
        self._last = decision
        return decision

    def _agree(self, *flags: bool) -> tuple[bool, ...]:
        """Every rank's flags, all-reduced with MAX, when data-parallel (else unchanged)."""
        sync = self.sync_ranks if self.sync_ranks is not None else is_distributed()
        return agree(*flags) if sync else flags

    @staticmethod
    def _reason(trigger: str, loss: float, grad: float, z: float, local: bool) -> str:
        where = "" if local else " on another rank"
        if trigger == "nonfinite":
            what = "loss" if not math.isfinite(loss) else "grad norm"
            return f"non-finite {what}{where} (loss {loss:.4g}, grad norm {grad:.4g})"
        return f"loss spike{where} (loss {loss:.4g}, z = {z:.1f})"

    def _classify(self, step: int, trigger: str, loss: float, grad: float,
                  rerun: Callable[[], tuple[float, float]]) -> str:
        """Run the step again from the same state: does the failure come back?"""
        loss2, grad2 = rerun()
        if trigger == "nonfinite":
            still_bad = not (math.isfinite(loss2)
                             and (math.isfinite(grad2) or self._scaler_handles_inf))
        else:  # a NaN on the rerun is no better than the spike
            still_bad = not math.isfinite(loss2) or self.detectors.test(loss2, grad2)[1]
        (still_bad,) = self._agree(still_bad)
        verdict = "persistent" if still_bad else "transient"
        same = (loss2 == loss or (math.isnan(loss2) and math.isnan(loss)))
        self._log("rerun", step, verdict=verdict, loss=loss, rerun_loss=loss2,
                  grad_norm=grad, rerun_grad_norm=grad2, identical=same)
        return verdict

    def _plan_rollback(self, d: Decision, batch_index: int | None) -> Decision:
        last = self._current  # the incident of the last rollback: is the run still in it?
        near = last is not None and d.step <= last["step"] + self.repeat_window
        inc = self._incident(d.step, batch_index, near)
        d.incident, d.repeat = inc["id"], inc["rollbacks"] > 0
        if inc["rollbacks"] >= self.max_rollbacks:
            d.action = "stop"
            d.reason = (f"gave up: {d.reason} at step {d.step}: incident {inc['id']} (batch "
                        f"{inc['batch']}, step {inc['first_step']}) after {inc['rollbacks']} "
                        f"rollback(s) for it (max_rollbacks={self.max_rollbacks})")
            return d
        # A spike at step t shows the damage of update t - 1: the state saved before
        # step t already has it, so go back to one saved before step t - 1 at the latest.
        target = d.step if d.trigger == "nonfinite" else max(0, d.step - 1)
        good = [s for s in self._good_steps() if s <= target]
        if d.repeat and good:
            # Skipping the data did not cure it: the state it had restored may be bad
            # already (weights grown too large), so go back one checkpoint further (than
            # that state while the run is still in the incident, else than the last one),
            # and the cause is (also) the LR, so cut it (OPT, the article; PaLM did not).
            back = min(good[-1], inc["restored"]) if inc is last and near else good[-1]
            good = [s for s in good if s < back] or good[:1]
        if not good:
            d.action = "stop"
            d.reason = (f"gave up: {d.reason}; no good state at or before step {target} to "
                        "roll back to (plain loop: call guard.keep(step) every few steps)")
            return d
        d.action, d.to_step = "rollback", good[-1]
        if self.lr_cut == "always" or d.repeat:
            d.lr_factor = self.lr_factor
        if batch_index is not None:
            d.skip_batches = tuple(range(max(0, batch_index - self.skip_before),
                                         batch_index + self.skip_after + 1))
        return d

    def _incident(self, step: int, batch: int | None, near: bool) -> dict:
        """The incident this failure belongs to (see the module docstring), or a new one."""
        inc = next((i for i in self.incidents if batch is not None and batch in i["batches"]),
                   None)  # the same data failing again
        if inc is None and near:
            inc = self._current  # before the run got past the incident it last rolled back for
        if inc is None:  # a new incident, with a budget of its own
            self.incidents.append(inc := {"id": len(self.incidents) + 1, "batch": batch,
                                          "first_step": step, "step": step, "batches": [],
                                          "rollbacks": 0, "restored": None})
        if not (inc is self._current and near) or step > inc["step"]:
            inc["step"] = step  # the window runs from its latest failure
        if batch is not None and batch not in inc["batches"]:
            inc["batches"].append(batch)
        return inc

    def _good_steps(self) -> list[int]:
        """The saved states a rollback may trust: every floating-point tensor of the weights
        *and* of the optimizer state finite (:meth:`_problems`). A checkpoint whose Adam
        ``exp_avg_sq`` overflowed to inf while the weights were still finite is not a
        good state: it is passed over, with a "bad_checkpoint" event, and the rollback
        goes back further."""
        saved = self.trainer.checkpoints.steps() if self.trainer is not None \
            else sorted(self._kept)
        return [s for s in saved if not self._problems(s)]

    def _problems(self, step: int) -> list[str]:
        """What is non-finite in the state saved before ``step`` (cached per saved state:
        each is loaded once; a new save at that step clears the entry)."""
        if step not in self._checked:
            state = self.trainer.checkpoints.load(step) if self.trainer is not None \
                else self._kept_state(step)
            parts = {k: state[k] for k in ("model", "optimizer", "scheduler", "scaler")
                     if k in state}
            self._checked[step] = nonfinite_tensors(parts)
            if self._checked[step]:
                self._log("bad_checkpoint", step, problems=self._checked[step][:5],
                          tensors=len(self._checked[step]))
        return self._checked[step]

    # -- events and evidence -------------------------------------------------------------
    def _log(self, kind: str, step: int, record: bool = True, **details) -> None:
        """An event in ``guard.events`` and, attached to a trainer, in its run record
        (``record=False`` for "skip" and "stop", which the trainer logs itself)."""
        self.events.append({"kind": kind, "step": step, **details})
        if record and self.trainer is not None:
            self.trainer.record.log_event(kind, step, **details)

    def _keep_evidence(self, d: Decision, loss: float, grad: float, batch_index: int | None,
                       batch: Any) -> None:
        """The state that produced the bad step (before its update), the gradients it
        produced and its batch: enough to replay it. Tensors and plain Python only."""
        if self._model is None:
            return
        state = self.trainer.state_dict() if self.trainer is not None else self._loop_state()
        if self.trainer is not None and self._rng is not None:
            state["rng_cpu"] = self._rng[0]  # the step's start: replay is then exact
        attempt = self.incidents[d.incident - 1]["rollbacks"] + 1 if d.incident else None
        evidence = {
            "step": d.step, "trigger": d.trigger, "action": d.action, "reason": d.reason,
            "loss": loss, "grad_norm": grad, "batch_index": batch_index,
            "incident": d.incident, "attempt": attempt, "state": state, "batch": plain(batch),
            "grads": {n: p.grad.detach().cpu() for n, p in self._model.named_parameters()
                      if p.grad is not None},
        }
        folder = self.evidence_dir or (self.trainer.record.directory
                                       if self.trainer is not None else None)
        where = {"incident": d.incident, "attempt": attempt}
        if folder is not None:  # one file per failure acted on, never one replaced
            name = f"evidence_step{d.step:06d}" + ("" if batch_index is None
                                                  else f"_batch{batch_index:06d}")
            n = len(self.evidence) + 1  # and past files another run left in the folder
            while (path := Path(folder) / "evidence" / f"{name}_n{n}.pt").exists():
                n += 1
            atomic_save(evidence, path)
            self.evidence.append({"step": d.step, "batch": batch_index, **where,
                                  "path": str(path)})
            self._log("snapshot", d.step, path=str(path), batch=batch_index, **where)
        else:
            self.evidence.append(frozen(evidence))
            self._log("snapshot", d.step, path=None, batch=batch_index, **where)

    def summary(self) -> dict:
        """Counts of what the guard saw and did, for a notebook or a report: ``incidents``
        (recover: distinct failures), ``lr_cuts``, ``evidence`` (one file each, on disk).

        >>> Guard("skip").summary()["incidents"]
        0
        """
        return {**self.counts, "rollbacks": self.rollbacks, "incidents": len(self.incidents),
                "lr_cuts": sum(e["kind"] == "lr_cut" for e in self.events),
                "events": len(self.events), "evidence": len(self.evidence)}

    # -- nanlab's Trainer ----------------------------------------------------------------
    def attach(self, trainer) -> Guard:
        """Plug into a :class:`nanlab.train.Trainer`; returns the guard.

        >>> from nanlab.train.trainer import TrainConfig, Trainer
        >>> guard = Guard("skip").attach(Trainer(TrainConfig(steps=5, progress=False)))
        """
        if not callable(getattr(trainer, "add_callback", None)):
            raise NanlabError(f"Guard.attach needs a nanlab Trainer; got "
                              f"{type(trainer).__name__}; allowed: a Trainer, or in your own "
                              "loop guard.watch(model, optimizer) and guard.check(step, loss)")
        self._bind(trainer)
        for event, fn in self._callbacks():
            trainer.add_callback(event, fn)
        return self

    def callbacks(self) -> list[tuple[str, Callable]]:
        """``(event, fn)`` pairs for ``faults.run_fault(..., callbacks=guard.callbacks())``:
        the guard binds itself to the trainer when the run starts.

        >>> from nanlab import faults
        >>> guard = Guard("skip")
        >>> run = faults.run_fault("nan_input", steps=45,
        ...                        callbacks=guard.callbacks())  # doctest: +SKIP
        >>> guard.counts["skip"]  # doctest: +SKIP
        1
        """
        return [("on_run_start", lambda tr, info: self._bind(tr)), *self._callbacks()]

    def _callbacks(self) -> list[tuple[str, Callable]]:
        pairs = [("on_after_backward", self._after_backward), ("on_step_end", self._step_end),
                 ("on_checkpoint", self._checkpointed)]
        if self.rerun:
            pairs.append(("on_step_start", self._remember_rng))
        return pairs

    def _bind(self, trainer) -> None:
        if self.trainer is trainer:
            return
        if self.trainer is not None:
            raise NanlabError("this Guard is already attached to another trainer; "
                              "make one Guard per run")
        if "recover" in (self.mode, self.spike) and not trainer.config.checkpoint_every:
            raise NanlabError(
                f"Guard(mode={self.mode!r}, spike={self.spike!r}) rolls back to checkpoints, "
                "but this trainer keeps none (checkpoint_every=0); allowed: "
                "checkpoint_every > 0, or mode='stop' / 'skip'")
        self.trainer, self._model = trainer, trainer.model
        self._scaler_handles_inf = trainer.scaler is not None
        trainer.record.manifest["guard"] = dict(self.settings)
        trainer.record.write_manifest()

    def _remember_rng(self, trainer, info) -> None:
        """Only with rerun=True: a 5 kB copy (and the CUDA generator's seed and offset)."""
        cuda = torch.cuda.get_rng_state(trainer.device) if trainer.device.type == "cuda" else None
        self._rng = (torch.get_rng_state(), cuda)

    def _after_backward(self, trainer, info) -> None:
        rerun = (lambda: self._rerun_in_trainer(trainer, info)) if self.rerun else None
        d = self.check(info.step, info.loss_value, info.grad_norm_value, finite=info.finite,
                       batch_index=info.batch_index, batch=info.batch, rerun=rerun)
        if d.ok:  # after a transient fault the gradients are the rerun's; with a
            return  # GradScaler, scaler.step still sees the first pass's inf and skips
        info.skip, info.skip_reason = True, f"guard: {d.reason}"
        if d.action == "stop":
            trainer.request_stop(f"guard: {d.reason}")
        elif d.action == "rollback":
            self._pending = d  # the trainer finishes the step first; then we go back

    def _step_end(self, trainer, info) -> None:
        if self._pending is None:
            return
        d, self._pending = self._pending, None
        scale = trainer.lr_scale * d.lr_factor  # compounding: each rollback cuts again
        trainer.restore(d.to_step)
        trainer.set_lr_scale(scale)  # restore() loaded the checkpoint's own lr_scale
        trainer.skip_batches.update(d.skip_batches)
        if d.to_step in self._detector_at:
            self.detectors.load(self._detector_at[d.to_step])
        self._record_rollback(d, scale)

    def _record_rollback(self, d: Decision, scale: float) -> None:
        self.rollbacks, self.counts["rollback"] = self.rollbacks + 1, self.counts["rollback"] + 1
        inc = self._current = self.incidents[d.incident - 1]
        inc["rollbacks"], inc["restored"] = inc["rollbacks"] + 1, d.to_step
        self._log("rollback", d.step, to_step=d.to_step, incident=inc["id"],
                  attempt=inc["rollbacks"], max_rollbacks=self.max_rollbacks, repeat=d.repeat,
                  reason=d.reason, verdict=d.verdict)
        if d.lr_factor != 1.0:
            self._log("lr_cut", d.step, factor=d.lr_factor, lr_scale=scale)
        if d.skip_batches:
            self._log("skip_batches", d.step, batches=list(d.skip_batches))

    def _checkpointed(self, trainer, info) -> None:
        """Remember the detector as it was at this checkpoint, to rewind it on rollback."""
        self._detector_at[trainer.step] = self.detectors.state()
        self._checked.pop(trainer.step, None)  # a new state at this step: check it again

    def _rerun_in_trainer(self, trainer, info) -> tuple[float, float]:
        """The step again, as the trainer ran it: same weights, optimizer state, batch and
        RNG (the update has not happened yet); the gradients are replaced in place, and so
        are ``info``'s loss and grad norm: the step's row records the pass it applies (the
        first pass stays in the "rerun" and "guard" events)."""
        if self._rng is not None:
            torch.set_rng_state(self._rng[0])
            if self._rng[1] is not None:
                torch.cuda.set_rng_state(self._rng[1], trainer.device)
        again = trainer.forward_backward(info.batch)
        info.loss, info.grad_norm, info.finite = again.loss, again.grad_norm, again.finite
        info.loss_value, info.grad_norm_value = again.loss_value, again.grad_norm_value
        return again.loss_value, again.grad_norm_value


__all__ = ["ACTIONS", "MODES", "SPIKE_ACTIONS", "VERDICTS", "Decision", "Guard"]
