"""The optimizer-state family: what a restart or a freeze does to Adam's moments and step
count, and to the LR schedule.

Read from the per-layer grad-norm history and the LR curve (SOP steps 3 and 4).
"""

from __future__ import annotations

from nanlab.faults.catalogue import Fault, Param, register

RESTART_AT = Param(100, 1, 100_000, help="the step before which the job is restarted")

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
          "gradient's size",
    reveals="grad_norms", cure="resume_full_state", signature="spike",
    params={"at_step": RESTART_AT},
    conditions=lambda p: {"restart_at": p["at_step"], "resume_skips": ("optimizer",)},
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
    conditions=lambda p: {"restart_at": p["at_step"], "resume_skips": ("scheduler",)},
))

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
          "(PyTorch's default) at the toy's LR 5e-3",
    reveals="grad_norms", cure="beta2_095", signature="spike",
    params={"at_step": Param(100, 1, 100_000, help="the step at which the layer is "
                                                    "unfrozen"),
            "beta2": Param(0.999, 0.0, 0.99999, help="Adam's second-moment decay"),
            "layer": Param("mlp.c_fc", choices=("mlp.c_fc", "mlp", "attn"),
                           help="the frozen parameters (a part of their names)")},
    conditions=lambda p: {"freeze": p["layer"], "freeze_until": p["at_step"],
                          "beta2": p["beta2"]},
))
