"""Lab 14 (14_large_run_faults): its practice questions with their keys, shown by id in the lab."""

from nanlab.course.quiz import MultipleChoiceQuestion

LAB = "14_large_run_faults"

QUESTIONS = [
    MultipleChoiceQuestion(
        "14-mean-of-means-weight",
        "A loop accumulates 4 micro-batches, takes each one's mean cross-entropy and divides "
        "by 4. The micro-batches hold 2, 100, 100 and 98 unmasked targets (N = 300). How "
        "much does one target of the first micro-batch weigh, against what it should?",
        ["1/8 against 1/300: about 37x too much",
         "1/300 against 1/300: the division by 4 fixes it",
         "1/400 against 1/300: a little too little",
         "0: a micro-batch that short is skipped"],
        answers=0,
        explanation="Its mean divides by n_0 = 2 and the loop by k = 4: weight 1/(k n_0) = "
        "1/8. A token-weighted loss gives every target 1/N = 1/300. The short micro-batch's "
        "two tokens pull the update as hard as a whole micro-batch.",
        hints=["Write the weight of one target as 1 / (k * n_i).",
               "Compare it with 1 / N, N the step's total count."],
    ),
    MultipleChoiceQuestion(
        "14-transient-or-data",
        "A step's loss is NaN. You replay it from the checkpoint before, with the same "
        "batches and RNG: every step reproduces bit for bit and the NaN step comes back "
        "finite. What is the likeliest cause, and the cure?",
        ["the device: silent data corruption; rerun the step (and watch that GPU)",
         "dirty data in that batch; validate the data and skip it",
         "a too-high LR; divide it by 10",
         "an fp16 overflow; turn AMP off"],
        answers=0,
        explanation="Data, the LR or precision would fail again on an exact replay. A "
        "failure that does not reproduce from the same state and inputs is transient: a "
        "bit flipped on the device (Megatron-LM's RerunStateMachine calls it "
        "TRANSIENT_ERROR). Rerunning the step keeps the run; a device that does it often "
        "is taken out.",
        hints=["Which of the causes depend only on the state and the inputs?",
               "What would a replay of dirty data show?"],
    ),
]
