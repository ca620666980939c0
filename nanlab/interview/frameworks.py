"""Answer frameworks: what each level (new graduate, experienced, senior) is expected to show."""

from __future__ import annotations

from dataclasses import dataclass

from nanlab.errors import check_choice
from nanlab.interview.bank import LEVELS


@dataclass(frozen=True)
class Framework:
    """What an interviewer expects from one level, a fill-in template, and its pitfall.

    >>> print(answer_framework("senior"))  # doctest: +SKIP
    """

    level: str
    title: str
    expected: tuple[str, ...]
    template: str
    typical_mistakes: tuple[str, ...]


FRAMEWORKS: dict[str, Framework] = {
    "new_grad": Framework(
        level="new_grad",
        title="New graduate / junior (校招 / 初级): principles and the standard steps",
        expected=(
            "Name the problem: a numerical instability (数值不稳定) that turns the loss into "
            "inf or NaN, usually an overflow or a 0/0 somewhere.",
            "Give several causes with their mechanism, not one: dirty data (脏数据), a high "
            "learning rate or missing warmup (学习率预热), gradient explosion (梯度爆炸), FP16 "
            "overflow in mixed precision (混合精度), init and eps.",
            "Give the order of checks and what each rules out: data -> AMP off -> LR / 10 -> "
            "grad norms -> init / eps.",
            "Name the tools: torch.isfinite assertions, clip_grad_norm_ (梯度裁剪), "
            "torch.amp.GradScaler (损失缩放), TensorBoard for the loss and grad norms.",
            "Back it with a small experiment of your own (a toy Transformer counts), with "
            "its numbers.",
        ),
        template=(
            "A NaN loss is a numerical instability (数值不稳定): somewhere a value ____ "
            "(overflowed to inf / was divided by zero). First I would stop the run, keep the "
            "logs, find the first bad step and roll back (回滚) to the last good checkpoint "
            "(检查点). Then I check, cheapest first: the data (____), AMP off (____), the "
            "learning rate divided by 10 (____), the gradient norms (____), init and eps "
            "(____). In my own experiment on ____, ____ made the loss NaN at step ____ and "
            "____ fixed it. To prevent it I would use ____ and monitor ____."
        ),
        typical_mistakes=(
            'Only saying "gradient explosion" (只回答"梯度爆炸"): one cause, no order, no tools.',
            "Reciting a memorised list with no debugging of your own.",
        ),
    ),
    "experienced": Framework(
        level="experienced",
        title="Experienced engineer (社招 / 中高级): a real case and its details",
        expected=(
            "One real incident, told as STAR: the model and scale, the step at which it "
            "happened, what the logs showed.",
            "The actions in order with the evidence each produced (rollback, replay of the "
            "bad step, AMP off, LR / 10, grad norms), and the root cause it proved.",
            "The fix and why it is the fix and not a workaround (a GradScaler setting, "
            "warmup, a data filter, an eps).",
            "Numbers: the step, the grad norm jump, the loss before and after, how many "
            "steps you ran to confirm it did not recur.",
            "What you built afterwards: a detection script, a guard, an alert.",
        ),
        template=(
            "Situation: training ____ (model, parameters, data, precision) on ____ (hardware), "
            "the loss became NaN at step ____ after ____. Task: find the root cause without "
            "losing ____. Action: I rolled back to the checkpoint at step ____, replayed the "
            "failing batch, and found ____ (evidence: ____). Disabling AMP / lowering the LR "
            "showed ____. Result: after ____ the run passed step ____ and matched the clean "
            "run's loss (____ vs ____); no NaN in the next ____ steps. I then added ____ so it "
            "is caught automatically."
        ),
        typical_mistakes=(
            "No numbers (没有量化): 'I lowered the learning rate and it worked' says nothing "
            "about evidence or effect.",
            "Stopping at the workaround (lower LR, fp32) without naming the root cause.",
        ),
    ),
    "senior": Framework(
        level="senior",
        title="Senior / architect (资深 / 架构师): the system that prevents and recovers",
        expected=(
            "A concrete anchor: the model size, the cluster, the precision, and what a NaN "
            "costs there in GPU-hours.",
            "Prevention built into the framework: data validation in the pipeline, bf16, "
            "warmup and clipping defaults, sane eps, z-loss or QK-LayerNorm for large "
            "models.",
            "Detection and monitoring: on-device finiteness checks and a running z-score "
            "spike detector with no host sync, per-layer dashboards, alerts.",
            "Recovery as a policy: skip, roll back and skip batches, lower the LR, bounded "
            "retries, all ranks agreeing (all-reduce of the flag), every action logged.",
            "Reproducibility and learning: run manifests, exact replay, post-mortems, "
            "incident metrics over time.",
        ),
        template=(
            "For a ____ (model size) run on ____ (GPUs) in ____ (precision), a NaN costs "
            "about ____ GPU-hours per incident, so the framework has to handle it without a "
            "human. Prevention: ____. Detection: ____ checked on device every step, a spike "
            "detector at ____ sigma over ____ steps, dashboards of ____. Recovery: on a hit "
            "every rank ____ (agreed by ____); repeated hits roll back to ____ and skip ____ "
            "batches, at most ____ retries before paging. Reproducibility: ____. Over the "
            "last ____ months this cut incidents from ____ to ____."
        ),
        typical_mistakes=(
            "Detached from a concrete model (脱离具体模型): generic architecture talk with no "
            "scale, no cost, no numbers.",
            "No prevention or monitoring story: only how to debug one run, not how the "
            "system keeps it from happening and notices when it does.",
        ),
    ),
}


def answer_framework(level: str) -> str:
    """The answer framework for one level, as Markdown.

    >>> print(answer_framework("senior").splitlines()[0])
    ### Senior / architect (资深 / 架构师): the system that prevents and recovers
    """
    check_choice("level", level, LEVELS)
    fw = FRAMEWORKS[level]
    lines = [f"### {fw.title}", "", "**What the interviewer wants to hear**"]
    lines += [f"- {e}" for e in fw.expected]
    lines += ["", "**Fill-in template**", "", f"> {fw.template}", "", "**Typical mistakes**"]
    lines += [f"- {m}" for m in fw.typical_mistakes]
    return "\n".join(lines)


def frameworks_markdown() -> str:
    """All three frameworks and a comparison table, as Markdown.

    >>> "| level |" in frameworks_markdown()
    True
    """
    rows = [
        "| level | strategy | typical mistake |",
        "|---|---|---|",
        "| new graduate (校招) | principles + the standard steps, in order | only "
        '"gradient explosion" |',
        "| experienced (社招) | one real case + the details that proved it | no numbers |",
        "| senior (资深) | system design: prevention, detection, recovery | no concrete model; "
        "no prevention/monitoring story |",
    ]
    parts = ["## Answer frameworks by level", "", *rows]
    parts += ["", *(answer_framework(lv) + "\n" for lv in LEVELS)]
    return "\n".join(parts).rstrip() + "\n"
