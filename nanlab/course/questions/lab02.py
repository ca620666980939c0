"""Lab 02 (02_dirty_data): its practice questions with their keys, shown by id in the lab."""

from nanlab.course.quiz import FreeTextQuestion, MultipleChoiceQuestion, RootCauseQuestion
from nanlab.course.rubric import KeyPoint

LAB = "02_dirty_data"

QUESTIONS = [
    MultipleChoiceQuestion(
        "02-lr-no-change",
        "The loss is NaN from step 40 on. You divide the LR by 10 and rerun with the same "
        "seed: still NaN, at exactly step 40. What does that tell you?",
        ["The cause is in what step 40 sees (its batch), not in the size of the updates",
         "The LR is still too high: divide it by 10 again",
         "It is fp16 overflow: turn AMP off next",
         "The run is not reproducible"],
        answers=0,
        explanation="A too-high LR moves the first NaN (usually later) when lowered; a "
        "first NaN pinned to one step, unchanged by the LR, points at that step's batch.",
        hints=["If the updates were too big, would smaller updates fail at the same step?"],
        why=["Section 5's matrix: LR / 10 leaves nan_input non-finite at step 40. A cause in "
             "the updates moves when they shrink; a cause in the batch stays with it.",
             "A too-high LR moves the first NaN when lowered (usually later); one that stays "
             "at exactly the same step is not about the size of the updates.",
             "Nothing here points at precision: a NaN pinned to one step, with a healthy "
             "curve before it, points at that step's input (section 2), and the SOP checks "
             "the data before AMP.",
             "The opposite: the same seed gave the NaN at exactly the same step, so the run "
             "repeats (Lab 00, section 5)."],
    ),
    MultipleChoiceQuestion(
        "02-which-nan",
        "In PyTorch (fp32, CPU), which of these make the loss NaN? Pick all.",
        ["one NaN in a float input feature",
         "a constant feature column, standardised as (x - mean) / std",
         "a batch whose targets are all -100, with F.cross_entropy",
         "a target of -1 with F.cross_entropy",
         "a few targets of -100 with F.cross_entropy"],
        answers=[0, 1, 2],
        explanation="-1 raises IndexError (loud, not NaN); a few -100 targets are "
        "ignored silently. An all-masked batch gives a NaN loss, though with zero "
        "gradients in the built-in loss.",
        hints=["One of these raises an exception instead.",
               "-100 is the default ignore_index."],
        why=["Section 1: the NaN passes the input projection and attention into the loss.",
             "Section 3a: a std of 0 makes (x - mean) / std = 0 / 0 for the whole column.",
             "Section 3b: a mean over no target is 0 / 0, a NaN loss (with zero gradients "
             "in the built-in loss).",
             "Section 3c: PyTorch raises IndexError: loud, not NaN.",
             "Section 3c: -100 is the default ignore_index, so those positions are dropped "
             "silently and the loss stays finite."],
    ),
    RootCauseQuestion(
        "02-mystery-stuck",
        "Mystery: a tabular-plus-text model trains fine for 1,729 steps; from step 1,730 "
        "the loss is NaN. fp32, AdamW with warmup. What is the root cause? Tick the "
        "evidence that supports it.",
        ["dirty data", "learning rate too high", "fp16 overflow", "bad init",
         "LayerNorm eps too small"],
        answer="dirty data",
        evidence=["the grad norm was flat around 1 up to step 1,729",
                  "locate: the first NaN is made by aten.div in the data pass",
                  "one numeric column of batch 1,730 has the same value in every row",
                  "the run uses AdamW with warmup",
                  "the loss at step 0 was about ln(vocab_size)",
                  "the raw files of batch 1,730 contain no NaN"],
        supporting=["the grad norm was flat around 1 up to step 1,729",
                    "locate: the first NaN is made by aten.div in the data pass",
                    "one numeric column of batch 1,730 has the same value in every row",
                    "the raw files of batch 1,730 contain no NaN"],
        explanation="A constant column, standardised per batch, is 0 / 0 (section 3a). "
        "The flat grad norm rules out an explosion; the division in the data pass is the "
        "standardisation; and clean raw files with a NaN made in the data pass say the "
        "pipeline made it from finite numbers, which is what a stuck column does.",
        hints=["What in the pipeline can divide by zero on finite inputs?",
               "Is 'the raw files are clean' evidence for or against this family?"],
        why=["Section 2: healthy until one step, then broken at once, with nothing growing "
             "before it, is the dirty-data signature.",
             "Section 3a: aten.div in the data pass is the standardisation's division; the "
             "pipeline made the NaN before the model saw the batch.",
             "Section 3a: a constant column has a std of 0, so standardising it is 0 / 0.",
             "So does every healthy run of the course: it separates nothing.",
             "A healthy start (Lab 00, section 3): it clears the init and points at "
             "nothing.",
             "Section 3a: clean raw data with a NaN made in the data pass means the "
             "pipeline made it; check what the model sees, not only the files."],
        family_why=["Section 3a: a stuck column standardised by its std of 0 is dirty data "
                    "the pipeline turns into NaN.",
                    "A too-high LR climbs before it fails (Lab 03); the grad norm was flat, "
                    "and the NaN was made in the data pass, before any update.",
                    "The run is fp32, and an overflow makes inf first; this NaN comes from a "
                    "division in the data pass.",
                    "A bad init fails from the first steps (Lab 05); this run trained for "
                    "1,729 steps from a healthy first loss.",
                    "A norm's eps acts inside the model (Lab 06); locate put the first NaN "
                    "in the data pass, before any layer."],
    ),
    FreeTextQuestion(
        "02-what-first",
        "Interview: 'Your training loss suddenly became NaN. What do you check first, "
        "and why?' Answer in three or four sentences.",
        key_points=[
            KeyPoint("find the first non-finite step",
                     ("first nan", "first non-finite", "first step", "first bad step",
                      "which step", "第一个nan", "第一次出现", "第一步"),
                     "say which step you look at"),
            KeyPoint("check that step's batch: non-finite inputs, labels, masks",
                     ("check the data", "check the batch", "the batch", "input", "label",
                      "isnan", "isfinite", "数据", "脏数据"),
                     "name what in the data you check"),
            KeyPoint("data first because it is cheap and common",
                     ("cheap", "cheapest", "common", "easy", "no retrain", "fast",
                      "成本低", "最常见", "简单"),
                     "say why the data comes before LR, AMP or init"),
            KeyPoint("roll back to a checkpoint before the NaN",
                     ("checkpoint", "roll back", "rollback", "restore", "回滚", "检查点"),
                     "say what you do with the weights after a NaN"),
        ],
        model_answer="First I find the first step whose loss went non-finite and rebuild "
        "that step's batch, because a NaN that appears at one step with nothing growing "
        "before it usually comes from the data. I check it for NaN or inf inputs, labels "
        "outside the class range and batches with every target masked; that takes minutes "
        "and needs no retraining, so it comes before turning AMP off or lowering the LR. "
        "The weights after a NaN are garbage, so I restore the last good checkpoint and "
        "replay the bad step from there to confirm.",
        hints=["Which step do you look at, and what do you look for in it?",
               "Why does the data come before the learning rate in the SOP?",
               "What state are the weights in after the NaN step?"],
    ),
]
