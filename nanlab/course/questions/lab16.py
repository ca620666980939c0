"""Lab 16 (16_new_failure_modes): its practice questions with their keys, and the judge of
its reasoning exercise (section 7), shown by id in the lab."""

import math

from nanlab.course.quiz import MultipleChoiceQuestion

LAB = "16_new_failure_modes"

QUESTIONS = [
    MultipleChoiceQuestion(
        "16-masked-row-fill",
        "A left-padded batch under a causal mask: the first query of a padded row may attend "
        "to padding keys only. The attention scores are masked, then a softmax is taken "
        "(max subtracted, as torch.softmax does). What does that row of weights become with "
        "a -inf fill, and with torch.finfo(dtype).min?",
        ["-inf: NaN (the max is -inf, and -inf - (-inf) is NaN); finfo.min: finite, equal "
         "weights",
         "-inf: all zeros; finfo.min: all zeros",
         "-inf: finite, equal weights; finfo.min: NaN",
         "both NaN: a row with nothing to attend to has no softmax"],
        answers=0,
        explanation="With every score -inf the row's max is -inf, and subtracting it gives "
        "-inf - (-inf) = NaN. A finite fill gives every key the same score, the max is that "
        "score, and the row is 1/n everywhere: garbage weights on padding, but finite, and the "
        "padded position's target is ignored anyway (section 1).",
        hints=["What is the max of a row of -inf, and what is x - max there?",
               "With finfo.min every score of the row is the same finite number: what is "
               "softmax of n equal numbers?"],
        why=["Section 1: the softmax of all -inf is NaN; the same row filled with "
             "finfo.min gives 1/n per key, which is what Hugging Face's eager mask relies on.",
             "A softmax's weights add up to 1 wherever it is finite; zeros are what SDPA's "
             "_safe_softmax returns on purpose, not what the arithmetic gives (section 1).",
             "It is the other way round: -inf makes -inf - (-inf) = NaN; a finite fill "
             "leaves equal finite scores (section 1).",
             "With finfo.min the scores are all the same finite number: the softmax is "
             "1/n per key, finite (section 1)."],
    ),
    MultipleChoiceQuestion(
        "16-clip-a-nan-gradient",
        "At step 40 a run's loss is 1.29, finite, and its global grad norm is NaN. locate "
        "says every forward value was finite and the first NaN was made by aten.div in "
        "LogBackward0. Will clipping the gradient norm at 1.0 save the step?",
        ["no: the clip multiplies every gradient by max_norm / NaN, which is NaN; fix the "
         "backward of the log (mask its input)",
         "yes: clipping bounds every gradient, so the NaN is cut to 1.0",
         "yes, if the learning rate is also divided by 10",
         "no, because the loss is finite: nothing is wrong, the NaN is a logging artefact"],
        answers=0,
        explanation="Clipping computes one coefficient from the global norm; a NaN norm makes "
        "the coefficient NaN and every gradient NaN. The NaN was made in the backward of a log "
        "at a 0 the forward's where had already masked: 0 / 0. Mask the log's input too, "
        "the double where (section 2).",
        hints=["What is max_norm / NaN?",
               "Where does locate say the NaN was made, forward or backward?"],
        why=["Section 2: grad_clip goes NaN at the same step; the double where cures it.",
             "A NaN is not larger than 1.0: comparisons with NaN are false and the clip "
             "coefficient is max_norm / NaN = NaN (section 2).",
             "The NaN is 0 / 0 in a derivative, which no learning rate changes (section 2: "
             "diagnose's LR replays still fail at step 40).",
             "The NaN gradient reaches the weights at that step (section 2: diagnose's "
             "replays say it reached the weights)."],
    ),
    MultipleChoiceQuestion(
        "16-fp8-zero-row",
        "Rowwise FP8 scaling computes scale = 448 / amax for each row of a gradient. One row "
        "is exactly 0 (a target the loss masks). What happens to that row, and what is the "
        "fix?",
        ["scale = 448 / 0 = inf, and 0 * inf = NaN; clamp the amax at a floor (1e-12) "
         "before dividing",
         "the row stays 0: 0 times any scale is 0",
         "the cast saturates inf to 448, so the row is 448 everywhere; use e5m2",
         "nothing in the forward pass; the NaN comes from a too-high learning rate"],
        answers=0,
        explanation="An amax of 0 gives an infinite scale, and scaling the zero row by it is "
        "0 * inf = NaN, before any cast. torchao clamps the amax at EPS = 1e-12 in "
        "amax_to_scale; the fix fp8_amax_floor does the same (section 3).",
        hints=["What is 448 / 0 in floating point?",
               "And what is 0 times that?"],
        why=["Section 3: fp8_amax_zero is NaN at step 0 with a finite loss; the amax floor "
             "cures it.",
             "0 * inf is NaN in IEEE arithmetic, not 0 (section 3).",
             "The NaN comes from the scaling, before the cast; a NaN stays NaN through the "
             "cast (section 3).",
             "The NaN is at step 0, before any update: no learning rate is involved "
             "(section 3)."],
    ),
    MultipleChoiceQuestion(
        "16-router-fp16-exp",
        "An MoE router runs under fp16 autocast, its softmax written as exp(x) / sum(exp(x)), "
        "with no z-loss. Its largest logit has grown to 11.3. Which change is the first to "
        "make, and why?",
        ["compute the router in fp32: exp(11.3) is past fp16's 65504, inf / inf is NaN",
         "divide the learning rate by 10: the logits grow too fast",
         "clip the gradient norm: the router's gradient is too large",
         "nothing: 11.3 is a small logit"],
        answers=0,
        explanation="log(65504) = 11.09: past it exp overflows fp16 and the hand-written "
        "softmax is inf / inf = NaN. A router in fp32 (Switch Transformer's selective "
        "precision) holds the logits; a z-loss keeps them small. A smaller LR slows their "
        "growth without bounding them, and clipping does not bound a logit.",
        hints=["Which change bounds the value the exp sees, or widens its range?",
               "The largest x whose exp fp16 holds is log(65504)."],
        why=["Section 4: the z-loss cures the run (docs/guides/faults.md measures "
             "router_fp32 curing it too); the logit passed 11.09 at the step it failed.",
             "A smaller LR slows the growth and hides the cause: nothing bounds the logits, "
             "and docs/guides/faults.md notes that a larger LR or a longer run brings the "
             "fp16 overflow back.",
             "Clipping bounds the update's size, not the logits: in docs/guides/faults.md "
             "the grad_clip run still went NaN.",
             "In fp32 it is small; in fp16 exp(11.3) is past 65504 (section 4)."],
    ),
]


