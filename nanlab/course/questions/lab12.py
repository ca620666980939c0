"""Lab 12 (12_incidents): its practice questions with their keys, shown by id in the lab."""

from nanlab.course.quiz import MultipleChoiceQuestion

LAB = "12_incidents"

QUESTIONS = [
    MultipleChoiceQuestion(
        "12-palm-replay",
        "PaLM's team fed the batches around a loss spike to an earlier checkpoint, and the "
        "loss did not spike. What does that rule out?",
        ["that the batches alone cause the spike, whatever the model state",
         "that the model state plays any part",
         "that a lower learning rate would help",
         "that the spike can be avoided by skipping data"],
        answers=0,
        explanation="Bad data alone would spike from any state. An earlier state took the "
        "same batches calmly, so the spike needed those batches and that state together "
        "(PaLM section 5.1).",
        hints=["If the data alone were to blame, what would the earlier checkpoint have done "
               "with it?"],
    ),
    MultipleChoiceQuestion(
        "12-skip-came-back",
        "A guard rolled back and skipped the batches around a spike; a few steps later the "
        "loss spiked again on different batches. What is the best next move?",
        ["go back to an earlier checkpoint and lower the LR (or clip tighter), as OPT did",
         "skip more batches around the new spike, and keep the LR",
         "switch fp16 to bf16: a spike on other batches is an overflow",
         "keep training: a spike that comes back will heal by itself"],
        answers=0,
        explanation="A spike that returns on other data says the state, not the data, is "
        "the problem: the updates are too large for it. A lower LR or a lower clipping "
        "threshold shrinks them; skipping more data changes nothing (Lab 12, sections 2-3).",
        hints=["What did changing the batches tell you about the cause?",
               "Which knobs make each update smaller?"],
    ),
]
