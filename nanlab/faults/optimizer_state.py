"""The optimizer-state family: what a restart or a freeze does to Adam's moments and step
count, and to the LR schedule.

Read from the per-layer grad-norm history and the LR curve (SOP steps 3 and 4).

On the built-in run the two restarts are real ones: the fault schedules a job restart on
the built trainer (``Trainer.schedule_restart``: a ``torch.save`` / ``torch.load`` round
trip, a "restart" event that diagnose reads), and ``TrainConfig.resume_skips`` says what
the resume forgets; the cures ``resume_full_state`` (load everything) and ``rewarm_lr``
(warm the LR up again after the restart) act on that run.
On any other run the same state is forgotten at the step through levers, as the resume
code that forgets it would leave it: the optimizer's state emptied (what a fresh AdamW
holds), the scheduler put back as it was built. The freeze is a lever on every run:
gradient hooks that zero the frozen parameters' gradients until the unfreeze.

A fresh Adam state shows on a run that has settled: its first updates are lr x sign(g)
on every weight against the run's own lr x |m_hat| / sqrt(v_hat). At step 40 of five
foreign models at their tuned LR (``tests/foreign_models.py``, TUNED) the run's own
ratio is 0.02-0.03 on an encoder LM, a conv and an MLP regressor, which spike, and
0.1-0.2 on a still-learning seq2seq and a VAE with noisy gradients, which absorb it.
The freeze picks no toy name on another model: without ``layer=`` it freezes the
largest ``nn.Linear`` (on the toy, ``mlp.c_fc`` of every block).
"""

from __future__ import annotations

import copy
from dataclasses import dataclass

import torch

from nanlab.errors import NanlabError
from nanlab.faults.catalogue import Fault, Param, register

RESTART_AT = Param(100, 1, 100_000, help="the step before which the job is restarted")


def _fresh_optimizer(inj, p: dict) -> None:
    """Before step ``at_step`` the optimizer's state is emptied, once: a newly built
    optimizer holds none (Adam: m = v = 0, its step count 0 until its first update)."""
    inj._need("optimizer", inj.optimizer)
    opt = inj.optimizer
    if isinstance(opt, torch.optim.SGD) and not any(g.get("momentum") for g in opt.param_groups):
        raise NanlabError("resume_fresh_optimizer: plain SGD (momentum 0) keeps no state, so "
                          "a fresh one is the same optimizer; use Adam(W) or SGD with momentum")
    done = []

    def hook(step: int) -> None:
        if step == p["at_step"] and not done:  # once: a rollback past it does not restart
            opt.state.clear()
            done.append(step)
    inj.step_hooks.append(hook)


def _reset_schedule(inj, p: dict) -> None:
    """Before step ``at_step`` the scheduler is put back as it was built (its state and the
    LRs it gave at step 0), once: what a new scheduler whose state was not loaded does."""
    sched = inj.scheduler
    if sched is None:
        raise NanlabError("resume_reset_schedule needs scheduler=...: pass the LR scheduler "
                          "that the resume forgets to inject()")
    if inj.optimizer is not None and getattr(sched, "optimizer", None) is not inj.optimizer:
        raise NanlabError("resume_reset_schedule: scheduler= drives another optimizer than "
                          "optimizer=; pass the pair your loop steps")
    if getattr(sched, "last_epoch", 0) != 0:
        raise NanlabError(f"resume_reset_schedule needs the scheduler as built (its state is "
                          f"what the restart goes back to); {type(sched).__name__} has already "
                          f"stepped {sched.last_epoch} times: call inject() before training")
    fresh = copy.deepcopy(sched.state_dict())
    lrs = [g["lr"] for g in sched.optimizer.param_groups]
    done = []

    def hook(step: int) -> None:
        if step == p["at_step"] and not done:
            sched.load_state_dict(copy.deepcopy(fresh))  # load_state_dict may pop from it
            for group, lr in zip(sched.optimizer.param_groups, lrs, strict=True):
                group["lr"] = lr
            done.append(step)
    inj.step_hooks.append(hook)

