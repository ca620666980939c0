"""Lab 04 (04_mixed_precision): its practice questions with their keys, shown by id in the lab."""

from nanlab.course.quiz import FreeTextQuestion, MultipleChoiceQuestion, RootCauseQuestion
from nanlab.course.rubric import KeyPoint

LAB = "04_mixed_precision"

QUESTIONS = [
    MultipleChoiceQuestion(
        "04-scaler-cures",
        "Which of these does a GradScaler (dynamic loss scaling) deal with? Pick all.",
        ["small gradients underflowing to 0 in the fp16 backward pass",
         "an occasional step whose scaled gradients overflow: it skips that step",
         "a loss that is already inf in the forward pass",
         "Adam's eps rounding to 0 in a pure-fp16 optimizer",
         "a learning rate that is too high"],
        answers=[0, 1],
        explanation="Scaling lifts small gradients out of the underflow range, and the "
        "inf check skips the rare overflowing step. A forward overflow repeats at every "
        "step (the scale collapses); Adam's eps and the LR are not about gradient range.",
        hints=["What does the scaler multiply, and when does it act?"],
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
                    "the same run in bf16 trains past step 4,210 normally"],
        explanation="An inf loss is a forward-pass overflow; locate names the op; bf16 "
        "(fp32's range, no scaler) removing it confirms the range. The halving "
        "scale is the scaler's reaction, not a cause; a steady grad norm argues against "
        "a too-high LR but does not name the cause.",
        hints=["Is the loss scale a cause or a symptom?",
               "Which evidence comes from a replay that changes one thing?"],
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
