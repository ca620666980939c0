"""Lab 13 (13_optimizer_state): its practice questions with their keys, shown by id in the lab."""

from nanlab.course.quiz import MultipleChoiceQuestion, RootCauseQuestion

LAB = "13_optimizer_state"

QUESTIONS = [
    MultipleChoiceQuestion(
        "13-fresh-adam-first-step",
        "A job resumes its weights but builds a new AdamW (lr 1e-3, betas 0.9 / 0.95, "
        "eps 1e-8). On its first update, one weight's gradient is 1e-5. About how far does "
        "that weight move?",
        ["about 1e-3: the full LR",
         "about 1e-8: the LR times the gradient",
         "0: Adam's moments are still 0",
         "about 3e-3: the Kingma & Ba bound at b2 = 0.95"],
        answers=0,
        explanation="At step 1 bias correction gives m_hat = g and v_hat = g^2, so the "
        "update is lr * g / (|g| + eps) = lr * sign(g) for any gradient well above eps: "
        "every weight moves by the full LR.",
        hints=["Compute m_hat and v_hat at the first step, starting from zero moments.",
               "m_hat / sqrt(v_hat) = g / |g|."],
        why=["Lab 03, section 3: at step 1 bias correction gives m_hat = g and v_hat = g², so the "
             "update is lr · sign(g); a gradient of 1e-5 is far above eps.",
             "That is SGD's update; Adam divides by sqrt(v_hat) = |g|, so the gradient's "
             "size cancels (Lab 03, section 3).",
             "The moments start at 0 but take (1 - b1)·g and (1 - b2)·g² in the first step, "
             "and bias correction scales them back up (Lab 03, section 3).",
             "That bound (Lab 03, section 3) is about 3 lr at b2 = 0.999 and 1 lr at 0.95, "
             "and it is reached after a quiet stretch, not on a first step."],
    ),
    MultipleChoiceQuestion(
        "13-which-state-was-lost",
        "After a preemption the loss is calm for 15 steps, then spikes about 20 steps after "
        "the restart. The restart event reads optimizer_steps 5000, schedule_step 0. What "
        "did the resume forget, and what is the cure?",
        ["the LR scheduler's state: warmup ran again up to the peak LR; load "
         "scheduler.state_dict() (resume_full_state)",
         "Adam's state: a fresh optimizer; warm the LR up again (rewarm_lr)",
         "nothing: it is a data spike; skip the batches",
         "the RNG state: dropout drew other masks; restore torch.get_rng_state()"],
        answers=0,
        explanation="optimizer_steps 5000 says Adam's state was loaded; schedule_step 0 "
        "says the schedule restarted. The late spike is warmup reaching the peak LR on a "
        "model that the decay had brought near its minimum. Rewarming does not help: the "
        "LR still returns to its peak.",
        hints=["Which of the two numbers in the event is wrong?",
               "A fresh Adam spikes on the first step; when does a restarted warmup bite?"],
        why=["Section 2: schedule_step 0 says the schedule restarted: warmup climbs back to "
             "the peak LR on a model the decay had brought near its minimum, and the loss "
             "spikes about 20 steps later.",
             "optimizer_steps 5000 says Adam's state was loaded; a fresh optimizer spikes "
             "one step after the restart (section 1), not 20, and rewarming cannot keep the "
             "LR from its peak (section 4).",
             "The spike's timing follows the restart, not a batch, and the restart event "
             "already shows a step count that is wrong.",
             "Other dropout masks change each step's noise a little, as another seed "
             "would; they do not send a decayed LR back to its peak."],
    ),
    RootCauseQuestion(
        "13-mystery-wake-up",
        "Mystery: a fine-tune trains a new head first; the first MLP layer of every block "
        "is frozen by zeroing its gradient for 100 steps, AdamW with PyTorch's default "
        "betas (0.9, 0.999). One step after the unfreeze the loss jumps several-fold; no "
        "restart, no NaN. What is the root cause? Tick the evidence that supports it.",
        ["dirty data", "learning rate too high",
         "Adam's step count ran on while the layer was frozen",
         "a resume that lost Adam's state", "a resume that lost the LR schedule"],
        answer="Adam's step count ran on while the layer was frozen",
        evidence=["the unfrozen layers' grad norm was exactly 0 at every recorded step "
                  "before the unfreeze",
                  "the unfrozen layers' first update measures about lr · sign(g)",
                  "the same freeze with b2 = 0.95 spikes far less",
                  "the record has no restart event",
                  "the batch of the spike is clean",
                  "the loss at step 0 was about ln(vocab_size)"],
        supporting=["the unfrozen layers' grad norm was exactly 0 at every recorded step "
                    "before the unfreeze",
                    "the unfrozen layers' first update measures about lr · sign(g)",
                    "the same freeze with b2 = 0.95 spikes far less"],
        explanation="A gradient-mask freeze keeps the layer in the optimizer: Adam's count "
        "runs to 100 while m = v = 0, and with b2 = 0.999 the bias correction "
        "1 - b2^100 ≈ 0.1 leaves v_hat ≈ g²/100 at the first real gradient: a full-size, "
        "sign-like step on layers that should move gently (section 3). b2 = 0.95 shrinks it; "
        "the missing restart event and the clean batch only rule other causes out.",
        hints=["What happens to Adam's step count while a gradient mask holds the layer "
               "at zero?",
               "Which evidence comes from a replay that changes one thing?"],
        why=["Sections 4 and 5: a gradient mask leaves the layer in the optimizer, which "
             "steps it with m = v = 0 while its count reaches 100.",
             "Section 3: with b2 = 0.999, 1 - b2^100 is only about 0.1, so v_hat is far "
             "below g² and the first real step is full-size, as the formula predicts.",
             "Section 3: one change, and the spike shrinks: beta2_095 is the cure diagnose "
             "proves (section 4).",
             "It rules out both resume faults, but points at no cause of its own.",
             "It rules out the data (diagnose's first step, section 4), but points at "
             "nothing.",
             "A healthy start: it clears the init and points at nothing."],
        family_why=["The batch of the spike is clean, and the spike comes exactly at the "
                    "unfreeze, whatever the data.",
                    "The LR runs on unchanged, only the unfrozen layers take full-size "
                    "steps, and with b2 = 0.95 the same LR stays calm.",
                    "Section 3: the count reached 100 with m = v = 0, so the bias "
                    "correction leaves v_hat far below g² at the first real gradient.",
                    "There was no restart event; a fresh optimizer moves every weight by "
                    "the LR (section 1), and here only the unfrozen layers jump.",
                    "There was no restart, and the LR column runs on; a reset schedule "
                    "spikes about 20 steps after a restart (section 2), not one step after "
                    "an unfreeze."],
    ),
]


