"""Lab 11 (11_lr_sensitivity): its practice questions with their keys, shown by id in the lab."""

import math

from nanlab.course.quiz import FreeTextQuestion, MultipleChoiceQuestion
from nanlab.course.rubric import KeyPoint, WrongClaim

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
                     ("lr sweep", "sweep the lr", "sweep lrs", "sweep the learning rate",
                      "learning rate sweep", "sweep over learning", "sweep over lr", "sweep of lrs",
                      "lr grid", "grid of lrs", "grid of learning rates", "range of lrs",
                      "range of learning rates", "several lrs", "many lrs", "across lrs",
                      "across learning rates", "orders of magnitude of lr",
                      "three orders of magnitude", "small models at high lr",
                      "small models at a high lr", "small model at high lr",
                      "small transformers at a high lr", "smaller models at higher lr",
                      "high lr on small", "small-scale proxies", "small-scale proxy",
                      "small scale proxies", "small proxy", "small proxies", "proxy models",
                      "proxy experiments", "proxy runs", "小模型做代理", "小模型上扫",
                      "小模型在高lr", "小模型在高学习率", "代理实验", "代理模型", "扫lr",
                      "扫学习率", "lr扫描", "学习率扫描", "一组lr", "一组学习率", "多个lr",
                      "不同的lr", "跨三个数量级", "数量级的lr", "数量级的学习率", "很高的学习率下",
                      "高学习率下复现", "高lr下复现"),
                     "say what you would train: small models at many LRs"),
            KeyPoint("summarise by LR sensitivity or the loss-vs-LR curve",
                     ("lr sensitivity", "learning rate sensitivity", "sensitivity to the lr",
                      "sensitivity to lr", "sensitive to the lr", "how sensitive",
                      "loss against lr", "loss vs lr", "loss versus lr", "loss vs. lr",
                      "loss as a function of lr", "loss-vs-lr", "final loss against",
                      "final loss vs", "plot final loss", "plot the loss against",
                      "flatten the curve", "flattens the curve", "lr敏感度", "学习率敏感度",
                      "loss vs lr", "loss随lr", "画final loss", "曲线变平"),
                     "say how you compare recipes"),
            KeyPoint("watch the max attention logit / log Z",
                     ("attention logit", "max logit", "max attention", "attention entropy",
                      "entropy collapse", "log z", "output logit", "logit growth",
                      "update-to-weight", "update/weight", "熵坍塌", "注意力熵", "attention的熵",
                      "输出log z"),
                     "name a model characteristic to watch"),
            KeyPoint("test the cures: QK-norm, z-loss, warmup",
                     ("qk-norm", "qk norm", "qk-layernorm", "qk layernorm", "z-loss", "z loss",
                      "longer warmup", "more warmup", "add warmup", "test the cures",
                      "test the fixes", "one at a time", "一次加一个", "加warmup", "更长的warmup"),
                     "name a cure you would test"),
            KeyPoint("extrapolate the trend with model size",
                     ("trend with size", "several sizes", "two or three sizes", "few small sizes",
                      "extrapolate", "外推", "随模型变大"),
                     "say how you carry the result to 7B", bonus=True),
        ],
        must_not=[
            WrongClaim("only another 7B run can tell",
                       ("no way around it", "have to rerun the 7b", "rerun the 7b",
                        "only way is to rerun", "只能再跑一次7b", "只能再跑7b", "没有别的办法",
                        "run the 1b model again"),
                       "small models at high LRs reproduce the instabilities that large ones "
                       "show at normal LRs (Wortsman et al. 2023, Lab 11)",
                       "There's no way around it: you have to rerun the 7B with a lower LR."),
            WrongClaim("small models tell you nothing about large-model divergence",
                       ("small models are stable at any lr", "small models tell you nothing",
                        "tell you nothing about large", "small models don't transfer",
                        "don't transfer to large", "小模型的结论迁移不到", "迁移不到大模型",
                        "小模型没有参考价值"),
                       "at a high enough LR a small model fails the same way, with the same "
                       "signature (attention logits, entropy collapse)",
                       "Small models are stable at any LR and tell you nothing."),
            WrongClaim("the divergence is hardware, not the LR",
                       ("hardware problem", "must be hardware", "硬件问题"),
                       "an LR that works at 1B can diverge at 7B: the divergent LR falls with "
                       "model size",
                       "Since it worked at 1B, the 7B divergence must be a hardware problem."),
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
        good_answers=[
            "Use small models as proxies, as Wortsman et al. did: small Transformers at a "
            "high LR show the same instabilities that large ones show at lower LRs. Train a "
            "few small sizes across an LR grid (say 3e-4 to 3e-1), plot final loss against "
            "LR, and compute the LR sensitivity; watch the max attention logit, attention "
            "entropy, output log Z and update-to-weight ratio to see which failure it is. "
            "Then test the cures one at a time on the proxy (QK-norm, z-loss, warmup, weight "
            "decay, lower β2) and see which flatten the curve, and check the trend with size "
            "to extrapolate to 7B. Make the proxy runs long enough for the mechanism you're "
            "imitating.",
            "用小模型做代理实验：按 Wortsman 等人的思路，小模型在高 LR "
            "下会出现和大模型一样的不稳定（attention logit 增长、熵坍塌）。选几个小尺寸，"
            "在一组跨三个数量级的 LR 上训练，画 final loss vs LR，算 LR sensitivity；同时监控 "
            "max attention logit、attention entropy、输出 log Z、update/weight ratio，"
            "判断是哪种失败。然后一次加一个改动（QK-norm、z-loss、warmup、weight "
            "decay、β2）看哪个让曲线变平，再看随模型变大发散的 LR 怎么移动，外推到 7B。",
            "Small-scale proxies: sweep LRs on a few small models, plot loss vs LR and LR "
            "sensitivity, watch attention logits and log Z, and test QK-norm, z-loss, warmup "
            "one at a time, extrapolating the trend with size.",
        ],
        wrong_answers=[
            "There's no way around it: you have to rerun the 7B with a lower LR, because "
            "small models are stable at any LR and tell you nothing about large-model "
            "divergence.",
            "没有别的办法，只能再跑一次 7B，把 LR 降一点试试，小模型的结论迁移不到大模型。",
            "Run the 1B model again at the same LR; since it worked there, the 7B divergence "
            "must be a hardware problem, not the LR.",
        ],
    ),
]


