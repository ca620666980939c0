"""Lab 13 (13_optimizer_state): its practice questions with their keys, shown by id in the lab."""

from nanlab.course.quiz import MultipleChoiceQuestion

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
    ),
]