# --- the reasoning exercise (section 7): three incidents, one first change each ---------

CHANGES = {
    "double_where": "mask the input of the log too: where(p > 0, log(where(p > 0, p, 1)), 0)",
    "amax_floor": "clamp the amax at 1e-12 before scale = fp8_max / amax",
    "current_scaling": "scale each FP8 cast by its tensor's amax now, not by past steps' amax",
    "router_fp32": "compute the router's logits and softmax in float32",
    "grad_clip": "clip the global gradient norm at 1.0",
    "lr_div10": "divide the learning rate by 10",
    "skip_step": "skip a step whose gradient is not finite, and go on",
}
"""The changes a learner may pick from, by name."""

EVIDENCE = ("first non-finite step", "loss there", "grad norm there",
            "FP8 casts with an inf scale there", "FP8 casts past the format's max there",
            "largest router logit there", "router dtype")
"""The rows the lab prints for each incident, in order."""

EXP_LIMIT = {"float16": math.log(65504.0)}
"""The largest x whose exp a 16-bit dtype holds (bf16's range is fp32's)."""


def incident_runs() -> dict:
    """The three runs of section 7, each with a setting other than its section's:
    {incident: FaultRun}.

    >>> runs = incident_runs()  # a few seconds  # doctest: +SKIP
    >>> list(runs)  # doctest: +SKIP
    ['incident A', 'incident B', 'incident C']
    """
    from nanlab.faults import run_fault

    return {"incident A": run_fault("fp8_amax_zero", steps=5, stop_when_poisoned=True),
            "incident B": run_fault("router_low_precision", lr=0.05, steps=45),
            "incident C": run_fault("where_log_grad", at_step=25, steps=30,
                                    stop_when_poisoned=True)}


