"""Lab 04 (04_mixed_precision): its practice questions with their keys, shown by id in the lab."""

from nanlab.course.quiz import FreeTextQuestion, MultipleChoiceQuestion, RootCauseQuestion
from nanlab.course.rubric import KeyPoint

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
                     ("loss scal", "scale the loss", "multiply the loss", "gradscaler",
                      "损失缩放"),
                     "say what fixes underflow and how"),
            KeyPoint("on overflow: skip the step and halve the scale",
                     ("skip", "halve", "back off", "backoff", "跳过"),
                     "say what the scaler does with an inf gradient"),
            KeyPoint("fp32 master weights and optimizer state",
                     ("master weight", "fp32 weight", "fp32 copy", "optimizer state",
                      "主权重"),
                     "say where the weights and Adam's state live"),
            KeyPoint("persistent overflow or a collapsing scale: find the layer, bf16",
                     ("bf16", "bfloat16", "collapse", "keeps halving", "locate",
                      "which layer"),
                     "say what you do when it is not a rare event"),
            KeyPoint("unscale before clipping",
                     ("unscale", "before clipping", "before clip"),
                     "say where gradient clipping goes"),
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
    ),
]