# --- the on-call exercise (section 7): three resumed runs, which state was lost ---------

LOST = {
    "adam_state": "Adam's moments and step count",
    "lr_schedule": "the LR scheduler's step",
    "rng": "the random number generator's state",
    "nothing": "the resume lost nothing",
}
"""The answers of the exercise, by the name a learner answers with."""

PEAK = 3.0
"""A loss above this many times the median of the 10 steps before the restart: a jump."""


def resumed_runs() -> dict:
    """The three resumed runs of section 7, built out of sight (the job log says only that
    each restarted, and where): {run: FaultRun}.

    >>> runs = resumed_runs()  # tens of seconds  # doctest: +SKIP
    >>> list(runs), type(runs["resume P"]).__name__  # doctest: +SKIP
    (['resume P', 'resume Q', 'resume R'], 'FaultRun')
    """
    from nanlab.faults import run_fault

    return {"resume P": run_fault("resume_reset_schedule", at_step=140),
            "resume Q": run_fault("resume_fresh_optimizer", at_step=160),
            "resume R": run_fault("resume_fresh_optimizer", at_step=120,
                                  fixes=["resume_full_state"])}


def key_lost(evidence: dict) -> str | None:
    """The state one resumed run lost, read from its evidence, or None when it is unclear.

    >>> key_lost({"LR saved in the checkpoint": 1e-3, "LR after the restart": 1e-3,
    ...           "peak / loss before": 12.0, "steps to the peak": 1})
    'adam_state'
    """
    saved, after = evidence["LR saved in the checkpoint"], evidence["LR after the restart"]
    if abs(after / saved - 1) > 0.1:
        return "lr_schedule"  # the LR of the resumed run is not the one the schedule held
    if evidence["peak / loss before"] > PEAK and evidence["steps to the peak"] <= 3:
        return "adam_state"  # the very first updates knock the weights off: lr x sign(g)
    if evidence["peak / loss before"] < 2:
        return "nothing"
    return None


def judge_lost(got, evidence_by_run: dict) -> str | None:
    """None when each run's answer is the state its evidence says was lost, else one line
    naming the run and the evidence against the choice (never the answer).

    >>> q = {"LR saved in the checkpoint": 8e-4, "LR after the restart": 8e-4,
    ...      "peak / loss before": 11.0, "steps to the peak": 1}
    >>> judge_lost({"resume Q": "adam_state"}, {"resume Q": q}) is None
    True
    >>> print(judge_lost({"resume Q": "lr_schedule"}, {"resume Q": q}))
    resume Q: the resumed run's LR (8.00e-04) is the LR the checkpoint saved (8.00e-04): ...
    """
    if not isinstance(got, dict) or set(got) != set(evidence_by_run):
        return (f"return a dict with one answer for each of {sorted(evidence_by_run)}; got "
                f"{got!r}"[:300])
    for run, ev in evidence_by_run.items():
        pick, key = got[run], key_lost(ev)
        if pick not in LOST:
            return f"{run}: {pick!r} is not one of LOST: {', '.join(LOST)}"
        if key is None or pick == key:
            continue
        saved, after = ev["LR saved in the checkpoint"], ev["LR after the restart"]
        jump, delay = ev["peak / loss before"], ev["steps to the peak"]
        if pick == "nothing":
            return (f"{run}: after the restart the loss rose to {jump:.1f}x where it was: a "
                    "resume that lost nothing continues the run as if never stopped")
        if pick == "rng":
            return (f"{run}: a lost RNG state changes which random numbers come next, not how "
                    f"large the steps are; it cannot explain a loss {jump:.1f}x the level "
                    "before. Read the LR rows and the timing")
        if pick == "lr_schedule":
            return (f"{run}: the resumed run's LR ({after:.2e}) is the LR the checkpoint saved "
                    f"({saved:.2e}): the schedule went on where it was")
        if key == "lr_schedule":
            return (f"{run}: the resumed run's LR ({after:.2e}) is not the LR the checkpoint "
                    f"saved ({saved:.2e}); and the loss peaked {delay:.0f} steps after the "
                    "restart, not at once")
        return (f"{run}: the loss stayed within {jump:.1f}x of where it was: a fresh Adam "
                "would move every weight by the full LR at once")
    return None