# --- the shipping exercise (section 7): a recipe and an LR, from the sweep --------------

AS_ROBUST = 0.05
"""LR sensitivities within this of the lowest are as robust as it (one seed: noise)."""

NEAR_BEST = 0.25
"""A final loss within this many nats of the recipe's best leaves little on the table."""


def judge_ship(got, sweep) -> str | None:
    """None when ``got`` ({"recipe": ..., "lr": ...}) is a recipe as robust as the sweep's
    most robust and an LR near its best whose next LR up still trains, else one line that
    points at the sweep's evidence against it (never the answer).

    ``sweep``: the lab's :class:`nanlab.debug.sensitivity.Sweep`.

    >>> from nanlab.debug.sensitivity import Sweep
    >>> ends = {"flat": [1.5, 1.0, 1.2], "steep": [2.5, 1.0, float("nan")]}
    >>> sweep = Sweep(rows=[{"variant": v, "lr": lr, "final_loss": x, "initial_loss": 3.0}
    ...                     for v, xs in ends.items()
    ...                     for lr, x in zip([1e-3, 1e-2, 1e-1], xs, strict=True)])
    >>> judge_ship({"recipe": "flat", "lr": 1e-2}, sweep) is None
    True
    >>> print(judge_ship({"recipe": "steep", "lr": 1e-2}, sweep))
    steep's LR sensitivity is 1.167; another recipe's is lower by more than 0.05: ...
    """
    if not isinstance(got, dict) or set(got) != {"recipe", "lr"}:
        return f"return a dict with the keys 'recipe' and 'lr'; got {got!r}"[:300]
    recipe, lr = got["recipe"], got["lr"]
    if recipe not in sweep.variants():
        return f"{recipe!r} is not a recipe of the sweep: {', '.join(sweep.variants())}"
    lrs, losses = sweep.curve(recipe)
    if isinstance(lr, bool) or not isinstance(lr, (int, float)):
        return f"the LR is a number of the grid, like 1e-3; got {lr!r}"
    at = [i for i, x in enumerate(lrs) if abs(x - lr) <= 1e-6 * x]
    if not at:
        return f"LR {lr!r} is not on the sweep's grid: {', '.join(f'{x:g}' for x in lrs)}"
    sens = sweep.sensitivity()
    if sens[recipe] > min(sens.values()) + AS_ROBUST:
        return (f"{recipe}'s LR sensitivity is {sens[recipe]:.3f}; another recipe's is lower "
                f"by more than {AS_ROBUST}: it trains nearly as well over more of the grid")
    l0 = sweep.rows[0]["initial_loss"]
    ended = [x if math.isfinite(x) else l0 for x in losses]
    i, best = at[0], min(ended)
    if ended[i] > best + NEAR_BEST:
        return (f"{recipe} at LR {lr:g} ended at {ended[i]:.2f}, {ended[i] - best:.2f} above "
                "its best LR's: you would ship a model that has not learned what it can")
    if i == len(lrs) - 1:
        return (f"LR {lr:g} is the top of the grid: no run above it says how close it is to "
                "failing, and the larger model fails at a lower LR")
    above = ended[i + 1]
    if above > (l0 + best) / 2:
        return (f"{recipe} at LR {lrs[i + 1]:g}, one grid step above yours, ended at "
                f"{above:.2f}, nearer the loss at init ({l0:.2f}) than its best: the larger "
                "model fails at a lower LR, so your choice has no margin")
    return None
