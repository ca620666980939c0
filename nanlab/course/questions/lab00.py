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
        why=["Section 3: an untrained model spreads its guess evenly over the tokens, so "
             "its first loss is ln(vocab_size); the clean run starts exactly there.",
             "The loss of step 0 is computed before any update, so the LR has acted on "
             "nothing yet; and this value is what a healthy start gives.",
             "Section 2: every batch masks its first target with -100, and masked "
             "positions are left out of the mean: they do not set its value.",
             "Section 5: the same seed gives the same first loss to the last bit, and its "
             "size is set by the init: a far higher one says the init is wrong."],
    ),
    OrderingQuestion(
        "00-sop-order",
        "Order the SOP steps for a NaN loss, first to last.",
        ["check the data of the bad step", "turn mixed precision (AMP) off",
         "divide the learning rate by 10", "read the per-layer gradient norms",
         "check the init scale and the norm eps"],
        explanation="Each step removes a class of causes, in the order of how common the "
        "class is and how cheap it is to rule out. Data first: one look at one batch, and "
        "dirty data is common. Then two one-line controlled replays (AMP off, LR / 10) that "
        "clear or convict precision and the LR. Then the grad-norm history: free to read, "
        "but a climb is also what a too-high LR or a growing overflow produce, so it names "
        "a cause of its own only once those are cleared. Last the model's own numbers "
        "(init, eps), the rarest class.",
        hints=["The first step needs no new run at all: just the batch of the bad step.",
               "Each replay clears a whole class of causes; a climbing grad norm means the "
               "most once the LR and precision are cleared."],
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
        why=["Healthy until one step, with nothing growing before it, is the signature of "
             "one bad batch (Lab 02, section 2).",
             "Section 2: the float feature is where dirty data enters; a NaN in the batch "
             "is the first bad number the step sees.",
             "A climb over ten steps is the signature of a too-high LR or an explosion "
             "(Labs 03 and 05), not of one bad batch: it would point elsewhere.",
             "fp32 rules out an fp16 overflow, but it says nothing for the data: it clears, "
             "it does not point.",
             "Section 3: ln(32), a healthy start; it clears the init and points at nothing."],
        family_why=["A healthy run broken at one step, with a NaN in that step's batch "
                    "(Lab 02).",
                    "A too-high LR shows a climb before the NaN (Lab 03); this loss was "
                    "smooth up to step 39.",
                    "The run is fp32: nothing it computes is limited to 65504.",
                    "A bad init shows from step 0 (Lab 05, section 2); the first loss here "
                    "was the healthy ln(32)."],
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
