"""Lab 05 (05_init_depth): its practice questions with their keys, shown by id in the lab."""

from nanlab.course.quiz import (
    FreeTextQuestion,
    MultipleChoiceQuestion,
    OrderingQuestion,
    RootCauseQuestion,
)
from nanlab.course.rubric import KeyPoint, WrongClaim

LAB = "05_init_depth"

QUESTIONS = [
    OrderingQuestion(
        "05-explosion-order",
        "Put the events of the deep_explosion run in the order they happened.",
        ["per-layer grad norms climb by a factor of ten every few steps",
         "the global grad norm overflows fp32 to inf (every gradient still finite)",
         "training carries on, weights finite, many of them silently frozen by an "
         "inf in Adam's v",
         "a gradient turns NaN, the update writes NaN into the weights, the next loss "
         "is NaN"],
        explanation="The climb is visible tens of steps before the first inf (section 1a "
        "prints how many); the first non-finite number is the norm's inf, with Adam's v at "
        "the same step or soon after (section 1b); the entries frozen by an inf in v train "
        "on silently; a NaN gradient, NaN weights and a NaN loss follow, in that order, "
        "steps later.",
        hints=["Which of these could a grad-norm monitor see first?"],
    ),
    MultipleChoiceQuestion(
        "05-he-no-norm",
        "He (Kaiming) init, std sqrt(2 / fan_in), in a 6-block residual Transformer "
        "with no LayerNorm. What did the first step look like?",
        ["a loss above 1e4 and a grad norm above 1e6: the forward pass had already "
         "blown up",
         "a NaN loss at step 0",
         "a normal start near ln(vocab); the problem shows only after many steps",
         "vanishing gradients: a grad norm below 0.1"],
        answers=0,
        explanation="He keeps a plain ReLU layer's variance constant; residual blocks "
        "add to the stream and nothing rescales it, so the scale compounds over the "
        "depth. Finite, but far from a sane start. The 0.02 init is the one with a tiny "
        "gradient; std 1.0 is the one that is NaN at step 0.",
        hints=["Section 4's table: the 6-block rows."],
        why=["Section 4's table, 6 blocks without LayerNorm: residual blocks add to the "
             "stream and nothing rescales it, so He's std compounds over the depth; finite, "
             "but far from ln 32.",
             "Section 2: that is bad_init, std 1.0, whose last block overflows; He's std "
             "(about 0.18 for 64 inputs) gives huge but finite values.",
             "Section 4: a sane start holds with LayerNorm (every scheme below 5 at step 0) "
             "or with the 0.02 init; without norms He's scale compounds at once.",
             "Section 4: that is the 0.02 init without LayerNorm, whose blocks barely "
             "contribute; He's larger std does the opposite."],
    ),
    RootCauseQuestion(
        "05-mystery-stall",
        "Mystery: a new model's loss sits at ln(vocab) for 2,000 steps. No NaN, no inf. "
        "What is the root cause? Tick the evidence that supports it.",
        ["dirty data", "learning rate too high", "fp16 overflow",
         "weights initialised too large", "dead activations"],
        answer="dead activations",
        evidence=["the per-layer grad norm is exactly 0 for every layer below the last ReLU",
                  "the MLPs' first-layer biases are all about -10",
                  "the loss curve has no spikes",
                  "the batches are clean",
                  "the run is in fp32"],
        supporting=["the per-layer grad norm is exactly 0 for every layer below the last ReLU",
                    "the MLPs' first-layer biases are all about -10"],
        explanation="Exact zeros are the fingerprint of a dead ReLU (its slope is 0 for "
        "negative inputs); a bias of -10 makes every input negative. A high LR or bad "
        "data would not give exact zeros; clean batches and fp32 only rule things out.",
        hints=["A small gradient and a zero gradient are different findings.",
               "What does ReLU do to the gradient of a negative input?"],
        why=["Section 5a: grey cells, exact zeros: ReLU's slope is 0 for a negative input, "
             "so no gradient passes it to the layers below.",
             "Section 5a: a bias of -10 makes every ReLU input negative and every output 0.",
             "A stall has no spikes, and neither do many healthy runs: it separates "
             "nothing.",
             "It rules out the data but points at nothing.",
             "It rules out an fp16 overflow but points at nothing."],
        family_why=["Bad data makes a NaN or a spike at its step (Lab 02); these batches are "
                    "clean and the loss simply never moves.",
                    "A too-high LR moves the weights too far (Lab 03); here exact zero "
                    "gradients move nothing at all.",
                    "The run is fp32 and nothing is non-finite: no value came near a limit.",
                    "Too large an init blows up the forward pass (sections 2 and 4); here "
                    "the ReLU outputs are zeros, not large values.",
                    "Section 5a: ReLUs whose input is always negative output 0 and pass no "
                    "gradient: a stall at ln(vocab), no NaN."],
    ),
    FreeTextQuestion(
        "05-deep-nan-interview",
        "Interview: 'Our 6-layer model without LayerNorm trains for a hundred steps, "
        "then the loss is NaN. How do you find the cause and prove the fix?' Answer in "
        "three to five sentences.",
        key_points=[
            KeyPoint("it climbs by orders of magnitude: gradient explosion",
                     ("orders of magnitude", "order of magnitude", "powers of ten", "by decades",
                      "tenfold every", "10x every", "ten times every", "gradient explosion",
                      "exploding gradient", "gradients explode", "gradients exploding",
                      "gradient explode", "an explosion", "explosion building", "grad norms climb",
                      "grad norm climbs", "grad norms grow", "grad norm grows", "grad norms rise",
                      "grad norms increase", "grad norm climbing", "grad norms climbing",
                      "grad norm growing", "grad norms growing", "norms climb", "norm climbs",
                      "climbs steadily", "grows steadily", "grow steadily", "growing exponentially",
                      "grows exponentially", "exponential growth", "climb for tens of steps",
                      "climbs for tens of steps", "over many steps", "builds up over", "梯度爆炸",
                      "按数量级", "几个数量级", "数量级往上", "数量级增长", "一直往上涨",
                      "一直在涨", "一直涨", "持续上涨", "指数增长", "越来越大", "grad norm一直",
                      "grad norm在涨"),
                     "say what shape the grad-norm history has"),
            KeyPoint("fix the architecture / init: LayerNorm, residual, small init",
                     ("add layernorm", "adding layernorm", "add a layernorm", "add layer norm",
                      "put layernorm back", "layernorm back", "layernorms back",
                      "restore layernorm", "with layernorm", "fix is layernorm",
                      "fix with layernorm", "fix with pre", "pre-ln", "pre ln", "pre-layernorm",
                      "pre-norm", "add rmsnorm", "add normalization", "add normalisation",
                      "add a norm", "add norms", "normalization layers", "normalisation layers",
                      "加layernorm", "加上layernorm", "加回layernorm", "把layernorm加回", "加pre",
                      "加归一化", "加上归一化", "加norm", "加上norm", "层归一化", "加层归一化"),
                     "name the cure"),
            KeyPoint("prove it: same seed, loss at the same step vs a clean run",
                     ("same seed", "same-seed", "same step", "clean run", "clean loss",
                      "the baseline", "old failure step", "past the old step",
                      "past the failure step", "past the old failure", "past where it failed",
                      "相同种子", "同seed", "同样的seed", "相同seed", "同一step", "同一个step",
                      "同一步", "原来出事的step", "出事的step"),
                     "say how you prove the fix"),
            KeyPoint("read the per-layer grad-norm history",
                     ("per-layer grad norm", "per layer grad norm", "per-layer gradient norm",
                      "grad-norm history", "grad norm history", "each layer's", "every layer's",
                      "每层的grad norm", "每一层的grad norm", "每层的梯度范数", "梯度范数"),
                     "say which record you read first", bonus=True),
            KeyPoint("find the first inf (replay / locate), inf before NaN",
                     ("first inf", "first non-finite", "replay", "locate", "hook", "inf before",
                      "第一个inf", "回放"),
                     "say how you find where the first bad number was made", bonus=True),
        ],
        must_not=[
            WrongClaim("dead ReLUs or sigmoids make the NaN",
                       ("dead relus producing nan", "dead relu producing nan", "dead relus cause",
                        "dead relu causes", "caused by dead relu", "it's dead relu",
                        "switch to sigmoid", "死relu导致", "是死relu", "换sigmoid", "换成sigmoid"),
                       "dead ReLUs and sigmoid chains stall with finite numbers (Lab 05, "
                       "section 5); a NaN here comes from gradients growing by decades",
                       "It's dead ReLUs producing NaN."),
            WrongClaim("clipping after the NaN repairs the run",
                       ("clip会把inf裁掉", "把inf裁掉", "裁掉inf", "训练自然恢复", "自然恢复",
                        "clipping removes the inf", "clipping fixes the nan", "clipping repairs",
                        "clip the inf away", "just add gradient clipping",
                        "直接加gradient clipping", "直接加clipping", "加clipping就行"),
                       "an inf norm makes clip_grad_norm_'s factor 0 (or NaN): clipping this "
                       "late cannot catch it, and the cause remains",
                       "Just add gradient clipping: it removes the inf and training recovers."),
            WrongClaim("a short run that looks fine is the proof",
                       ("run 10 steps", "run a few steps", "looks fine it's fixed",
                        "looks fine, it's fixed", "the nan will disappear, which proves",
                        "不需要再去验证", "不用验证", "不需要验证"),
                       "the proof is the same seed run past the old failure step, with the "
                       "loss compared at the same step to a clean run",
                       "Run 10 steps, and if the loss looks fine it's fixed."),
            WrongClaim("He init is the cure for a deep stack without norms",
                       ("switch to he init", "use he init", "he init since", "换he初始化",
                        "用he初始化", "kaiming init fixes", "he init fixes"),
                       "He init is for plain ReLU stacks; in residual blocks without LayerNorm "
                       "its larger std compounds (Lab 05, section 4): put the norms back",
                       "Switch to He init since it's designed for deep networks."),
        ],
        model_answer="First I read the per-layer grad norms in the run's record: they "
        "climb by a factor of ten every few steps, in every layer, for tens of steps "
        "before anything is non-finite, which is gradient explosion. I replay the first "
        "non-finite step from the last checkpoint with hooks on to find the first inf: "
        "here the global grad norm overflowed fp32 while every gradient was still finite, "
        "and the loss only went NaN later. The cause is a deep stack with nothing "
        "rescaling the residual stream, so I put LayerNorm back (pre-LN blocks with "
        "residuals and a small init). I prove it with the same seed: no inf, flat grad "
        "norms, and the loss at the same step compared with a clean run.",
        hints=["What did the record show before the first inf?",
               "Which change did the proof keep the same, and which did it change?"],
        good_answers=[
            "Find the first non-finite step, check its batch (data ruled out), and then look "
            "at the per-layer grad-norm history: if every layer's norm climbs tenfold every "
            "few steps for tens of steps before the first inf, it's a gradient explosion, not "
            "a sudden event. Replaying the step from the checkpoint before it shows where the "
            "first inf appears, likely the grad norm's sum of squares or Adam's v overflowing "
            "before the loss goes NaN. The cause is the depth without normalisation: nothing "
            "rescales the residual stream, so weight growth under Adam compounds. Fix with "
            "pre-LayerNorm blocks (and a sane small init); prove it by rerunning with the "
            "same seed, LR and depth, showing it stays finite well past the old failure step "
            "and its loss is close to the clean run at the same step.",
            "先找第一个 non-finite 的 step，检查那个 batch（数据没问题），然后看每层的 grad "
            "norm 历史：如果所有层在 NaN 之前几十步里一直按数量级往上涨，就是梯度爆炸；从 "
            "checkpoint 回放那一步找到第一个 inf（通常是 grad norm 的平方和或者 Adam 的 v "
            "先溢出）。根因是 6 层没有 LayerNorm，残差流没人拉回来。修复：加 pre-LN，"
            "配合小的初始化；证明：同 seed、同 LR、同样 6 层重跑，跑过原来出事的 step 还是 "
            "finite，同一 step 的 loss 和 clean run 接近。",
            "Per-layer grad norms will show an explosion building over many steps; the fix is "
            "LayerNorm (pre-LN) plus sane init, proven by a same-seed replay that stays "
            "finite past the old step and tracks the clean loss.",
        ],
        wrong_answers=[
            "It's dead ReLUs producing NaN; switch to sigmoid activations and the NaN will "
            "disappear, which proves it.",
            "直接加 gradient clipping 就行，NaN 出现后 clip 会把 inf 裁掉，训练自然恢复，"
            "不需要再去验证。",
            "Switch to He init since it's designed for deep networks, run 10 steps, and if "
            "the loss looks fine it's fixed.",
        ],
    ),
    MultipleChoiceQuestion(
        "05-pretrained-shield",
        "A colleague fine-tunes a pretrained model with a fresh AdamW, no warmup, at 2x "
        "the usual LR: 'pretrained weights are stable, they will barely move.' What did "
        "the toy's weight displacement show after 40 steps?",
        ["the pretrained weights moved about as far as a random init's, by more than "
         "their own size",
         "the pretrained weights moved a few percent of their size; only the random "
         "init's moved far",
         "the pretrained run went NaN",
         "relative to its size, the pretrained start moved further than the random one"],
        answers=0,
        explanation="AdamW moves each weight by about the LR per step whatever the "
        "start, so both starts moved the same distance; the pretrained ratio is smaller "
        "only because those weights are larger, and still above 1. A head start, not a "
        "shield: fine-tunes use a smaller LR and warmup.",
        hints=["Section 6c: compare the distances moved first, then the ratios."],
        why=["Section 6c: on every seed both starts moved about the same distance, and the "
             "pretrained weights by more than their own size.",
             "Section 6c: AdamW moves each weight by about the LR per step whatever the "
             "start, so the distance is set by the LR and the step count, not the start.",
             "Section 6c: no run of the fine-tune made a non-finite loss; the harm is "
             "silent displacement, not a NaN.",
             "Section 6c: relative to its size the random init moved further: the "
             "pretrained weights are larger, so the same distance is a smaller ratio."],
    ),
]
