"""Lab 02 (02_dirty_data): its practice questions with their keys, shown by id in the lab."""

from nanlab.course.quiz import FreeTextQuestion, MultipleChoiceQuestion, RootCauseQuestion
from nanlab.course.rubric import KeyPoint, WrongClaim

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
             "before it, fits dirty data (a forward overflow or a flipped bit breaks so "
             "too): it says to look at that step's batch first.",
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
                     ("first nan", "first non-finite", "first bad step", "first step where",
                      "first step whose", "first step that", "first failing step",
                      "step where the loss first", "loss first became nan", "first became nan",
                      "first went nan", "first turned nan", "first inf", "which step", "exact step",
                      "the step where it broke", "first_nonfinite_step", "第一个nan", "第一次出现",
                      "第一次变成nan", "第一个坏", "最早出现nan", "首次出现", "变成nan的step",
                      "变nan的step", "出现nan的step", "变成nan的那一步", "出现nan的那一步",
                      "出nan的那一步", "nan的那一步", "哪一步开始", "从哪一步"),
                     "say which step you look at"),
            KeyPoint("check that step's batch: non-finite inputs, labels, masks",
                     ("check the data", "check the batch", "inspect the batch", "look at the batch",
                      "that step's batch", "the bad batch", "that batch", "the batch of that step",
                      "batch for nan", "nan or inf in the input", "nan/inf in the input",
                      "inf in the input", "nan in the input", "inputs for nan",
                      "labels out of range", "label out of range", "illegal label", "invalid label",
                      "labels outside", "every target masked", "all-masked", "all masked",
                      "fully masked", "zero std", "std of 0", "std is 0", "batch_problems",
                      "its batch", "dump the batch", "pull the batch", "rebuild the batch",
                      "rebuild that step's batch", "check the inputs", "check the labels",
                      "label range", "inputs and targets", "isfinite on the", "dirty data",
                      "bad data", "corrupt data", "检查数据", "检查这一步的batch", "那个batch",
                      "这个batch", "有没有nan", "有没有inf", "检查那个batch", "检查batch",
                      "检查这个batch", "看这个batch", "看那个batch", "这一步的batch",
                      "输入里有没有nan", "输入有没有nan", "label越界", "label是不是越界",
                      "标签越界", "非法标签", "全被mask", "全部被mask", "std是0", "std为0",
                      "脏数据", "坏数据", "数据有没有问题", "数据里有没有"),
                     "name what in the data you check"),
            KeyPoint("data first because it is cheap and common",
                     ("the cheapest", "cheapest check", "cheap to check", "cheap to rule out",
                      "cheapest to check", "cheapest thing", "cheap and common", "costs nothing",
                      "takes minutes", "few minutes", "no retraining", "without retraining",
                      "most common", "very common", "common cause", "a frequent cause",
                      "most frequent", "healthy until", "healthy right up", "fine until",
                      "broke at once", "broke suddenly", "sudden break", "suddenly broke",
                      "no prior growth", "nothing growing", "no growing loss", "no warning before",
                      "signature of a bad batch", "signature of dirty data", "points to data",
                      "points to the data", "最便宜", "成本最低", "成本低", "代价最小", "最常见",
                      "很常见", "最容易查", "几分钟", "不用重新训练", "突然一步就坏", "突然坏",
                      "一步就坏", "之前一切正常", "之前都正常", "没有上涨", "没有先涨"),
                     "say why the data comes before LR, AMP or init"),
            KeyPoint("roll back to a checkpoint before the NaN",
                     ("checkpoint", "roll back", "rollback", "restore", "回滚", "检查点"),
                     "say what you do with the weights after a NaN", bonus=True),
            KeyPoint("lowering the LR or clipping does not cure a bad batch",
                     ("lowering the lr wouldn't", "clipping wouldn't", "clipping won't", "lr won't",
                      "降lr都没用", "加clipping都没用", "都没用"),
                     "say what the usual reflexes do to a NaN that came with the data",
                     bonus=True),
        ],
        must_not=[
            WrongClaim("the learning rate is the first check",
                       ("almost always the lr", "almost always the learning rate",
                        "the learning rate first", "lower the lr first", "check the lr first",
                        "start with the lr", "first lower the lr", "先降lr", "先降学习率",
                        "先调学习率", "先看学习率", "先看learning rate", "先看lr", "lr太大最常见",
                        "the lr is the most common", "lr is the usual cause",
                        "divide it by 10 and restart"),
                       "the SOP starts with the data: it is cheaper and more common, and "
                       "LR / 10 does nothing to a NaN in the input",
                       "It's almost always the LR, so I lower the LR first."),
            WrongClaim("the data can be checked last or skipped",
                       ("check the data last", "data i would check last", "data last",
                        "数据一般都清洗过", "数据不会有问题", "数据一般不会", "数据最后",
                        "最后查数据", "最后再查数据", "数据没必要查"),
                       "one NaN in one batch is the commonest cause and the cheapest to "
                       "rule out: it comes first",
                       "I'd check the init, then precision, then the data last."),
            WrongClaim("clipping or the init is the first check",
                       ("add gradient clipping first", "clipping first", "先加gradient clipping",
                        "先加clipping", "先加梯度裁剪", "check the model init first",
                        "the init first", "check the init first"),
                       "clipping spreads a NaN gradient to every weight, and the init shows "
                       "from step 0; the data comes first",
                       "Add gradient clipping first and see whether it helps."),
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
        good_answers=[
            "First I find the first step where the loss went non-finite, and then I check "
            "that step's batch: NaN or inf in the inputs, labels out of range, every target "
            "masked, a feature with zero std. Data is the cheapest thing to check and one of "
            "the most common causes. If the run was healthy right up to that step with no "
            "growing loss or grad norm and then broke at once, that's the signature of a bad "
            "batch. Lowering the LR or clipping wouldn't fix that, so checking data first "
            "saves me from chasing the wrong cause.",
            "先找到第一个 loss 变成 NaN 的 step，然后检查这一步的 batch：输入里有没有 "
            "NaN/inf、label 是不是越界、是不是全被 mask 成 -100、标准化时 std 是不是 0。"
            "数据最便宜、也最常见；如果之前一切正常、grad norm 没有上涨，突然一步就坏了，"
            "基本就是脏数据，降 LR、加 clipping 都没用。",
            "The first bad step's batch: NaN/inf inputs, illegal labels, all-masked targets, "
            "zero std. It's cheapest to check, very common, and a sudden break with no prior "
            "growth points to data.",
        ],
        wrong_answers=[
            "The learning rate, because it's almost always the LR. I'd divide it by 10 and "
            "restart; the data I would check last, since it was fine for the earlier steps.",
            "先加 gradient clipping 看看，不行再降 LR，数据一般都清洗过了，不会有问题，"
            "没必要查。",
            "Check the model init first, since a wrong init is the root of most NaN; then "
            "precision; then the data.",
        ],
    ),
]
