"""Lab 00 (00_start_here): its practice questions with their keys, shown by id in the lab."""

from nanlab.course.quiz import (
    FreeTextQuestion,
    MultipleChoiceQuestion,
    OrderingQuestion,
    RootCauseQuestion,
)
from nanlab.course.rubric import KeyPoint

LAB = "00_start_here"

QUESTIONS = [
    MultipleChoiceQuestion(
        "00-first-loss",
        "A fresh model on a task with 32 possible next tokens starts at loss 3.47. "
        "What does that number tell you?",
        ["The model guesses uniformly over the 32 tokens: -ln(1/32) = 3.47",
         "The learning rate is too high",
         "The batch contains a masked target",
         "Nothing: the first loss is random"],
        answers=0,
        explanation="A healthy init gives near-uniform predictions, so the first loss is "
        "about ln(vocab_size). Much higher means over-confident wrong logits: a bad init.",
        hints=["What loss does a model get that gives each of 32 tokens probability 1/32?"],
    ),
    OrderingQuestion(
        "00-sop-order",
        "Order the SOP steps for a NaN loss, first to last.",
        ["check the data of the bad step", "turn mixed precision (AMP) off",
         "divide the learning rate by 10", "read the per-layer gradient norms",
         "check the init scale and the norm eps"],
        explanation="Data first: one look at one batch, and dirty data is common. Then "
        "two one-line config changes (AMP off, LR / 10). Then reading the grad-norm "
        "history, and last the model's own numerics (init, eps).",
        hints=["The first step needs no new run at all: just the batch of the bad step.",
               "Config switches you can flip in one line come before reading histories."],
    ),
    RootCauseQuestion(
        "00-mystery-preview",
        "A run trains normally, then its loss is NaN from step 40 on. What caused it?",
        ["dirty data", "learning rate too high", "fp16 overflow", "bad init"],
        answer="dirty data",
        evidence=["the loss was smooth and falling up to step 39",
                  "the batch of step 40 holds a NaN feature",
                  "the grad norm grew 100x over steps 30-39",
                  "the run uses fp32, no AMP",
                  "the loss at step 0 was 3.47"],
        supporting=["the loss was smooth and falling up to step 39",
                    "the batch of step 40 holds a NaN feature"],
        explanation="A healthy curve that breaks at one step points at that step's "
        "batch, and the batch has a NaN in it. fp32 rules out fp16 overflow but does not "
        "point at the data; the first loss of 3.47 only says the init was fine.",
        hints=["Which evidence would be different if the data were clean?",
               "A rising grad norm before the NaN would suggest a different family."],
    ),
    FreeTextQuestion(
        "00-why-determinism",
        "In two or three sentences: why does a run that repeats exactly (same seed, "
        "exact resume) matter when you debug a NaN and prove the fix?",
        key_points=[
            KeyPoint("replay the bad step exactly",
                     ("replay", "rerun", "re-run", "reproduce", "run again", "repeat",
                      "复现", "重放", "重跑"),
                     "say what you can do with the failing step once runs repeat"),
            KeyPoint("compare with the clean run at the same step",
                     ("same step", "compare", "clean run", "baseline", "对比", "基线"),
                     "say what you compare the fixed run against"),
            KeyPoint("the fix is the only difference",
                     ("only difference", "only change", "differ only", "only by the fix",
                      "nothing else", "except the fix", "not luck", "唯一", "只有"),
                     "say why a better curve then proves the fix and not chance"),
        ],
        model_answer="With the same seed I can replay the failing step exactly from the "
        "nearest checkpoint and watch where the first NaN appears. After the fix, a rerun "
        "with the same seed differs from the clean run only by the fix, so comparing the "
        "loss at the same step proves the fix worked rather than luck.",
        hints=["What do you need in order to look at the bad step a second time?",
               "If two runs differ in seed as well as in the fix, what does a better "
               "curve prove?"],
    ),
]
