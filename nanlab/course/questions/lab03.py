"""Lab 03 (03_learning_rate): its practice questions with their keys, shown by id in the lab."""

from nanlab.course.quiz import FreeTextQuestion, MultipleChoiceQuestion, RootCauseQuestion
from nanlab.course.rubric import KeyPoint, WrongClaim

LAB = "03_learning_rate"

QUESTIONS = [
    MultipleChoiceQuestion(
        "03-which-update",
        "The loss is normal at step 5,000 and spikes at step 5,001. Which optimizer "
        "update do you inspect first?",
        ["the update of step 5,000", "the update of step 5,001",
         "the update at the last checkpoint", "the first update after warmup"],
        answers=0,
        explanation="The loss of step t is computed before update t, so it shows the "
        "updates up to t - 1. Look at step 5,000's LR, grad norm and batch.",
        hints=["Is the loss of a step computed before or after that step's update?"],
        why=["Section 1a: the loss of step t is computed before update t, so a spike at "
             "step t shows update t - 1: its LR, its gradient and its batch.",
             "Section 1a: that step's loss was computed before its own update ran, so "
             "that update cannot have made it.",
             "A checkpoint is where you restart from, not what broke: the loss was normal "
             "after it, so the damage came later.",
             "Warmup ended long before, with normal losses since; the spike points at the "
             "update just before it (section 1a)."],
    ),
    MultipleChoiceQuestion(
        "03-clip-adamw",
        "AdamW, learning rate 10x too high, the loss diverges. Does adding "
        "clip_grad_norm_(params, 1.0) fix it?",
        ["No: Adam divides by the RMS of past gradients, so scaled-down gradients "
         "give about the same update, about lr per weight",
         "Yes: clipping bounds every update to lr * 1.0",
         "Yes, but only in fp16",
         "No: clipping only works on the loss, not the gradients"],
        answers=0,
        explanation="Clipping rescales the gradient; Adam's m / sqrt(v) is invariant to "
        "a common rescaling. With SGD the answer would be different.",
        hints=["Scale every gradient by 0.01: what happens to m / sqrt(v)?"],
        why=["Section 4: a factor shared by every step cancels in m / sqrt(v); the matrix "
             "shows high_lr_adam with grad_clip still not cured.",
             "That is SGD, whose update is the LR times the gradient (section 4); Adam's "
             "update does not grow or shrink with the gradient.",
             "high_lr_adam diverges in fp32, and clipping does not cure it there (section "
             "4's matrix): precision plays no part.",
             "clip_grad_norm_ rescales the gradients (section 4, exercise 3); what it "
             "cannot change is Adam's normalised step."],
    ),
    RootCauseQuestion(
        "03-mystery-fp16",
        "Mystery: a Transformer trained in fp16 with a GradScaler goes NaN at step 26. "
        "What is the root cause? Tick the evidence that supports it.",
        ["dirty data", "learning rate too high", "fp16 overflow", "bad init",
         "LayerNorm eps too small"],
        answer="learning rate too high",
        evidence=["the batch of step 26 is clean",
                  "with AMP off the loss stays finite but ends near 2.8 (clean: 0.02)",
                  "with LR / 10, still in fp16, the run trains normally",
                  "the first inf is an attention score",
                  "the loss scale halves at every step after 26",
                  "the loss at step 0 is about ln(vocab_size)"],
        supporting=["with AMP off the loss stays finite but ends near 2.8 (clean: 0.02)",
                    "with LR / 10, still in fp16, the run trains normally"],
        explanation="fp16 is where the divergence became visible (an attention score "
        "past 65504), not why it happened: fp32 at the same LR diverges too, and LR / 10 "
        "cures it without leaving fp16. The clean batch only rules out data; the inf "
        "score and the halving scale describe the symptom, not the cause.",
        hints=["Which change cured it, and which only removed the NaN?",
               "Does an inf attention score tell you why the score grew?"],
        why=["It rules out the data (section 2, SOP step 1) but points at nothing.",
             "Section 2: fp32 removed the NaN and kept the disease: a run that stays far "
             "above the clean loss is still diverging.",
             "Section 2: one change, fp16 kept, and the run learns: the size of the "
             "updates was the cause.",
             "Section 1c: it says where the growth became visible (a score past 65504), not "
             "why the score grew.",
             "The scaler skips and halves while every step overflows (Lab 04, section 3): "
             "it shows an overflow that repeats, whatever made the values grow.",
             "A healthy start: it clears the init and points at nothing."],
        family_why=["The batch of step 26 is clean, and a bad batch fails at its step "
                    "whatever the LR; LR / 10 cured this run.",
                    "Section 2: LR / 10 in fp16 trains; fp32 at the same LR stays finite "
                    "but diverges.",
                    "Section 2: fp16 is where the divergence became visible; fp32 at the "
                    "same LR diverges too, and LR / 10 cures it without leaving fp16.",
                    "The first loss is ln(vocab_size), and the run trained before it "
                    "failed: the init was fine.",
                    "A zero eps fails on a constant row at any LR (Lab 06); here lowering "
                    "the LR cured it."],
    ),
    FreeTextQuestion(
        "03-amp-off-not-proof",
        "Interview: 'Our fp16 run went NaN; with AMP off the NaN is gone. So it was fp16 "
        "overflow, right?' Answer in three or four sentences.",
        key_points=[
            KeyPoint("a hint, not proof",
                     ("not proof", "not a proof", "a hint", "only a hint", "just a hint",
                      "strong hint", "not necessarily", "doesn't prove", "does not prove",
                      "proves nothing", "doesn't show", "does not show", "not enough to",
                      "doesn't mean", "does not mean", "jump to conclusions", "correlation, not",
                      "not so fast", "only tells", "part of the story", "can't distinguish",
                      "cannot distinguish", "can't tell", "cannot tell", "can't separate",
                      "cannot separate", "not proven", "isn't proven", "changes three things",
                      "changes several things", "changes the range, the rounding",
                      "changes range, rounding", "range, rounding and the scaler",
                      "more than one thing", "不一定", "未必", "不能下结论", "不能这么下结论",
                      "不能断定", "不能确定", "只说明", "跟精度有关", "和精度有关", "和fp16有关",
                      "跟fp16有关", "不能证明", "证明不了", "不能说明", "不代表", "只是线索",
                      "只是一个线索", "只能说明和fp16有关", "只能说明", "同时改了"),
                     "say whether the experiment proves the cause"),
            KeyPoint("fp32 can hide a divergence: finite but not learning",
                     ("fp32 can hide", "fp32 can mask", "fp32 hides", "fp32 masks",
                      "hide a too-high lr", "hide a different problem", "hide the real",
                      "hides the real", "mask the real", "masks the real", "hide another cause",
                      "diverges quietly", "diverge quietly", "still diverge", "still diverges",
                      "still diverging", "still diverged", "diverges in fp32", "diverging in fp32",
                      "diverge in fp32", "silently diverge", "diverging run stays finite",
                      "stays finite in fp32", "actually goes down", "really goes down",
                      "is converging", "actually converges", "really converges", "finite but",
                      "stays finite but", "stayed finite but", "stay finite but", "not learning",
                      "doesn't learn", "does not learn", "isn't learning", "actually learn",
                      "really learn", "really learns", "still learns", "loss stays high",
                      "loss sat far above", "loss is still high", "loss still high",
                      "far above the clean run", "compare the fp32 loss", "check the fp32 loss",
                      "fp32 run's loss", "fp32 loss curve", "藏起来", "掩盖", "掩盖了", "没在学",
                      "不在学", "不收敛", "还在发散", "仍然发散", "照样发散", "有限但", "loss有限",
                      "loss一直不降", "loss不降", "fp32里不会nan但", "fp32下不会nan但",
                      "是不是在下降", "有没有在下降", "fp32的loss"),
                     "say what the loss does in fp32 when the LR is the cause"),
            KeyPoint("control experiment: keep AMP, LR / 10",
                     ("lr / 10", "lr/10", "lr ÷ 10", "lr by 10", "lr by ten", "divide the lr",
                      "divided the lr", "lower the lr", "lowering the lr", "lower lr",
                      "reduce the lr", "cut the lr", "lr cut", "the lr tenfold", "reducing the lr",
                      "smaller lr", "lower learning rate", "lower the learning rate",
                      "reduce the learning rate", "lr divided by", "learning rate by 10",
                      "learning rate ÷ 10", "lr ten times", "tenth of the lr", "keep amp on and",
                      "keep fp16 and", "with fp16 still on", "with fp16 kept on", "in fp16 with",
                      "lr/10 in fp16", "降低学习率", "学习率降", "降学习率", "学习率除以10",
                      "学习率÷10", "降lr", "lr降", "十分之一", "把lr降", "lr除以10", "lr 除以 10",
                      "lr/10", "保留amp", "保持fp16", "开着amp", "fp16下试"),
                     "name the replay that separates LR from precision"),
            KeyPoint("compare with the same seed at the same step",
                     ("same seed", "same step", "clean run", "baseline", "相同种子", "同一步",
                      "同seed"),
                     "say how you prove the fix", bonus=True),
            KeyPoint("locate the first inf, or a bf16 run to separate range from rounding",
                     ("first inf", "locate", "replay the", "bf16 run", "bf16 to separate",
                      "第一个inf", "回放", "bf16区分"),
                     "say how you would find what overflowed", bonus=True),
        ],
        must_not=[
            WrongClaim("AMP off removing the NaN proves fp16 overflow",
                       ("overflow by definition", "it's fp16 overflow", "it is fp16 overflow",
                        "it was fp16 overflow", "proves it was fp16", "proves fp16",
                        "so it was fp16", "yes, it's fp16", "classic sign of fp16 overflow",
                        "这就是fp16溢出", "换成bf16就解决", "肯定是fp16溢出", "肯定是fp16",
                        "就是fp16溢出", "一定是fp16", "说明是fp16溢出", "证明是fp16"),
                       "AMP off changes range, rounding and the scaler at once, and fp32 can "
                       "hide a too-high LR that still diverges",
                       "Yes: the NaN disappears without AMP, so it is fp16 overflow by "
                       "definition."),
            WrongClaim("switching to fp32 solves it",
                       ("switch to fp32 and the problem is solved", "fp32 solves it",
                        "fp32 fixes it", "just train in fp32", "直接用fp32训练", "用fp32就行",
                        "用fp32训练就行"),
                       "in Lab 03 the fp32 run stays finite and goes on diverging: the NaN "
                       "goes, the disease stays",
                       "Switch to fp32 and the problem is solved."),
            WrongClaim("the loss scale is the fix",
                       ("lower the gradscaler's initial scale", "lower the initial scale",
                        "loss scale调大", "loss scale 调大", "调大loss scale", "调小loss scale",
                        "loss scale调小", "fix is to lower the gradscaler"),
                       "no scaler setting cures an LR that is too high, nor an overflow in "
                       "the forward pass",
                       "The fix is to lower the GradScaler's initial scale."),
            WrongClaim("fp16 overflow is never in the forward pass",
                       ("never in the forward pass", "always in the gradients", "只会在梯度",
                        "不会在前向"),
                       "an overflow in the forward pass or the loss (Lab 04, Lab 07) is out "
                       "of the scaler's reach",
                       "fp16 overflow is always in the gradients, never in the forward pass."),
        ],
        model_answer="Not necessarily: the NaN going away without AMP is a hint that "
        "fp16's range is involved, not proof it is the cause. A learning rate that is "
        "too high makes the weights grow until something passes 65504 in fp16, while in "
        "fp32 the same run stays finite but diverges, so I check whether the fp32 loss is "
        "actually learning. Then I keep AMP on and divide the LR by 10: if that trains "
        "normally, the LR was the cause. I prove it by rerunning with the same seed and "
        "comparing the loss at the same step with a clean run.",
        hints=["What does the fp32 run's loss do, not just whether it is NaN?",
               "Which single change would separate the LR from the precision?"],
        good_answers=[
            "Not necessarily. It's a strong hint that fp16's range is involved, but turning "
            "AMP off changes the range, the rounding of every op and removes the GradScaler "
            "all at once, and fp32 can just hide a different problem. A too-high LR, for "
            "instance, diverges quietly in fp32 and only becomes a NaN in fp16. So I'd check "
            "whether the fp32 run actually learns like the clean run, try LR/10 with fp16 "
            "still on, maybe a bf16 run to separate range from rounding, and replay the "
            "failing step to find the first inf.",
            "不一定。关 AMP 之后 NaN 消失只能说明和 fp16 有关，不能证明是 fp16 溢出：关 AMP "
            "同时改了数值范围、每个算子的舍入精度，还去掉了 GradScaler，fp32 "
            "可能只是把真正的问题（比如 LR 太大导致的发散）藏起来了，loss 有限但根本没在学。"
            "要对比 fp32 run 的 loss 是不是和 clean run 一样在下降，再在 fp16 下试 LR/10、用 "
            "bf16 区分范围和精度，最后回放那一步找到第一个 inf。",
            "It's a hint, not proof: AMP off changes range, rounding and the scaler at once, "
            "and fp32 can hide a too-high LR. Check the fp32 run really learns and try LR/10 "
            "in fp16.",
            "No. In a case I reproduced, the fp32 run stayed finite but its loss sat far "
            "above the clean run; LR/10 with fp16 kept on trained fine, so the LR was the "
            "cause and fp16 only made it loud.",
        ],
        wrong_answers=[
            "Yes. If the NaN disappears without AMP, it's fp16 overflow by definition; switch "
            "to fp32 and the problem is solved.",
            "对，关掉 AMP 就不 NaN 了，肯定是 fp16 溢出，直接用 fp32 训练，或者把 loss scale "
            "调大一点就行。",
            "Yes, and the fix is to lower the GradScaler's initial scale; fp16 overflow is "
            "always in the gradients, never in the forward pass.",
        ],
    ),
]
