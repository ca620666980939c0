"""Lab 00 (00_start_here): its practice questions with their keys, shown by id in the lab."""

from nanlab.course.quiz import (
    FreeTextQuestion,
    MultipleChoiceQuestion,
    OrderingQuestion,
    RootCauseQuestion,
)
from nanlab.course.rubric import KeyPoint, WrongClaim

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
                     ("replay the failing step", "replay the bad step", "replay that step",
                      "replay the step", "replay it exactly", "exact replay", "replay exactly",
                      "rerun the failing step", "rerun the bad step", "re-run the failing step",
                      "run the failing step again", "run the bad step again", "run that step again",
                      "step again", "reproduce the nan", "reproduce the failure",
                      "reproduce the bug", "reproduce the problem", "reproduce the crash",
                      "reproduce it", "see the same nan", "get the same nan", "hit the same nan",
                      "the same nan again", "nan comes back at the same step", "same failure again",
                      "same nan", "reproduce the exact", "reproduce the failing",
                      "reproduce the step", "from the checkpoint before the",
                      "from the last checkpoint before", "on demand", "happen again",
                      "happens again", "the bad step again", "re-trigger", "retrigger the",
                      "trigger the nan again", "at will", "回到出事", "出事那一步",
                      "同一个地方出现", "每次都在同一", "跑到出问题的那一步", "出问题的那一步",
                      "精确回放", "回放出问题", "回放那一步", "回放这一步", "回放坏的",
                      "重放那一步", "重跑那一步", "重新跑那一步", "复现出", "复现问题",
                      "复现那一步", "复现这个nan", "复现nan", "复现同样", "稳定复现", "精确复现",
                      "同样的nan", "同一个nan"),
                     "say what you can do with the failing step once runs repeat"),
            KeyPoint("the fix is the only difference",
                     ("only difference", "only change", "differ only", "differs only",
                      "only differ", "only by the fix", "nothing else changed",
                      "nothing else differs", "nothing else is different",
                      "everything else is the same", "everything else identical", "except the fix",
                      "a single change", "one change at a time", "isolate the fix",
                      "isolate the effect", "only thing that changed", "only thing that differs",
                      "single variable", "only variable", "one variable", "not coincidence",
                      "not a coincidence", "rather than coincidence", "rather than a coincidence",
                      "only the fix", "the fix is the only", "comes from the fix", "due to the fix",
                      "because of the fix", "caused by the fix", "lucky seed", "got lucky",
                      "controlled comparison", "controlled experiment", "attribute the improvement",
                      "attribute the difference", "not luck", "rather than luck", "just be luck",
                      "just luck", "not chance", "rather than chance", "not random", "not noise",
                      "只差这一个", "只差一个", "只改了", "只有这一个改动", "唯一的区别",
                      "除了这个改动", "别的都不变", "其他都不变", "只有这个改动", "是fix的作用",
                      "修复的作用", "其他都一样", "其他不变", "其余都一样", "修复的功劳",
                      "修复起的作用", "归功于修复", "唯一的不同", "唯一的变量", "唯一变量",
                      "唯一的差别", "归因到", "归因于", "不是随机", "不是运气", "不是碰巧",
                      "而非随机"),
                     "say why a better curve then proves the fix and not chance"),
            KeyPoint("compare with the clean run at the same step",
                     ("same step", "compare with the clean run", "compare to the clean run",
                      "compare against the clean run", "against the baseline", "with the baseline",
                      "to the baseline", "compare with the original",
                      "compare against the original", "identical up to", "identical numbers up to",
                      "bit-identical", "bit for bit", "match the clean run",
                      "matches the clean run", "step by step against", "compare the fixed run",
                      "with the original run", "against the original", "同一步", "同一个step",
                      "逐步对比", "一步一步对比", "同一 step", "逐位一致", "和clean run对比",
                      "和基线对比", "跟基线对比", "对比基线", "和原来的run对比", "之前逐位一致",
                      "之前完全一致"),
                     "say what you compare the fixed run against"),
        ],
        must_not=[
            WrongClaim("several seeds are a better test than an exact repeat",
                       ("rerun with several different seeds", "run several seeds",
                        "try several seeds", "try a few seeds", "try different seeds",
                        "rerun with different seeds", "several different seeds",
                        "if most don't nan", "most runs don't nan", "多跑几次", "换几个seed",
                        "换几个种子", "多换几个", "总有一次不出"),
                       "a different seed changes the batches and the init as well as the "
                       "fix: a finite curve can then be luck",
                       "Rerun with several different seeds; if most don't NaN, it is fixed."),
            WrongClaim("a NaN is random, so repeats do not matter",
                       ("nan is random", "nan appears at random", "nans are random",
                        "determinism doesn't matter", "determinism does not matter",
                        "determinism doesn't really matter", "随机出现的", "复现性不重要",
                        "只对论文", "only for the final accuracy", "only matters for the paper",
                        "need the latest weights"),
                       "with the same seed and an exact resume the NaN comes back at the "
                       "same step, every time",
                       "Determinism doesn't matter much, a NaN is random anyway."),
        ],
        model_answer="With the same seed I can replay the failing step exactly from the "
        "nearest checkpoint and watch where the first NaN appears. After the fix, a rerun "
        "with the same seed differs from the clean run only by the fix, so comparing the "
        "loss at the same step proves the fix worked rather than luck.",
        hints=["What do you need in order to look at the bad step a second time?",
               "If two runs differ in seed as well as in the fix, what does a better "
               "curve prove?"],
        good_answers=[
            "To debug, I need to run the failing step again and see the same NaN, with hooks "
            "on, from a checkpoint; that only works if the resume reproduces the steps "
            "exactly. To prove a fix, the fixed run and the clean run must differ only by the "
            "fix, so same seed and identical numbers up to the bad step; otherwise a finite "
            "curve could just be luck from different batches or init.",
            "调 NaN 要能从 checkpoint 精确回放出问题的那一步，同 seed、同 resume "
            "才能每次得到同样的 NaN；证明修复时，两次 run 只差这一个改动，相同 seed "
            "下出问题之前逐位一致，结果的差别才能归因到修复上，而不是随机性。",
            "Exact repeats let you replay the bad step and see the same NaN, and make the "
            "fixed run differ from the original only by the fix.",
        ],
        wrong_answers=[
            "Determinism doesn't really matter; it's better to rerun with several different "
            "seeds and if most don't NaN the fix works.",
            "复现性不重要，NaN 本来就是随机出现的，多跑几次总有一次不出 NaN，就说明修好了。",
            "Same seed matters only for the final accuracy number in the paper; for debugging "
            "NaN you need the latest weights, not an exact resume.",
        ],
    ),
]