register(Fault(
    name="resume_fresh_optimizer", family="optimizer_state",
    summary="a job restarted mid-run resumes the weights but builds a fresh AdamW",
    mechanism="the new optimizer has m = v = 0 and step 0; Adam's bias correction makes "
              "its first update m_hat / sqrt(v_hat) = g / |g|, so every weight moves by the "
              "full LR in the direction of its gradient's sign, whatever the gradient's "
              "size, and v_hat stays a noisy estimate of a few squared gradients for the "
              "next steps: the trained weights are knocked off their solution and the loss "
              "spikes (a NaN at a high enough LR), then climbs back down",
    needs="a restart (preemption) whose resume code loads model.state_dict() but not "
          "optimizer.state_dict(), here before step 100 at the cosine LR of that step "
          "(3.1e-3); clipping cannot help: Adam's first update does not depend on the "
          "gradient's size. On your own run: the spike is the gap between the fresh "
          "state's lr x sign(g) and the run's own lr x |m_hat| / sqrt(v_hat), wide on a "
          "run that has settled (0.02 lr per weight), narrow on one still learning "
          "steadily or with noisy gradients (0.1-0.2 lr: no spike)",
    reveals="grad_norms", cure="resume_full_state", signature="spike",
    params={"at_step": RESTART_AT},
    conditions=lambda p: {"resume_skips": ("optimizer",)},
    on_toy=lambda inj, p: inj.trainer.schedule_restart(p["at_step"]),
    foreign=_fresh_optimizer,
))

register(Fault(
    name="resume_reset_schedule", family="optimizer_state",
    summary="a job restarted mid-run resumes weights and optimizer, but the LR schedule "
            "starts again at step 0",
    mechanism="the scheduler's state is not loaded, so the new LambdaLR counts from 0: "
              "warmup runs again and the LR climbs back to its peak (5e-3) on a model the "
              "cosine decay had brought to 6e-4; the full-size updates throw the nearly "
              "converged weights off and the loss spikes about 20 steps after the restart, "
              "when the LR reaches the peak",
    needs="a restart whose resume code loads the model and the optimizer but not "
          "scheduler.state_dict(), late enough that the schedule had decayed (step 130 "
          "of 200)",
    reveals="lr", cure="resume_full_state", signature="spike",
    params={"at_step": Param(130, 1, 100_000,
                             help="the step before which the job is restarted")},
    conditions=lambda p: {"resume_skips": ("scheduler",)},
    on_toy=lambda inj, p: inj.trainer.schedule_restart(p["at_step"]),
    foreign=_reset_schedule,
))

@dataclass(frozen=True)
class NamePart(Param):
    """A parameter that is a part of parameter names (a non-empty string), or None for the
    fault's own choice: the model decides which names exist, so they are checked on the
    model, not here."""

    def check(self, fault: str, name: str, value):
        if value is not None and (not isinstance(value, str) or not value):
            raise NanlabError(f"{fault}.{name}={value!r} is not allowed; give a part of the "
                              "parameter names, such as 'mlp.c_fc' or 'encoder.layers.0'")
        return value


TOY_LAYER = "mlp.c_fc"  # on the toy: the first MLP matrix of every block


def _layer_to_freeze(model, layer: str | None) -> tuple[str, list[torch.nn.Parameter]]:
    """(what is frozen, in words; its parameters): those whose name holds ``layer``; for
    None, the toy's first MLP matrix of every block, or on any other model its largest
    ``nn.Linear`` by weight size (the first of equals, module order) whose forward runs,
    that trains and shares its weight with no other module (a tied output head would
    freeze the embedding too), weight and bias."""
    from nanlab.faults.hardware import linears
    from nanlab.toy.model import GPT

    if layer is None and isinstance(model, GPT):
        layer = TOY_LAYER
    if layer is not None:
        return repr(layer), [q for n, q in model.named_parameters()
                             if q.requires_grad and layer in n]
    seen: dict[int, int] = {}
    for _, q in model.named_parameters(remove_duplicate=False):
        seen[id(q)] = seen.get(id(q), 0) + 1
    found = [(n, m) for n, m in linears(model)
             if m.weight.requires_grad and seen.get(id(m.weight)) == 1]
    if not found:
        raise NanlabError(f"adam_unfreeze_spike: {type(model).__name__} has no trainable, "
                          "untied nn.Linear to freeze by default; name the frozen parameters "
                          "with layer= (a part of their names)")
    name, module = max(found, key=lambda nm: nm[1].weight.numel())  # the first of the largest
    return f"the largest Linear {name!r}", [q for q in module.parameters() if q.requires_grad]


