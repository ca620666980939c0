"""Two diagrams the course draws instead of describing: float bit layouts and the SOP.

- :func:`plot_float_layouts`: sign / exponent / mantissa bits of fp32, fp16 and bf16
  with each format's max, smallest normal and eps, all read from ``torch.finfo``.
- :func:`plot_sop_flowchart`: the SOP in ``diagnose``'s order, the question each step
  asks, and where a "yes" points (the cause and the fix the fault catalogue declares).

Both are plain matplotlib (patches and text), no graphviz.

>>> fig = plot_float_layouts()
>>> [t.get_text() for t in fig.axes[0].texts][:3]
['sign 1', 'exponent 8', 'mantissa 23']
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

import matplotlib.pyplot as plt
import torch
from matplotlib.figure import Figure
from matplotlib.patches import FancyBboxPatch, Rectangle

from nanlab.debug.diagnose import EXPLOSION_DECADES, LR_CUTS
from nanlab.errors import NanlabError
from nanlab.faults.catalogue import SOP_STEPS, cure_for

PART_COLORS = {"sign": "#d62728", "exponent": "#1f77b4", "mantissa": "#2ca02c"}


@dataclass(frozen=True)
class FloatLayout:
    """One float format's bits and limits, from ``torch.finfo``.

    >>> FloatLayout.of(torch.bfloat16).parts
    (('sign', 1), ('exponent', 8), ('mantissa', 7))
    """

    name: str
    bits: int
    exponent: int
    mantissa: int  # stored fraction bits (the leading 1 of a normal number is implicit)
    max: float
    smallest_normal: float
    eps: float  # the gap between 1 and the next float: 2 ** -mantissa

    @classmethod
    def of(cls, dtype: torch.dtype) -> FloatLayout:
        if not dtype.is_floating_point:
            raise NanlabError(f"dtype={dtype}: not a floating-point type; allowed: "
                              "torch.float32, torch.float16, torch.bfloat16, ...")
        info = torch.finfo(dtype)
        mantissa = round(-math.log2(info.eps))
        return cls(str(dtype).removeprefix("torch."), info.bits, info.bits - 1 - mantissa,
                   mantissa, info.max, info.smallest_normal, info.eps)

    @property
    def parts(self) -> tuple[tuple[str, int], ...]:
        return (("sign", 1), ("exponent", self.exponent), ("mantissa", self.mantissa))


def plot_float_layouts(dtypes: Sequence[torch.dtype] = (torch.float32, torch.float16,
                                                        torch.bfloat16)) -> Figure:
    """One bar of bits per format (one cell per bit, same width for every format), the
    fields coloured and labelled with their bit counts, and the format's max, smallest
    normal and eps beside it, read from ``torch.finfo``.

    >>> fig = plot_float_layouts([torch.float16])
    >>> len(fig.axes[0].patches)      # one cell per bit
    16
    """
    layouts = [FloatLayout.of(d) for d in dtypes]
    if not layouts:
        raise NanlabError("dtypes is empty; pass e.g. (torch.float32, torch.float16)")
    width = max(lay.bits for lay in layouts)
    fig, ax = plt.subplots(figsize=(11, 0.4 + 0.95 * len(layouts)), layout="constrained")
    for row, lay in enumerate(layouts):
        y, x = -row, 0
        for part, count in lay.parts:
            for _ in range(count):
                ax.add_patch(Rectangle((x, y), 1, 0.6, facecolor=PART_COLORS[part],
                                       edgecolor="white", alpha=0.85))
                x += 1
            inside = count > 3  # a 1-bit sign field is labelled above its cell
            ax.text(x - count / 2, y + (0.3 if inside else 0.68), f"{part} {count}",
                    ha="center", va="center" if inside else "bottom", fontsize=8,
                    color="white" if inside else PART_COLORS[part], fontweight="bold")
        ax.text(-0.5, y + 0.3, lay.name, ha="right", va="center", fontsize=10)
        ax.text(width + 0.8, y + 0.3, f"max {lay.max:.6g}\nsmallest normal "
                f"{lay.smallest_normal:.4g}\neps 2^-{lay.mantissa} = {lay.eps:.4g}",
                va="center", fontsize=8, family="monospace")
    ax.set_xlim(-6, width + 15)
    ax.set_ylim(-len(layouts) + 0.8, 1.0)
    ax.axis("off")
    ax.set_title("Bits of a float: more exponent bits = more range, more mantissa bits = "
                 "finer steps (values from torch.finfo)", fontsize=10)
    return fig


# -- the SOP flowchart ------------------------------------------------------------------------
def sop_questions() -> list[tuple[str, str, str, str]]:
    """(step key, box title, the question it asks, where a yes points), in the SOP's order.

    The titles are ``SOP_STEPS``; the thresholds and fixes come from ``diagnose`` and
    the fault catalogue, so the chart follows the code.

    >>> [key for key, *_ in sop_questions()]
    ['data', 'amp', 'lr', 'grad_norms', 'init_eps']
    """
    cuts = " then / ".join(str(d) for d, _ in LR_CUTS)
    asks = {
        "data": ("Does the batch of the first bad step hold NaN / inf inputs, "
                 "illegal labels or only masked targets?",
                 f"dirty data: {cure_for('dirty_data')}"),
        "amp": ("Does the same run in fp32 train healthily?\n(then: does bf16?)",
                f"precision: {cure_for('fp16_overflow')}, {cure_for('adam_eps_fp16')} "
                f"or {cure_for('softmax_overflow')} (the bf16 replay and locate tell which)"),
        "lr": (f"Does it train at LR / {cuts}?\n(or: does the LR column jump?)",
               f"learning rate: {cure_for('learning_rate')}; no warmup: "
               f"{cure_for('learning_rate', 'no_warmup')}"),
        "grad_norms": (f"Did the grad norm grow >= {EXPLOSION_DECADES:g} powers of ten "
                       "before the failure?",
                       f"explosion: {cure_for('deep_explosion')}"),
        "init_eps": ("Is the step-0 weight scale off, a norm's eps 0 or tiny, "
                     "a layer dead or saturated?",
                     f"init / eps: {cure_for('bad_init')}, {cure_for('tiny_eps')}"),
    }
    missing = set(SOP_STEPS) - set(asks)
    if missing:  # a new SOP step must get its question here
        raise NanlabError(f"SOP steps without a question in the flowchart: {sorted(missing)}")
    return [(key, title, *asks[key]) for key, title in SOP_STEPS.items()]


def _box(ax, x, y, w, h, text, color, fontsize=8):
    ax.add_patch(FancyBboxPatch((x - w / 2, y - h / 2), w, h, boxstyle="round,pad=0.02",
                                facecolor=color, edgecolor="0.3", lw=1))
    ax.text(x, y, text, ha="center", va="center", fontsize=fontsize, wrap=True)


def _arrow(ax, start, end, label, side="left"):
    ax.annotate("", xy=end, xytext=start, arrowprops={"arrowstyle": "->", "lw": 1.3,
                                                      "color": "0.3"})
    mid = ((start[0] + end[0]) / 2, (start[1] + end[1]) / 2)
    ax.text(mid[0] + (0.03 if side == "left" else 0), mid[1] + (0.02 if side != "left" else 0),
            label, fontsize=8, fontweight="bold", color="0.2",
            ha="left", va="bottom" if side != "left" else "center")


def _wrap(text: str, width: int) -> str:
    import textwrap

    return "\n".join(textwrap.fill(part, width) for part in text.split("\n"))


def plot_sop_flowchart() -> Figure:
    """The SOP as a flowchart: a box per step (data -> AMP off -> LR / 10 -> grad norms
    -> init / eps) with its question; "yes" points right to the cause and its fix,
    "no" down to the next step; after the last, ``locate`` finds the first bad op.

    >>> fig = plot_sop_flowchart()
    >>> len(fig.axes[0].patches)      # 5 steps, 5 causes, the end box
    11
    """
    steps = sop_questions()
    n = len(steps)
    fig, ax = plt.subplots(figsize=(11, 1.25 * (n + 1)), layout="constrained")
    row_h = 1.0
    for i, (_, title, question, answer) in enumerate(steps):
        y = -i * row_h
        _box(ax, 0.28, y, 0.50, 0.78 * row_h, "\n\n" + _wrap(question, 62), "#e8f0fb")
        ax.text(0.28, y + 0.24 * row_h, title[0].upper() + title[1:], ha="center",
                va="center", fontsize=8.5, fontweight="bold", wrap=True)
        _box(ax, 0.80, y, 0.36, 0.6 * row_h, _wrap(answer, 38), "#fde9e7")
        _arrow(ax, (0.535, y), (0.615, y), "yes", side="top")
        below = -(i + 1) * row_h + 0.4 * row_h
        _arrow(ax, (0.28, y - 0.4 * row_h), (0.28, below), "no")
    _box(ax, 0.28, -n * row_h, 0.50, 0.6 * row_h, "No cause found: locate the first "
         "non-finite op\n(nanlab locate) and read its inputs", "#eeeeee")
    ax.set_xlim(0, 1)
    ax.set_ylim(-n * row_h - 0.5, 0.5)
    ax.axis("off")
    ax.set_title("The SOP: cheap and likely first; the first replay that trains names the "
                 "cause", fontsize=10)
    return fig
