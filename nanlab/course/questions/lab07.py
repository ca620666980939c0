"""Lab 07 (07_sop_mystery): its practice questions with their keys, shown by id in the lab."""

from nanlab.course.quiz import FreeTextQuestion, MultipleChoiceQuestion, OrderingQuestion
from nanlab.course.rubric import KeyPoint

LAB = "07_sop_mystery"

QUESTIONS = [
    OrderingQuestion(
        "07-sop-actions",
        "A run's loss went NaN overnight. Put the actions of the investigation in order.",
        ["find the first non-finite step in the record",
         "check the batch of that step",
         "replay with AMP off (and with bf16)",
         "replay with the LR divided by 10",
         "read the grad-norm history before the failure",
         "check the init scale and the norm eps",
         "prove the fix: same seed, loss at the same step as the clean run"],
        explanation="Find the step first: everything after it is consequence. Then the "
        "SOP, where each step removes a class of causes, in the order of how common the "
        "class is and how cheap it is to rule out: the batch (one look, and dirty data is "
        "common); AMP off and LR / 10 (one-line controlled replays that clear or convict "
        "precision and the LR); the grad-norm history (free to read, but a climb is also "
        "what a too-high LR or a growing overflow produce, so it names a cause of its own "
        "only once those are cleared); then the model's own init and eps, the rarest class. "
        "The proof comes last, as a replay anyone can rerun. locate goes with the first "
        "two: it replays that step and shows the data pass.",
        hints=["The first action needs no new run: only the record.",
               "Each replay clears a whole class of causes; a climbing grad norm means the "
               "most once the LR and precision are cleared."],
    ),
    MultipleChoiceQuestion(
        "07-step-zero",
        "A run's very first loss (step 0) is already NaN. Which SOP step can you skip, "
        "because it cannot be the cause?",
        ["LR / 10: no optimizer update has happened before the first loss",
         "checking the batch of step 0",
         "turning AMP off",
         "checking the init scale and the norm eps"],
        answers=0,
        explanation="The loss of step 0 is computed from the initial weights and the first "
        "batch, before any update: the learning rate has touched nothing yet. The data, the "
        "precision and the init all act in that first forward pass.",
        hints=["Is the loss of a step computed before or after that step's update?"],
        why=["Lab 03, section 1a: the loss of a step is computed before its update, so "
             "step 0's loss has seen no update at all.",
             "The first batch goes through the first forward pass: a dirty one makes step 0 "
             "non-finite (Lab 02), and the SOP checks it first.",
             "Precision acts in the first forward pass: position_overflow in pure fp16 is "
             "NaN at step 0 (Lab 06, section 6).",
             "The init and the eps act in the first forward pass: bad_init (Lab 05, section "
             "2) and tiny_eps (Lab 06, section 2) are both NaN at step 0."],
    ),
    MultipleChoiceQuestion(
        "07-finite-not-cured",
        "In section 1e the LR / 10 replay of the fp16_overflow run had no NaN in 120 "
        "steps. Why is LR / 10 still not the answer?",
        ["its loss stayed far above the clean run's: it removed the NaN by learning more "
         "slowly, which only postpones the overflow",
         "lowering the LR never helps a run in fp16",
         "replays with a different LR are not deterministic",
         "the SOP forbids running step 3 when step 2 was healthy"],
        answers=0,
        explanation="A replay counts when the run is finite and learning. Slower learning "
        "keeps the logits small for longer, so exp(logit) overflows later, not never.",
        hints=["Compare the final losses of the replays, not only their NaN counts."],
        why=["Section 1e: finite but not learning; learning slowly keeps the logits small, "
             "so the overflow has only not happened yet.",
             "Lab 03's high_lr was cured by LR / 10 in fp16: a lower LR helps when the LR is "
             "the cause.",
             "Every replay is deterministic (same seed, same data, one change); LR / 10 "
             "repeats exactly like the others.",
             "The SOP stops at the first step that explains the failure to save time, not "
             "as a rule against evidence: section 1e ran this replay and judged it by its "
             "whole curve."],
    ),
    FreeTextQuestion(
        "07-incident-report",
        "Write the incident report for the fp16_overflow run of section 1, in four or five "
        "sentences: the root cause, the evidence, what you ruled out, the fix and how you "
        "proved it.",
        key_points=[
            KeyPoint("the cause: a hand-written exp / softmax overflowing fp16",
                     ("hand-written", "naive", "exp", "65504", "overflow", "溢出"),
                     "name what overflowed, and where"),
            KeyPoint("the evidence: the exact replay of the first bad step",
                     ("locate", "replay", "inf before nan", "inf first", "复现", "重放"),
                     "say how you found where the first inf was made"),
            KeyPoint("ruled out: the data, and the LR",
                     ("batch is clean", "clean batch", "data", "lr / 10", "lr/10",
                      "learning rate", "数据", "学习率"),
                     "say which SOP steps you ruled out"),
            KeyPoint("the fix: bf16 or a stable loss",
                     ("bf16", "f.cross_entropy", "cross_entropy", "subtract the max",
                      "stable"),
                     "name the fix"),
            KeyPoint("the proof: same seed, same step as the clean run",
                     ("same seed", "same step", "clean run", "相同种子", "同一步"),
                     "say how you proved it"),
        ],
        model_answer="The loss went to inf around step 85-90 and never recovered because a "
        "hand-written cross-entropy summed exp(logit) in fp16, and once the model was "
        "confident that sum passed 65504. I replayed the first bad step from the checkpoint "
        "before it with locate, which reproduced it bit for bit and showed the first inf in "
        "the loss, with the NaN only later in the backward pass. The batch was clean, and the"
        " LR / 10 replay only postponed the overflow because it learned far more slowly. The "
        "fp32 and bf16 replays both trained normally, so the fix is bf16 or the stable "
        "F.cross_entropy. I proved it with the same seed: the loss at the same step matches "
        "the clean run.",
        hints=["Cause, evidence, ruled out, fix, proof: one sentence each.",
               "Which tool told you where the first inf was made?"],
    ),
]