def _freeze(inj, p: dict) -> None:
    """Gradient hooks make the gradient of the frozen parameters (:func:`_layer_to_freeze`)
    exactly 0 until step ``at_step``; the parameters stay in the optimizer, which keeps
    stepping them (Adam's count runs on with m = v = 0)."""
    inj._need("model", inj.model)
    inj._need("optimizer", inj.optimizer)
    groups = inj.optimizer.param_groups
    if not all("betas" in g for g in groups):
        raise NanlabError(f"adam_unfreeze_spike needs an Adam-type optimizer (its b2 makes "
                          f"the spike); {type(inj.optimizer).__name__} has no betas")
    what, frozen = _layer_to_freeze(inj.model, p["layer"])
    if not frozen:
        names = [repr(n) for n, q in inj.model.named_parameters() if q.requires_grad]
        some = ", ".join(names[:3]) + (", ..." if len(names) > 3 else "")
        raise NanlabError(f"adam_unfreeze_spike.layer={p['layer']!r} matches no parameter "
                          f"name of {type(inj.model).__name__}; its names are like {some}")
    stepped = {id(q) for g in groups for q in g["params"]}
    if any(id(q) not in stepped for q in frozen):
        raise NanlabError(f"adam_unfreeze_spike: the parameters of {what} are not in "
                          "the optimizer; a gradient-mask freeze keeps them there")
    inj.notes.append(f"adam_unfreeze_spike freezes {what} until step {p['at_step']}")
    now = {"step": 0}

    def mask(grad: torch.Tensor) -> torch.Tensor:
        return torch.zeros_like(grad) if now["step"] < p["at_step"] else grad
    handles = [q.register_hook(mask) for q in frozen]  # kept: a rollback freezes again
    getattr(inj, "handles", []).extend(handles)  # Injection.remove() takes them out

    def hook(step: int) -> None:
        now["step"] = step
    inj.step_hooks.append(hook)


def _set_beta2(inj, p: dict) -> None:
    for group in inj.optimizer.param_groups:
        group["betas"] = (group["betas"][0], p["beta2"])


register(Fault(
    name="adam_unfreeze_spike", family="optimizer_state",
    summary="a layer frozen by zeroed gradients for 100 steps, unfrozen, with Adam's b2 = 0.999",
    mechanism="while the gradient is exactly 0 the optimizer still steps the layer: its "
              "step count reaches 100 with m = v = 0. Bias correction divides v by "
              "1 - b2^t, which at b2 = 0.999 and t = 100 is only 0.1, so after unfreezing "
              "v_hat is about g^2 / 100 against m_hat's g / 10: the first update is about "
              "lr * sign(g) on every weight of the layer (measured: median |dw| = 0.98 lr, "
              "0.45 lr at b2 = 0.95), and the next ones stay large while v_hat catches up; "
              "the layer wakes up with full-size steps and the loss spikes",
    needs="a freeze done by a gradient mask (the parameters stay in the optimizer), here "
          "the first MLP matrix of every block until step 100, and AdamW with b2 = 0.999 "
          "(PyTorch's default) at the toy's LR 5e-3. On your own run: your largest "
          "trainable, untied nn.Linear, or the parameters layer= names (a part of their "
          "names); b2 is set on your optimizer",
    reveals="grad_norms", cure="beta2_095", signature="spike",
    params={"at_step": Param(100, 1, 100_000, help="the step at which the layer is "
                                                    "unfrozen"),
            "beta2": Param(0.999, 0.0, 0.99999, help="Adam's second-moment decay"),
            "layer": NamePart(None, help="the frozen parameters (a part of their names); "
                                         "None: the toy's mlp.c_fc of every block, on your "
                                         "model its largest nn.Linear")},
    # the built-in run's b2 is its config's (so the cure beta2_095 can change it there)
    conditions=lambda p: {"beta2": p["beta2"]},
    install=_freeze,
    foreign=_set_beta2,
))


__all__: list[str] = []  # the module registers its faults; nothing to import from it
