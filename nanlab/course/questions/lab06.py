"""Lab 06 (06_norms_softmax): its practice questions with their keys, shown by id in the lab."""

from nanlab.course.quiz import (
    FreeTextQuestion,
    MultipleChoiceQuestion,
    OrderingQuestion,
    RootCauseQuestion,
)
from nanlab.course.rubric import KeyPoint

LAB = "06_norms_softmax"

QUESTIONS = [
    MultipleChoiceQuestion(
        "06-eps-fp16",
        "A hand-written LayerNorm, (x - mean) / torch.sqrt(var + eps) with eps = 1e-8, runs "
        "in a pure-fp16 model. A padding row of zeros comes in. What comes out?",
        ["NaN: 1e-8 rounds to 0 in fp16, so it is 0 / sqrt(0)",
         "zeros: eps keeps the denominator positive",
         "inf: dividing by a tiny eps",
         "zeros, because fp16 flushes the whole row to 0"],
        answers=0,
        explanation="fp16's smallest positive value is about 6e-8; 1e-8 becomes exactly 0. "
        "F.layer_norm would give zeros: it computes the statistics in fp32.",
        hints=["What is torch.tensor(1e-8, dtype=torch.float16)?"],
        why=["Section 1's table: in fp16 1e-8 rounds to exactly 0 (the smallest positive "
             "fp16 is about 6e-8), so the zero row computes 0 / sqrt(0).",
             "eps keeps the denominator positive only if the dtype can hold it; section 1's "
             "table shows the manual fp16 norm fail for eps 1e-12 and 1e-8.",
             "The numerator is 0 too, and 0 over 0 is not an infinity (Lab 01, section 4).",
             "The row is zeros already; the row-zeroing trap of section 1 is a variance "
             "past 65504, a row of large values, the opposite case."],
    ),
    MultipleChoiceQuestion(
        "06-attn-overflow-fixes",
        "An fp16 model with a hand-written attention softmax goes NaN once an attention "
        "score passes 11.09. Which changes remove the NaN? Tick all that apply.",
        ["subtract the row max before exp (stable softmax)",
         "QK-LayerNorm (normalise queries and keys)",
         "z-loss with weight 1e-4",
         "a GradScaler",
         "bf16 instead of fp16"],
        answers=[0, 1, 4],
        explanation="The stable softmax removes the overflow from the arithmetic, QK-norm "
        "keeps the scores small, bf16 moves exp's limit to 88.7. z-loss acts on the output "
        "logits, not attention; the GradScaler only handles gradients, and the overflow "
        "is in the forward pass (the run above had one).",
        hints=["Which of these touches the attention scores or the exp that overflows?",
               "Did the softmax_overflow run have a GradScaler?"],
        why=["Sections 3 and 5: subtracting the row max keeps every exp at most 1; the "
             "stable_softmax run stayed finite while its scores passed 11.09 several times "
             "over.",
             "Section 5: QK-LayerNorm kept every score below 11.09, so even the naive exp "
             "never overflowed.",
             "Section 5: z-loss acts on the output layer's log Z, not on attention; the "
             "z_loss run went non-finite as without a fix.",
             "Section 4: the softmax_overflow run already had one and went NaN: the scaler "
             "handles gradients, and this overflow is in the forward pass.",
             "Section 3's table: a naive softmax in bf16 overflows only past 88.7, like "
             "fp32, so a score past 11.09 is harmless there."],
    ),
    OrderingQuestion(
        "06-inf-then-nan",
        "Put the events of a naive-softmax overflow in fp16 in the order they happen.",
        ["an attention score passes 11.09",
         "exp(score) overflows to inf",
         "exp / sum gives inf / inf = NaN",
         "att @ v spreads the NaN to the later layers",
         "the loss is NaN",
         "the GradScaler finds NaN gradients and skips the update"],
        explanation="Inf comes first, in the forward pass; one op later it is NaN; the "
        "backward pass and the scaler only see the consequence.",
        hints=["Which comes first, inf or NaN?"],
    ),
    RootCauseQuestion(
        "06-mystery-padding",
        "Mystery: a model with a LayerNorm right after the token embedding goes NaN at "
        "step 0, in fp32. What is the root cause? Tick the evidence that supports it.",
        ["dirty data", "learning rate too high", "fp16 overflow", "bad init",
         "LayerNorm eps too small"],
        answer="LayerNorm eps too small",
        evidence=["batches without padding train normally",
                  "locate: first non-finite value in embed_norm, op native_layer_norm",
                  "the number of inf values equals the number of padding tokens",
                  "LR / 10 gives NaN at step 0 as well",
                  "the attention scores contain NaN",
                  "the loss at step 0 is NaN"],
        supporting=["batches without padding train normally",
                    "locate: first non-finite value in embed_norm, op native_layer_norm",
                    "the number of inf values equals the number of padding tokens"],
        explanation="A padding row of zeros has variance 0; with eps = 0 the fused norm "
        "computes rstd = 1 / sqrt(0) = inf and (x - mean) * rstd = 0 * inf = NaN (section "
        "2). LR / 10 not helping rules the LR out but does not point anywhere; NaN "
        "attention scores and a NaN loss are downstream symptoms. The data is legal: "
        "padding is normal, the model must survive it.",
        hints=["Which evidence names a place, and which only a symptom?",
               "What is the variance of a row of zeros?"],
        why=["Only padding rows, whose variance is 0, break the norm: the fault goes with "
             "the zero rows (section 2).",
             "Section 2: locate names the norm right after the embedding, where the padding "
             "rows enter, and the fused op that divides by sqrt(var + eps).",
             "Section 2: one rstd = 1 / sqrt(0 + 0) = +inf per padding token, then "
             "0 * inf = NaN across its row.",
             "It rules out the LR (no update runs before step 0's loss anyway) but points "
             "at nothing.",
             "Downstream: the NaN rows reach attention after the norm made them (section "
             "2's events).",
             "The symptom itself: every family here can make it."],
        family_why=["Padding is legal data, masked out of the loss; the model must survive "
                    "it (section 2).",
                    "Step 0's loss comes before any update, and LR / 10 fails the same way.",
                    "The run is fp32, and the first inf is 1 / sqrt(0), not a value past a "
                    "format's limit.",
                    "A zero row has variance 0 whatever the weights: the init plays no "
                    "part.",
                    "Section 2: eps = 0 on a zero-variance row; norm_eps (1e-5) cures it "
                    "with the same seed."],
    ),
    FreeTextQuestion(
        "06-qk-norm-vs-z-loss",
        "Interview: 'What do QK-LayerNorm and z-loss each protect against? Which would you "
        "reach for if attention logits keep growing?' Answer in three or four sentences.",
        key_points=[
            KeyPoint("QK-norm normalises queries and keys, bounding the attention logits",
                     ("normalise q", "normalize q", "queries and keys", "query and key",
                      "q and k", "attention logit", "attention score", "bound"),
                     "say what QK-LayerNorm normalises and what that bounds"),
            KeyPoint("z-loss penalises log Z of the output softmax",
                     ("log z", "logsumexp", "normaliser", "normalizer", "partition",
                      "output logit", "output softmax"),
                     "say what z-loss penalises"),
            KeyPoint("z-loss does not act on attention",
                     ("not attention", "output layer", "final layer", "lm head",
                      "doesn't touch attention", "does not touch attention", "wrong tensor"),
                     "say where z-loss acts, and where it does not"),
            KeyPoint("a stable (max-subtracted) softmax / locate first",
                     ("stable softmax", "subtract the max", "max-subtracted", "locate",
                      "fused", "数值稳定"),
                     "mention the arithmetic fix or finding where the overflow is"),
        ],
        model_answer="QK-LayerNorm normalises the queries and keys of each head before "
        "their dot product, so the attention logits stay bounded even at a high learning "
        "rate. z-loss adds a small penalty on log Z, the log of the output softmax's "
        "normaliser, so the output logits cannot drift far from 0; it does not act on "
        "attention at all. For growing attention logits I would first locate the overflow "
        "and make sure the softmax subtracts the max (or use the fused kernel), then add "
        "QK-LayerNorm; z-loss is for the output layer.",
        hints=["One of them acts inside attention, the other on the last layer.",
               "What does each normalise or penalise?"],
    ),
]
