"""Lab 06 (06_norms_softmax): its practice questions with their keys, shown by id in the lab."""

from nanlab.course.quiz import (
    FreeTextQuestion,
    MultipleChoiceQuestion,
    OrderingQuestion,
    RootCauseQuestion,
)
from nanlab.course.rubric import KeyPoint, WrongClaim

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
                     ("normalise q", "normalize q", "normalises q", "normalizes q",
                      "normalises the queries", "normalizes the queries", "normalising the queries",
                      "normalizing the queries", "normalise queries", "normalize queries",
                      "norm on q", "norm on the q", "layernorm on q", "layernorm on the queries",
                      "layernorm to q", "layernorm to the queries", "queries and keys",
                      "query and key", "q and k", "q·k bounded", "keeps q·k", "bounds q·k",
                      "bound q·k", "bounded inside attention", "bounds attention logits",
                      "bounds the attention", "bound the attention", "bounded attention",
                      "attention logits bounded", "attention logits stay bounded",
                      "caps the attention", "cap the attention", "limits the attention",
                      "limit the attention", "keeps attention logits", "attention logits small",
                      "attention-logit growth", "attention logit growth",
                      "attention logits from growing", "logits can't grow", "logits cannot grow",
                      "entropy collapse", "对q和k", "q和k做", "对q、k", "q、k做",
                      "限制attention logit", "限制attention", "限制注意力", "attention logit的大小",
                      "注意力熵坍塌", "熵坍塌", "防止attention logit"),
                     "say what QK-LayerNorm normalises and what that bounds"),
            KeyPoint("z-loss penalises log Z of the output softmax",
                     ("log z", "the logsumexp", "logsumexp of", "log-sum-exp", "log sum exp",
                      "softmax normaliser", "softmax normalizer", "the normaliser",
                      "the normalizer", "partition function", "output logits", "output logit",
                      "output softmax", "final logits", "output layer's", "logits from drifting",
                      "logits drifting", "logit drift", "drift far from", "输出层", "输出logits",
                      "输出的logits", "输出logit", "logits漂移", "logit漂移", "归一化因子",
                      "配分函数"),
                     "say what z-loss penalises"),
            KeyPoint("for growing attention logits QK-norm: z-loss does not act on attention",
                     ("reach for qk", "i'd reach for qk", "go for qk", "go with qk", "pick qk",
                      "choose qk", "use qk", "i'd use qk", "i would use qk", "qk-norm is the one",
                      "qk-norm is the right", "qk norm is the one", "answer is qk",
                      "qk-norm, not z-loss", "qk norm, not z-loss", "qk-norm rather than",
                      "qk norm rather than", "qk-layernorm, not", "attention logits qk",
                      "attention logit qk", "output layer, not attention", "not on attention",
                      "not attention", "doesn't touch attention", "does not touch attention",
                      "doesn't act on attention", "does not act on attention",
                      "doesn't affect attention", "does not affect attention",
                      "nothing for attention", "nothing to attention", "wrong tensor", "用qk",
                      "选qk", "上qk", "优先qk", "优先用qk", "用qk-norm", "用qk norm",
                      "管不到attention", "管不了attention", "不管attention", "不作用于attention",
                      "作用不到attention", "和attention无关", "跟attention无关", "对attention没用",
                      "对attention无效"),
                     "say which one you reach for, and why not the other",
                     denied=("touch attention", "touches attention", "act on attention",
                             "acts on attention", "affect attention", "affects attention")),
            KeyPoint("a stable (max-subtracted) softmax / locate first",
                     ("stable softmax", "subtract the max", "max-subtracted", "locate", "fused",
                      "数值稳定", "减max", "减去最大值"),
                     "mention the arithmetic fix or finding where the overflow is", bonus=True),
        ],
        must_not=[
            WrongClaim("z-loss acts on attention",
                       ("z-loss penalises large attention", "z-loss penalizes large attention",
                        "z-loss penalises attention", "z-loss penalizes attention",
                        "penalises large attention scores", "penalizes large attention scores",
                        "z-loss for attention", "z-loss bounds attention",
                        "z-loss because it penalises", "z-loss, because it",
                        "z-loss on the attention", "regularizer on the attention",
                        "regulariser on the attention", "z-loss regularises attention",
                        "z-loss regularizes attention", "都是管attention", "都管attention",
                        "z-loss管attention", "z-loss 管 attention", "优先用z-loss", "优先z-loss",
                        "reach for z-loss", "i'd reach for z-loss",
                        "attention logits i'd use z-loss", "attention logits i would use z-loss",
                        "attention logits use z-loss", "attention logit涨的话用z-loss",
                        "attention logit涨就用z-loss", "attention logit变大就用z-loss"),
                       "z-loss penalises the output softmax's log Z; it never sees the "
                       "attention scores (Lab 06, section 5)",
                       "I'd reach for z-loss: it penalises large attention scores directly."),
            WrongClaim("QK-norm acts on the output logits",
                       ("qk-norm is for the output", "qk norm is for the output",
                        "qk-norm normalises the output", "qk-norm for the output logits",
                        "qk-norm管输出", "qk-norm是管输出"),
                       "QK-LayerNorm normalises each head's queries and keys, inside attention",
                       "QK-norm is for the output logits."),
            WrongClaim("both only prevent fp16 overflow, so bf16 replaces them",
                       ("both just prevent fp16 overflow", "both prevent fp16 overflow",
                        "you need neither", "need neither", "bf16 you need neither",
                        "只是防止fp16溢出", "用bf16就都不需要"),
                       "attention-logit growth and output-logit drift happen in bf16 too: "
                       "large runs use both with bf16",
                       "Both just prevent fp16 overflow in the loss; with bf16 you need "
                       "neither."),
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
        good_answers=[
            "QK-LayerNorm normalises each head's queries and keys before the dot product, so "
            "attention logits can't grow without bound as the weights grow; it protects "
            "against attention-logit growth and the entropy collapse that follows. z-loss "
            "adds a small penalty like 1e-4·(log Z)² on the output softmax's normaliser, "
            "keeping the final logits from drifting far from zero over a long run. If the "
            "attention logits keep growing, I'd reach for QK-norm; z-loss acts on the output "
            "layer and doesn't touch attention.",
            "QK-LayerNorm 在 q·k 之前对 q 和 k 做 LayerNorm，限制 attention logit 的大小，"
            "防止 logit 越来越大、注意力熵坍塌；z-loss 是对输出层 softmax 的 log Z 加 "
            "1e-4·(log Z)² 的惩罚，防止输出 logits 漂移。attention logit 一直涨的话用 "
            "QK-norm，z-loss 管不到 attention。",
            "QK-norm bounds attention logits; z-loss keeps the output logits' log Z near "
            "zero. For growing attention logits, QK-norm.",
        ],
        wrong_answers=[
            "z-loss, because it penalises large attention scores directly; QK-norm is for the "
            "output logits.",
            "两个都是管 attention 的，z-loss 实现更简单、开销更小，所以 attention logit "
            "涨的话优先用 z-loss。",
            "Both just prevent fp16 overflow in the loss; with bf16 you need neither, so I'd "
            "switch to bf16 instead.",
        ],
    ),
]
