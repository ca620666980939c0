"""Lab 03 (03_learning_rate): its practice questions with their keys, shown by id in the lab."""

from nanlab.course.quiz import FreeTextQuestion, MultipleChoiceQuestion, RootCauseQuestion
from nanlab.course.rubric import KeyPoint

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
                     ("not proof", "not a proof", "hint", "not necessarily", "doesn't prove",
                      "does not prove", "不一定", "不能证明", "线索"),
                     "say whether the experiment proves the cause"),
            KeyPoint("fp32 can hide a divergence: finite but not learning",
                     ("diverge", "still high", "loss stays high", "finite but",
                      "not learning", "doesn't learn", "发散", "不收敛"),
                     "say what the loss does in fp32 when the LR is the cause"),
            KeyPoint("control experiment: keep AMP, LR / 10",
                     ("lr / 10", "lr/10", "divide the lr", "lower the lr",
                      "lower learning rate", "reduce the learning rate", "learning rate",
                      "降低学习率", "学习率"),
                     "name the replay that separates LR from precision"),
            KeyPoint("compare with the same seed at the same step",
                     ("same seed", "same step", "clean run", "baseline", "相同种子",
                      "同一步"),
                     "say how you prove the fix"),
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
    ),
]
