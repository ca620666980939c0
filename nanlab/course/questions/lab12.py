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
        why=["Section 1: data alone would spike from any state; the earlier state took the "
             "same batches calmly, so the spike needed those batches and that state "
             "together.",
             "The experiment points the other way: the state decided whether the same "
             "batches spiked (section 1).",
             "The replay changed the state, not the LR, so it says nothing about the LR; "
             "OPT's lower LR is another experiment (section 3).",
             "PaLM did avoid its spikes by restarting earlier and skipping batches "
             "(section 1): the replay is consistent with that, it does not rule it out."],
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
        why=["Sections 2 and 3: a spike that returns on other data says the state is the "
             "problem; a lower LR or a tighter clip shrinks the updates, as OPT did.",
             "Section 2: on the toy, skipping data alone let the spike come back; only the "
             "LR cut ended it.",
             "A spike on other batches says nothing about range, and section 1's spiky run "
             "is fp32, with no overflow at all.",
             "A spike that keeps coming back is not healing; leave alone only a spike the "
             "model recovers from by itself (section 2)."],
    ),
    MultipleChoiceQuestion(
        "12-leave-it-alone",
        "A scheduler glitch makes one update 10x too large; the loss spikes, then heals "
        "within a few dozen steps. Against leaving the run alone, how did a guard that "
        "rolls back on the spike (recover mode) end, over three seeds?",
        ["worse on every seed: the replay hits the same glitch, the guard goes back "
         "further and cuts the LR, and the run then learns slowly",
         "better on every seed: the rollback undoes the bad update, so the spike is gone",
         "the same: a rollback costs only the few steps it replays",
         "the run stopped: a spike that comes back twice is fatal to the guard"],
        answers=0,
        explanation="The LR is a function of the step: the replayed step hits the glitch "
        "again, the guard counts a repeat, goes one checkpoint further back and cuts the "
        "LR tenfold, and the rest of the run learns slowly. A spike the model heals from "
        "alone is best left alone: alert, find its cause, act only if the loss stays up "
        "(section 2).",
        hints=["What is the LR of the glitched step when the guard replays it?",
               "What did the guard do when the spike came back?"],
        why=["Section 2: the rollback replays the glitched step at the same LR, the spike "
             "returns, and the LR cut that follows slows the run: recover ended above "
             "leaving it alone on every seed.",
             "Section 2: the rollback does undo the bad update, but the replayed step runs "
             "at the same glitched LR and spikes again.",
             "Section 2: that was the skip guard, within 20 % of leaving it alone; the "
             "rollback paid for a repeat and an LR cut.",
             "Section 2: the guard finished every run; after the repeat it went back "
             "further and cut the LR, and it stops only after max_rollbacks (Lab 08, "
             "section 5)."],
    ),
]
