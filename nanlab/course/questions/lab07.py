"""Lab 07 (07_sop_mystery): its practice questions with their keys, shown by id in the lab."""

from nanlab.course.quiz import FreeTextQuestion, MultipleChoiceQuestion, OrderingQuestion
from nanlab.course.rubric import KeyPoint, WrongClaim

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
                     ("hand-written cross-entropy", "hand-written cross entropy",
                      "hand-written loss", "hand-written softmax", "handwritten loss",
                      "handwritten cross-entropy", "hand-rolled", "custom loss",
                      "custom cross-entropy", "without the max trick", "max trick",
                      "softmax overflowed", "overflowed in half precision",
                      "overflow in half precision", "naive cross-entropy", "naive cross entropy",
                      "naive loss", "naive softmax", "naive fp16 cross-entropy", "loss_impl",
                      "without subtracting the max", "doesn't subtract the max",
                      "does not subtract the max", "no max subtraction", "sum of exp",
                      "sum of exponentials", "sum(exp", "exp(logit", "exp overflow",
                      "exp overflowed", "exponentials passed", "exponentials overflowed",
                      "passed 65504", "past 65504", "> 65504", "above 65504", "exceeded 65504",
                      "overflowed fp16", "overflow in fp16", "fp16 overflow in the loss",
                      "overflowed to inf", "became inf", "overflows to inf", "手写的cross entropy",
                      "手写的loss", "手写loss", "手写的softmax", "手写的交叉熵", "手写交叉熵",
                      "自定义的交叉熵", "自定义的loss", "没有减max", "没减max", "没有减去最大值",
                      "没有减最大值", "没减最大值", "超过65504", "超过了65504", "溢出成inf",
                      "变成inf", "exp溢出"),
                     "name what overflowed, and where"),
            KeyPoint("the evidence: the exact replay of the first bad step",
                     ("exact replay", "deterministic replay", "replay of the bad step",
                      "replay of the failing step", "replayed the failing step",
                      "replayed the first bad step", "replay of the first bad",
                      "replay the first bad", "replaying the first bad", "replayed the step",
                      "replay the step", "replay that step", "replayed it", "with locate",
                      "locate showed", "locate found", "locate put", "ran locate",
                      "first inf in the loss", "first inf appeared", "first inf was",
                      "first inf in", "inf before nan", "inf first", "inf, then nan",
                      "then nan in backward", "bit for bit", "bit-for-bit", "reproduced it",
                      "精确回放", "回放第一个", "回放那一步", "回放出问题", "第一个inf出现在",
                      "第一个inf在", "先inf后nan", "先出现inf", "复现了"),
                     "say how you found where the first inf was made"),
            KeyPoint("the fix: bf16 or a stable loss",
                     ("f.cross_entropy", "cross_entropy", "stable loss", "stable cross-entropy",
                      "stable cross entropy", "stable softmax", "stable_softmax",
                      "subtract the max", "subtracts the max", "max-subtracted",
                      "log-sum-exp trick", "logsumexp trick", "switch to bf16", "switched to bf16",
                      "use bf16", "train in bf16", "moved to bf16", "fix is bf16", "fix: bf16",
                      "or bf16", "换成f.cross_entropy", "换f.cross_entropy", "换成bf16", "换bf16",
                      "用bf16", "稳定的loss", "稳定的交叉熵", "减去max", "减max"),
                     "name the fix"),
            KeyPoint("the proof: same seed, same step as the clean run",
                     ("same seed", "same-seed", "same step", "matches the clean run",
                      "match the clean run", "matching the clean run", "clean run at",
                      "ran past the failure", "past the failure step", "past the old step",
                      "同seed", "同 seed", "相同seed", "相同种子", "同一step", "同一个step",
                      "同一步", "和clean run一致", "跟clean run一致", "过了原来的step"),
                     "say how you proved it"),
            KeyPoint("ruled out: the data, and the LR",
                     ("batch is clean", "batch was clean", "clean batch", "data ruled out",
                      "data was clean", "data is clean", "ruled out the data",
                      "ruled out: the batch", "lr/10 only", "lr / 10 only", "only postponed",
                      "only stayed finite", "learned far more slowly", "learning much slower",
                      "ruled out", "batch是干净的", "数据是干净的", "数据没问题", "排除",
                      "只是推迟", "只是finite"),
                     "say which SOP steps you ruled out", bonus=True),
        ],
        must_not=[
            WrongClaim("the root cause is the learning rate",
                       ("root cause: learning rate", "root cause: lr", "root cause is the lr",
                        "root cause is the learning rate", "root cause was the learning rate",
                        "caused by a too-high lr", "caused by a high learning rate",
                        "we shipped lr/10", "shipped lr/10", "fix is lr/10", "fix was lr/10",
                        "根因是学习率", "根因是lr", "学习率太大导致", "lr太大导致"),
                       "LR / 10 only postponed the overflow by learning far more slowly; the "
                       "first inf is in the hand-written loss's sum",
                       "Root cause: learning rate too high; we shipped LR/10."),
            WrongClaim("the root cause is the data",
                       ("root cause: the data", "root cause is the data", "root cause: data",
                        "根因是数据", "数据里有nan", "加了数据校验"),
                       "the bad step's batch was clean, and locate's data pass finite",
                       "Root cause: the data had a NaN in it."),
            WrongClaim("the root cause is a gradient explosion, fixed by clipping",
                       ("root cause: gradient explosion", "root cause is gradient explosion",
                        "root cause was gradient explosion", "grad norms grew before",
                        "we added clipping", "fix was clipping", "fix is clipping",
                        "根因是梯度爆炸", "加了梯度裁剪", "加了clipping"),
                       "the grad norm was calm until the failure; the inf was made in the loss "
                       "in the forward pass, where clipping cannot reach",
                       "Root cause: gradient explosion, so we added clipping at 1.0."),
            WrongClaim("a curve that looks fine is the proof",
                       ("curve looked fine", "curve looks fine", "curve looked normal",
                        "曲线看起来正常", "曲线正常就"),
                       "the proof is the same seed, compared with the clean run at the same "
                       "step; a finite curve can still be a run that stopped learning",
                       "We added the fix and the curve looked fine."),
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
        good_answers=[
            "Root cause: the hand-written cross-entropy, -log(exp(l_y)/Σexp(l)) without "
            "subtracting the max, ran on fp16 logits; once the model got confident the sum of "
            "exponentials passed 65504 and became inf, so the loss was inf and backward "
            "turned it into NaN. Evidence: the manifest differed from the good config by fp16 "
            "and the naive loss; an exact replay of the first bad step from its checkpoint "
            "showed the first inf in the loss's sum, then NaN in backward, and the GradScaler "
            "kept skipping and halving from then on. Ruled out: the batch was clean, grad "
            "norms were calm before the failure, init and eps were normal; AMP off and bf16 "
            "were healthy (bf16 rounds more coarsely, so not rounding), while LR/10 only "
            "stayed finite by learning much slower. Fix: F.cross_entropy (stable, "
            "max-subtracted); proof: the same seed ran past the failure step, finite and "
            "learning, with loss matching the clean run at the same step.",
            "根因：手写的 cross entropy 没有减 max，在 fp16 的 logits 上算，模型变自信后 "
            "sum(exp(logit)) 超过 65504 变成 inf，loss 为 inf，backward 里变成 NaN。"
            "证据：manifest 比正常配置多了 fp16 和 naive loss；从 checkpoint 精确回放第一个 "
            "bad step，第一个 inf 出现在 loss 的 sum 里，之后 backward 出现 NaN，GradScaler "
            "每一步都在 skip 和减半。排除：batch 是干净的；出事前 grad norm 平稳；init/eps "
            "正常；关 AMP 和 bf16 都正常，bf16 精度更粗所以不是舍入问题；LR/10 只是 finite "
            "但几乎不学，只是推迟。修复：换成 F.cross_entropy；同 seed 重跑，过了原来的 step "
            "仍然 finite 且在学习，同一 step 的 loss 和 clean run 一致。",
            "A naive fp16 cross-entropy overflowed (sum of exp > 65504 → inf loss → NaN "
            "grads), shown by exact replay; data, LR, grad explosion and init ruled out; "
            "stable F.cross_entropy, same seed, matches the clean loss.",
        ],
        wrong_answers=[
            "Root cause: learning rate too high. With LR/10 the run stayed finite for all 120 "
            "steps, which proves it; we shipped LR/10.",
            "根因是数据里有 NaN，加了数据校验之后 NaN 就没有了，所以问题解决了。",
            "Root cause: gradient explosion. The grad norms grew before the NaN, so we added "
            "clipping at 1.0 and the curve looked fine.",
        ],
    ),
]
