"""Lab 11 (11_lr_sensitivity): its practice questions with their keys, shown by id in the lab."""

from nanlab.course.quiz import FreeTextQuestion, MultipleChoiceQuestion
from nanlab.course.rubric import KeyPoint

LAB = "11_lr_sensitivity"

QUESTIONS = [
    MultipleChoiceQuestion(
        "11-sensitivity-definition",
        "Three runs of an LR sweep end at losses 2.0, 1.0 and NaN; the loss at init is 3.5. "
        "What is the LR sensitivity?",
        ["(2.0 + 1.0 + 3.5) / 3 - 1.0 ≈ 1.17",
         "(2.0 + 1.0) / 2 - 1.0 = 0.5: a NaN run is left out",
         "infinity: one run diverged",
         "2.0 - 1.0 = 1.0: the worst finite run minus the best"],
        answers=0,
        explanation="A diverged run counts as the loss at initialisation (min(loss, l0)); the "
        "mean over the whole grid minus the best loss.",
        hints=["What does min(NaN-treated-as-l0, l0) give?"],
        why=["Section 1: a diverged run counts as the loss at init, min(loss, l0); the mean "
             "over the whole grid, minus the best finite loss.",
             "Section 1: a diverged run is not left out, or a recipe that fails more often "
             "would look better; it counts as the loss at init.",
             "Section 1: a diverged run counts as the loss at init, not as infinity, so one "
             "failure cannot swamp the number.",
             "The metric is a mean over the whole grid minus the best, not the spread of "
             "the finite runs (section 1)."],
    ),
    MultipleChoiceQuestion(
        "11-logit-growth-signs",
        "A run at a high LR: which signs point at attention-logit growth, the instability "
        "QK-LayerNorm cures? Tick all that apply.",
        ["the max attention logit climbs by orders of magnitude",
         "the attention entropy falls towards 0",
         "the output log Z drifts very negative late in a long run",
         "the update-to-weight ratio of the first step is large without warmup"],
        answers=[0, 1],
        explanation="Logits growing and the softmax collapsing to one key are its signature. "
        "A negative-drifting log Z is the output-logit divergence (z-loss); a large first "
        "step is what warmup prevents.",
        hints=["Which of these is measured inside attention?"],
        why=["Section 4: at LR 3e-1 the baseline's max logit grew by orders of magnitude "
             "while QK-LayerNorm's stayed small.",
             "Section 4: growing logits make the softmax nearly one-hot, and the entropy "
             "collapses.",
             "Section 5: that is the output-logit divergence z-loss holds back, measured on "
             "the output softmax, not inside attention.",
             "Section 6: a large first step is what warmup prevents; it is a layer's update "
             "size, not an attention measure."],
    ),
    FreeTextQuestion(
        "11-proxy-answer",
        "Interview: 'Your 7B run diverged at an LR that worked at 1B. How would you study it "
        "without another 7B run?' Answer in three or four sentences.",
        key_points=[
            KeyPoint("sweep the LR on small models",
                     ("lr sweep", "sweep the lr", "learning rate sweep", "sweep over learning",
                      "small model", "smaller model", "high learning rate", "high lr", "学习率"),
                     "say what you would train: small models at many LRs"),
            KeyPoint("summarise by LR sensitivity or the loss-vs-LR curve",
                     ("sensitivity", "loss against lr", "loss vs lr", "loss versus lr",
                      "curve"),
                     "say how you compare recipes"),
            KeyPoint("watch the max attention logit / log Z",
                     ("attention logit", "max logit", "log z", "entropy", "logsumexp"),
                     "name a model characteristic to watch"),
            KeyPoint("test the cures: QK-norm, z-loss, warmup",
                     ("qk-norm", "qk norm", "qk-layernorm", "qk layernorm", "z-loss", "z loss",
                      "warmup", "warm-up"),
                     "name a cure you would test"),
        ],
        model_answer="I would reproduce the failure on small models by sweeping the learning "
        "rate over three orders of magnitude: instabilities that hit large models at normal "
        "LRs appear in small ones at high LRs (Wortsman et al. 2023). I would compare recipes "
        "by the loss-against-LR curve and its LR sensitivity, and watch the max attention "
        "logit, the attention entropy and the output log Z in each run. Then I would test the "
        "cures there: QK-LayerNorm for logit growth, z-loss for output-logit divergence, a "
        "longer warmup, and check the trend over two or three sizes before the big run.",
        hints=["What makes a small model fail the way a large one does?",
               "Which numbers would you watch inside each run?"],
    ),
]