def evidence_of(run) -> dict:
    """The rows of EVIDENCE for one run, read from its record at its first bad step.

    >>> from nanlab.faults import run_fault
    >>> ev = evidence_of(run_fault("fp8_amax_zero", steps=2, stop_when_poisoned=True))
    >>> ev["first non-finite step"], ev["FP8 casts with an inf scale there"] > 0
    (0, True)
    """
    record = run.record
    at = record.first_nonfinite_step
    row = record.steps[at] if at is not None else {}
    events = [e for e in record.events if e.get("step") == at]
    inf_scales = sum(e["inf_scale"] for e in events if e["kind"] == "fp8")
    past_max = sum(e["overflow"] for e in events if e["kind"] == "fp8")
    logits = [(r["logit_max"], r["dtype"]) for e in events if e["kind"] == "router"
              for r in e["routers"].values() if math.isfinite(r["logit_max"])]
    top = max(logits, default=(None, None))
    return {"first non-finite step": at, "loss there": row.get("loss"),
            "grad norm there": row.get("grad_norm"),
            "FP8 casts with an inf scale there": inf_scales,
            "FP8 casts past the format's max there": past_max,
            "largest router logit there": top[0], "router dtype": top[1]}


def _finite(x) -> bool:
    return x is not None and math.isfinite(x)


def key_change(evidence: dict) -> str | None:
    """The first change one incident's evidence points to, or None when it points nowhere.

    >>> key_change({"loss there": 1.6, "grad norm there": float("nan"),
    ...             "FP8 casts with an inf scale there": 0,
    ...             "largest router logit there": None, "router dtype": None})
    'double_where'
    """
    if evidence["FP8 casts with an inf scale there"] > 0:
        return "amax_floor"  # amax 0: the scale is inf, and 0 * inf = NaN
    if evidence.get("FP8 casts past the format's max there", 0) > 0:
        return "current_scaling"  # a value past a stale amax's range, cast to inf
    logit, dtype = evidence["largest router logit there"], evidence["router dtype"]
    if logit is not None and dtype in EXP_LIMIT and logit > EXP_LIMIT[dtype]:
        return "router_fp32"  # exp of that logit overflows the router's dtype
    if _finite(evidence["loss there"]) and not _finite(evidence["grad norm there"]):
        return "double_where"  # finite forward, NaN made in the backward pass
    return None


def judge_changes(got, incidents: dict) -> str | None:
    """None when each incident's change is the one its evidence points to, else one line
    naming the incident and the evidence against the choice (never the answer).

    >>> fp8 = {"loss there": 3.47, "grad norm there": float("nan"),
    ...        "FP8 casts with an inf scale there": 32,
    ...        "largest router logit there": None, "router dtype": None}
    >>> judge_changes({"incident A": "amax_floor"}, {"incident A": fp8}) is None
    True
    >>> print(judge_changes({"incident A": "grad_clip"}, {"incident A": fp8}))
    incident A: the grad norm there is nan: clipping multiplies every gradient by ...
    """
    if not isinstance(got, dict) or set(got) != set(incidents):
        return (f"return a dict with one change for each of {sorted(incidents)}; got "
                f"{got!r}"[:300])
    for name, ev in incidents.items():
        pick, key = got[name], key_change(ev)
        if pick not in CHANGES:
            return f"{name}: {pick!r} is not one of the CHANGES: {', '.join(CHANGES)}"
        if key is None or pick == key:
            continue
        norm, logit = ev["grad norm there"], ev["largest router logit there"]
        if pick == "grad_clip":
            return (f"{name}: the grad norm there is {norm:.3g}: clipping multiplies every "
                    "gradient by max_norm / that norm, and the step stays non-finite")
        if pick == "lr_div10":
            return (f"{name}: a smaller LR changes how fast values grow, not the arithmetic "
                    "that made the first non-finite value: which row names that arithmetic?")
        if pick == "skip_step":
            return (f"{name}: the same code meets the same arithmetic at the next step: "
                    "skipping keeps the run alive for a step, it changes no cause")
        if pick == "amax_floor":
            return f"{name}: no FP8 cast had an inf scale at that step"
        if pick == "current_scaling":
            return f"{name}: no FP8 cast went past its format's max at that step"
        if pick == "router_fp32":
            return (f"{name}: " + ("this run has no router logit to read" if logit is None
                                   else f"its largest router logit, {logit:.3g}, fits its "
                                   "dtype's exp"))
        if not _finite(ev["loss there"]):
            return (f"{name}: the loss itself is {ev['loss there']}: the forward pass made "
                    "the first non-finite value, not only the backward")
        return (f"{name}: a finite loss and a non-finite gradient, yes, but another row says "
                "what made the gradient non-finite")
    return None
