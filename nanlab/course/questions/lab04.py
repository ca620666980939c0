"""Lab 04 (04_mixed_precision): its practice questions with their keys, shown by id in the lab."""

from nanlab.course.quiz import FreeTextQuestion, MultipleChoiceQuestion, RootCauseQuestion
from nanlab.course.rubric import KeyPoint, WrongClaim

LAB = "04_mixed_precision"

QUESTIONS = [
    MultipleChoiceQuestion(
        "04-scaler-cures",
        "Which of these does a GradScaler's loss scaling itself deal with (multiply the "
        "loss by S before backward, divide the gradients by S, skip a step with inf or "
        "NaN)? Pick all.",
        ["small gradients underflowing to 0 in the fp16 backward pass",
         "an occasional step whose scaled gradients overflow: it skips that step",
         "a loss that is already inf in the forward pass",
         "Adam's eps rounding to 0 while the weights and Adam's state stay fp16 "
         "(model.half())",
         "a learning rate that is too high"],
        answers=[0, 1],
        explanation="Scaling lifts small gradients out of the underflow range, and the "
        "inf check skips the rare overflowing step. A forward overflow repeats at every "
        "step (the scale collapses). Section 5's grad_scaler fix cures adam_eps_fp16 by "
        "what comes with it, fp32 weights and Adam state under autocast, not by the "
        "scaling: the scale is divided out before Adam's step. The LR sets the size of an "
        "update, which scaling never changes.",
        hints=["What does the scaler multiply, and when does it act?",
               "Is the scale still in the gradients when Adam's step runs?"],
        why=["Section 3: without a scaler, plain fp16 flushed a large share of the logit "
             "gradients to exactly 0 as the model grew confident; with it almost none: "
             "scaling by S lifts them into fp16's range.",
             "Section 3: before the failure, the few skipped steps were the scaler at work: "
             "the update dropped, the scale halved, training went on.",
             "Section 3: from the first inf loss on, the scaler skips and halves at every "
             "step with the weights frozen; an overflow in the forward pass is out of its "
             "reach.",
             "Section 5: nanlab's grad_scaler fix cures that run by moving to fp16 "
             "autocast, with fp32 master weights and Adam state; the scale itself is "
             "divided out before Adam's step, so state kept in fp16 would still see "
             "eps = 0.",
             "Scaling changes the units of the gradient in backward, never the size of an "
             "update; a too-high LR diverges in fp32 too (Lab 03)."],
    ),
    MultipleChoiceQuestion(
        "04-pick-precision",
        "A hand-written softmax cross-entropy overflows under fp16 autocast once the "
        "model is confident. Which precision change cures it and keeps 16-bit speed?",
        ["bf16 autocast", "fp16 autocast with a GradScaler", "fp16 with a smaller "
         "init_scale", "pure fp16 (model.half())"],
        answers=0,
        explanation="bf16 has fp32's range: exp overflows only past 88.7. The scaler "
        "acts on gradients, not on the forward pass. The real fix is the stable loss "
        "(F.cross_entropy, or subtract the max).",
        hints=["Which format's exp overflows past 11.09, and which past 88.7?"],
        why=["Section 4: bf16 has fp32's range, so exp overflows only past 88.7, and the "
             "compute stays 16-bit; the bf16 run trained like fp32.",
             "Section 2: exactly that run, fp16 with a GradScaler, went inf: the scaler "
             "acts on gradients, and this overflow is in the forward pass.",
             "The loss scale multiplies the loss after the forward pass has computed it; a "
             "smaller one cannot stop an exp that already overflowed (section 3).",
             "Pure fp16 keeps every op in fp16, the hand-written exp included, and adds "
             "section 5's eps trap."],
    ),
    RootCauseQuestion(
        "04-mystery-scale",
        "Mystery: an fp16 + GradScaler run. From step 4,210 the logged loss is inf and the "
        "loss scale halves at every step, now at 1e-5. What is the root cause? Tick the "
        "evidence that supports it.",
        ["dirty data", "learning rate too high", "fp16 overflow in the forward pass",
         "gradient underflow", "Adam eps in fp16"],
        answer="fp16 overflow in the forward pass",
        evidence=["the loss itself is inf, not only the gradients",
                  "locate: the first inf is made by aten.sum inside the loss",
                  "the same run in bf16 trains past step 4,210 normally",
                  "the loss scale keeps halving",
                  "the grad norm was steady before step 4,210",
                  "the optimizer is AdamW"],
        supporting=["the loss itself is inf, not only the gradients",
                    "locate: the first inf is made by aten.sum inside the loss",
                    "the same run in bf16 trains past step 4,210 normally",
                    "the loss scale keeps halving"],
        explanation="An inf loss is a forward-pass overflow; locate names the op; bf16 "
        "(fp32's range, no scaler) removing it confirms the range. A scale that keeps "
        "halving is the sign the summary names: the scaler skips and halves at every step "
        "because every step overflows again in the forward pass, out of its reach "
        "(section 3), which rare gradient overflows and underflow never do. A steady grad "
        "norm argues against a too-high LR but does not name the cause.",
        hints=["What does the scaler do at a step whose loss is already inf, and at the "
               "next one?",
               "Which evidence comes from a replay that changes one thing?"],
        why=["Section 2: an inf loss with NaN gradients in the same step is the "
             "fingerprint of a forward-pass overflow.",
             "Section 2: locate names the op that made the first inf, the sum of exps of "
             "the hand-written loss passing 65504.",
             "Section 4: bf16 changes the range (fp32's) and drops the scaler; a run that "
             "then trains normally failed on fp16's range.",
             "Section 3 and the summary: when every step overflows in the forward pass the "
             "scaler skips and halves at every step; a scale that only goes down is the "
             "alarm.",
             "It argues against a divergence, which climbs first, but by itself it points "
             "at no family.",
             "Healthy runs use AdamW too: it separates nothing."],
        family_why=["locate found the first inf in the loss's sum, not in the data pass, "
                    "and bf16 trains on the same batches.",
                    "bf16 trains normally, and section 4 notes that a real divergence still "
                    "diverges in bf16; the grad norm was steady, too.",
                    "Sections 2 and 3: an inf loss, then NaN gradients, and a scale that "
                    "collapses because the overflow repeats at every step.",
                    "Underflow loses small gradients silently (section 3's plain fp16 run); "
                    "it never makes the loss inf, and the scaler's answer to it is a larger "
                    "scale, not a falling one.",
                    "Section 5: that fault writes inf into the weights in the optimizer pass "
                    "of pure fp16; here the first inf is in the loss, under autocast."],
    ),
    FreeTextQuestion(
        "04-underflow-overflow",
        "Interview follow-up: 'How do you handle FP16 gradient underflow and overflow?' "
        "Answer in four or five sentences.",
        key_points=[
            KeyPoint("loss scaling lifts small gradients out of underflow",
                     ("loss scaling", "scale the loss", "scales the loss", "scaling the loss",
                      "scale up the loss", "scales up the loss", "scale the loss up", "scaled loss",
                      "multiply the loss", "multiplies the loss", "multiplying the loss",
                      "multiplied the loss", "loss is multiplied", "loss by a large",
                      "loss by a big", "loss by a scale", "loss by s", "loss times", "scaler.scale",
                      "gradscaler multiplies", "lifts small gradients", "lift small gradients",
                      "lifts the small", "small gradients into range",
                      "small gradients representable", "keep small gradients from",
                      "small gradients stay representable", "small gradients survive", "损失缩放",
                      "梯度缩放", "放大loss", "loss放大", "把loss乘", "loss乘以", "loss乘一个",
                      "loss先乘", "放大损失", "损失放大", "乘一个大的", "乘以一个大",
                      "乘一个很大的", "小梯度放大", "把梯度放大", "梯度放大"),
                     "say what fixes underflow and how"),
            KeyPoint("on overflow: skip the step and halve the scale",
                     ("skip the step", "skips the step", "skip that step", "skips that step",
                      "skip this step", "skip the optimizer step", "skips the optimizer step",
                      "step is skipped", "steps are skipped", "skipped step", "skip the update",
                      "skips the update", "skip that update", "skips that update",
                      "update is skipped", "drop the update", "drops the update",
                      "drop that update", "thrown away", "cut in half", "is halved",
                      "discard the update", "discards the update", "throw away the update",
                      "throw away that update", "throw away the step", "don't apply the update",
                      "does not apply the update", "halve the scale", "halves the scale",
                      "halving the scale", "scale is halved", "halve s", "halves s", "halve it",
                      "halves it", "reduce the scale", "reduces the scale", "lower the scale",
                      "lowers the scale", "decrease the scale", "decreases the scale",
                      "cut the scale", "shrink the scale", "scale down", "scales down",
                      "multiplier smaller", "smaller multiplier", "reduce the multiplier",
                      "lower the multiplier", "back off", "backs off", "backoff factor",
                      "scale backoff", "backoff_factor", "scale by 0.5", "跳过这一步", "跳过这次",
                      "跳过该步", "跳过本次", "跳过更新", "跳过这个step", "跳过step",
                      "跳过optimizer", "丢弃这次更新", "丢掉这次更新", "scale减半", "缩放因子减半",
                      "scale降低", "降低scale", "scale减小", "减小scale", "降低缩放因子",
                      "缩放因子降低", "减半"),
                     "say what the scaler does with an inf gradient"),
            KeyPoint("persistent overflow or a collapsing scale: find the layer, bf16",
                     ("forward overflow", "overflow in the forward", "forward-pass overflow",
                      "forward pass overflow", "overflows in the forward", "persistent overflow",
                      "keeps overflowing", "keep overflowing", "overflows every step",
                      "every step overflows", "keeps halving", "keep halving",
                      "scale keeps dropping", "scale keeps falling", "keeps dropping",
                      "keeps falling", "scale collapses", "collapsing scale", "scale collapsing",
                      "only goes down", "find the layer", "locate the layer", "which layer",
                      "which op", "find the op", "locate the op", "first inf", "stable op",
                      "stable fused", "fused op", "stable softmax", "numerically stable",
                      "subtract the max", "parts in fp32", "softmax in fp32", "compute it in fp32",
                      "that op in fp32", "those ops in fp32", "switch to bf16", "use bf16",
                      "move to bf16", "go to bf16", "moving to bf16", "or bf16", "bf16 instead",
                      "bf16, which", "bf16 which", "bf16 has", "consider bf16", "try bf16",
                      "frequent overflow", "overflow is frequent", "overflows often", "bfloat16",
                      "换bf16", "换成bf16", "用bf16", "切bf16", "切到bf16", "上bf16", "改用bf16",
                      "前向溢出", "前向里的溢出", "前向的溢出", "持续溢出", "一直溢出", "反复溢出",
                      "稳定的算子", "数值稳定", "在fp32里算", "用fp32算", "哪一层", "哪个算子",
                      "一直减半", "一直往下掉", "一直下降", "持续下降"),
                     "say what you do when it is not a rare event"),
            KeyPoint("fp32 master weights and optimizer state",
                     ("fp32 master weight", "fp32 master copy", "fp32 master",
                      "master weights in fp32", "master weights stay in fp32",
                      "master weights are fp32", "master copy in fp32",
                      "master weights in full precision", "full-precision copy",
                      "full precision copy", "full-precision master", "fp32 copy", "fp32 weights",
                      "weights in fp32", "weights stay in fp32", "adam state in fp32",
                      "adam states in fp32", "optimizer state in fp32", "optimizer states in fp32",
                      "state in fp32", "fp32 optimizer", "fp32主权重", "fp32的主权重",
                      "主权重放fp32", "主权重用fp32", "主权重在fp32", "状态放fp32", "状态用fp32",
                      "权重放fp32", "权重用fp32", "权重保持fp32", "fp32副本", "fp32的副本"),
                     "say where the weights and Adam's state live", bonus=True),
            KeyPoint("unscale before clipping",
                     ("unscale before", "unscale_ before", "unscale first", "after unscale",
                      "after unscaling", "unscale the gradients before", "unscale_之后",
                      "unscale之后", "先unscale"),
                     "say where gradient clipping goes", bonus=True),
            KeyPoint("log the loss scale",
                     ("log the loss scale", "log the scale", "monitor the scale",
                      "monitor the loss scale", "alert if", "loss scale要监控", "监控loss scale",
                      "监控scale", "记录loss scale", "报警"),
                     "say how you would see the scale collapse", bonus=True),
        ],
        must_not=[
            WrongClaim("loss scaling is for overflow",
                       ("loss scaling for overflow", "scaling for overflow",
                        "scaling prevents overflow", "scaler prevents overflow",
                        "scaling to prevent overflow", "scale to prevent overflow",
                        "scaling avoids overflow", "scaling to stop", "scaling to keep",
                        "scaling to prevent", "scale to keep", "stop gradients from overflowing",
                        "stop the gradients from overflowing", "scaling fixes overflow",
                        "scaling cures overflow", "scaling handles overflow",
                        "overflow is handled by loss scaling", "overflow is solved by loss scaling",
                        "overflow is fixed by loss scaling", "overflow is cured by loss scaling",
                        "overflow is addressed by loss scaling",
                        "overflow is prevented by loss scaling", "overflow is handled by scaling",
                        "overflow is solved by scaling", "overflow is fixed by scaling",
                        "overflow is cured by scaling", "overflow is addressed by scaling",
                        "overflow is prevented by scaling", "overflow with loss scaling",
                        "overflow you handle with loss scaling", "overflow i use loss scaling",
                        "overflow: loss scaling", "keep them under 65504",
                        "keep the gradients under 65504", "keeps them under 65504",
                        "by a small number", "by a small factor", "scale the loss down",
                        "scales the loss down", "divide the loss", "divides the loss",
                        "用来防止上溢", "scaling防止上溢", "缩放防止上溢", "上溢用loss scaling",
                        "上溢靠loss scaling", "梯度就不会溢出", "就不会溢出了", "把loss缩小",
                        "缩小loss"),
                       "loss scaling multiplies the loss by a large S so that small gradients "
                       "rise out of underflow; an overflow is only detected and skipped",
                       "Overflow you handle with loss scaling, which keeps the gradients "
                       "under 65504."),
            WrongClaim("underflow is handled by skipping the step or lowering the scale",
                       ("skip the step for underflow", "skip the step on underflow",
                        "skips the step on underflow", "on underflow the scaler skips",
                        "on underflow, skip", "for underflow i'd skip",
                        "for underflow i would skip", "underflow is handled by skipping",
                        "underflow is solved by skipping", "underflow is fixed by skipping",
                        "underflow is cured by skipping", "underflow is addressed by skipping",
                        "underflow is prevented by skipping", "underflow is handled by halving",
                        "underflow is solved by halving", "underflow is fixed by halving",
                        "underflow is cured by halving", "underflow is addressed by halving",
                        "underflow is prevented by halving", "underflow by skipping",
                        "halve the scale on underflow", "halve the scale for underflow",
                        "lower the scale for underflow", "lower the loss scale for underflow",
                        "reduce the scale for underflow", "underflow i'd lower the",
                        "underflow i would lower the", "下溢就跳过", "下溢时跳过", "下溢就减半",
                        "下溢时减半", "下溢就调小", "下溢时调小", "下溢就降低scale"),
                       "an underflowed gradient is a silent 0, nothing to skip: it needs a "
                       "larger scale; skip-and-halve is the answer to an overflow",
                       "For underflow I'd skip the step and halve the scale."),
            WrongClaim("an overflow raises the scale",
                       ("increase the scale on overflow", "raise the scale on overflow",
                        "raise the scale for overflow", "increase the scale for overflow",
                        "increase the loss scale for overflow", "double the scale on overflow",
                        "overflow i'd raise", "overflow i would raise", "上溢就调大", "上溢时调大",
                        "上溢就加大", "上溢时加大"),
                       "an overflow halves the scale; only a run of clean steps grows it",
                       "Increase the scale on overflow so the gradients fit."),
            WrongClaim("the weights and optimizer state live in fp16",
                       ("fp16 master weight", "fp16 master copy", "master weights in fp16",
                        "master weights stay in fp16", "master weights are fp16",
                        "master weights are in fp16", "keep the weights in fp16",
                        "weights in fp16 too", "optimizer state in fp16", "adam state in fp16",
                        "model.half()", "cast the model to fp16", "whole model in fp16",
                        "everything in fp16", "主权重用fp16", "主权重放fp16", "主权重也用fp16",
                        "权重也用fp16", "全部用fp16", "全都用fp16"),
                       "keep fp32 master weights and Adam state: in fp16, Adam's eps 1e-8 is "
                       "0 and small updates round away (Lab 04, section 5)",
                       "Keep fp16 master weights so the optimizer is fast."),
            WrongClaim("gradient clipping handles underflow, or both",
                       ("clipping raises small", "clipping lifts small", "clipping fixes underflow",
                        "clipping for underflow", "underflow with gradient clipping",
                        "underflow with clipping", "underflow you handle with gradient clipping",
                        "clipping handles both", "clipping fixes both", "handles both as long",
                        "fp16 handles both", "下溢用梯度裁剪", "下溢用clip", "裁剪解决下溢"),
                       "clipping only shrinks large gradients: it cannot lift a gradient that "
                       "already rounded to 0, nor repair an inf",
                       "Underflow you handle with gradient clipping, which raises small "
                       "gradients."),
            WrongClaim("underflow does not matter",
                       ("underflow doesn't matter", "underflow does not matter",
                        "underflow is harmless", "underflow isn't a problem", "not a real concern",
                        "underflow is not a concern", "underflow isn't a concern",
                        "not a real issue", "zero gradients are harmless", "下溢不用管",
                        "下溢没关系", "下溢不是问题", "0梯度对训练没影响", "0梯度没影响",
                        "对训练没影响"),
                       "an underflowed gradient is a silent 0: those weights stop learning "
                       "(Lab 04, section 3)",
                       "Underflow doesn't matter: a zero gradient just means no update."),
        ],
        model_answer="Underflow: I use dynamic loss scaling, torch.amp.GradScaler, which "
        "multiplies the loss by a scale (2^16 to start) before backward so that small "
        "gradients stay representable, and divides them again before the step. Overflow: "
        "the scaler checks the unscaled gradients, skips the step and halves the scale, "
        "and grows it again after 2000 clean steps. Weights and Adam's state stay in fp32 "
        "as master weights, and I call scaler.unscale_ before clip_grad_norm_ so the "
        "threshold is in real units. If the scale keeps halving, the overflow is in the "
        "forward pass or the model is diverging: I log the scale, locate the layer that "
        "passes 65504, and switch to bf16 or fix that op.",
        hints=["Two problems, two mechanisms: which one is the scale for?",
               "What happens to the scale when the overflow is every step?"],
        good_answers=[
            "fp16 only covers about 6e-8 to 65504. Underflow: small gradients, especially "
            "once each position's gradient is divided by the number of tokens, round to "
            "exactly zero, so I use loss scaling, a GradScaler that multiplies the loss by a "
            "large factor (2^16 to start) before backward and unscales before the step. "
            "Overflow in the gradients: the scaler checks for inf/NaN, skips that update and "
            "halves the scale, then grows it again after ~2000 clean steps. Overflow in the "
            "forward pass (softmax, a hand-written loss, attention scores) the scaler can't "
            "fix: use the stable fused ops or compute those parts in fp32, or move to bf16, "
            "which has fp32's range. Keep master weights and Adam state in fp32, unscale "
            "before clipping, and log the loss scale and alert if it keeps dropping.",
            "下溢：fp16 最小大约 6e-8，很小的梯度会变成 0，用 loss scaling（GradScaler）把 "
            "loss 先乘一个大的 scale 再 backward，step 之前 unscale 回来。上溢：超过 65504 变 "
            "inf，GradScaler 检测到 inf 就跳过这一步、scale 减半，连续 2000 步正常再翻倍。"
            "但前向里的溢出（softmax、手写的 loss）scaler 管不了，要用稳定的算子或者在 fp32 "
            "里算，或者直接换 bf16。主权重和 Adam 状态放 fp32，clip 要在 unscale_ 之后，loss "
            "scale 要监控，一直往下掉就报警。",
            "Loss scaling for underflow; on overflow the scaler skips the step and halves the "
            "scale. Forward overflow needs stable ops in fp32 or bf16; keep fp32 master "
            "weights and log the scale.",
        ],
        wrong_answers=[
            "Underflow you handle with gradient clipping, which raises small gradients; "
            "overflow you handle with loss scaling, which multiplies the gradients by a small "
            "number to keep them under 65504.",
            "loss scaling 是用来防止上溢的，把 loss 乘一个很大的数，"
            "梯度就不会溢出了；下溢不用管，0 梯度对训练没影响。",
            "Just cast the model with model.half() and use Adam with eps=1e-8; fp16 handles "
            "both as long as you clip at 1.0.",
        ],
    ),
]
