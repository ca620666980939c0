"""The STAR story of the learner's own incident (Situation, Task, Action, Result), with its numbers.

The story is written from a real run (claim I4), and says what kind of run it was: when
the fault was injected on purpose (a ``faults.run_fault`` run), the learner did not have a
production incident, so the story says "I built a fault-injection harness and reproduced
..." with their own numbers; only a run with no injected fault (your own) is told as "I
was training ...". An interviewer who asks "was this in production?" gets the same answer
the story gave. The facts are gathered first, as a plain
dict (``incident_facts``, in ``star_facts``), then put into sentences whose wording depends
on the root cause found (``_CAUSE_WORDS``, in ``star_words``), so the story reads naturally
for every fault family.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from nanlab.interview.star_facts import (
    RECOVERY_SLACK,
    RECOVERY_TOLERANCE,
    _finite,
    incident_facts,
)
from nanlab.interview.star_words import (
    _ALWAYS_PREVENT,
    _CAUSE_WORDS,
    _SOP_SHORT,
    _VERDICT_WORDS,
    _num,
    _Words,
)


@dataclass
class StarStory:
    """A STAR story of one incident, with the run's numbers; ``markdown()`` to export.

    ``situation``, ``task``, ``action`` and ``result`` are Markdown paragraphs (English
    with the Chinese key terms beside them); ``headline`` is the one-line, quantified
    version for a CV; ``facts`` holds every number used (see ``incident_facts``).

    >>> from nanlab import faults
    >>> story = star_story(faults.run_fault("nan_input"))  # doctest: +SKIP
    >>> story.save("my_incident.md")  # doctest: +SKIP
    """

    title: str
    headline: str
    situation: str
    task: str
    action: str
    result: str
    facts: dict = field(default_factory=dict)

    def markdown(self) -> str:
        """The story as Markdown: title, one-line headline, the four parts, key numbers."""
        parts = [
            f"## {self.title}",
            "",
            f"> {self.headline}",
            "",
            f"**Situation (情境).** {self.situation}",
            "",
            f"**Task (任务).** {self.task}",
            "",
            f"**Action (行动).** {self.action}",
            "",
            f"**Result (结果).** {self.result}",
            "",
            "**Key numbers (关键数字)**",
            "",
            "| fact | value |",
            "|---|---|",
        ]
        parts += [f"| {k} | {v} |" for k, v in self.key_numbers()]
        return "\n".join(parts) + "\n"

    def key_numbers(self) -> list[tuple[str, str]]:
        """(label, value) rows of the numbers an interviewer asks for."""
        f = self.facts
        rows = [("parameters", f"{f['model']['num_params']:,}" if f["model"]["num_params"]
                 else "n/a"),
                ("layers / d_model / heads",
                 f"{f['model']['n_layer']} / {f['model']['d_model']} / {f['model']['n_head']}"),
                ("precision", f["precision"]),
                ("optimizer, peak LR", f"{f['optimizer']}, {f['lr']:g}"),
                ("symptom", f["symptom"] + (f" at step {f['symptom_step']}"
                                            if f["symptom_step"] is not None else ""))]
        jump = f.get("grad_jump")
        if jump:
            rows.append(("grad-norm jump before it",
                         f"{jump['decades']:.1f} decades, steps {jump['low_step']}"
                         f"-{jump['high_step']}"))
        loc = f.get("location")
        if loc and loc["tensor"]:
            rows.append(("first non-finite value", f"{loc['pass']} pass, "
                         f"{loc['module'] or loc['tensor']}"))
        elif loc:
            rows.append(("crashed in", f"{loc['pass']} pass"
                         + (f", {loc['module']}" if loc["module"] else "")))
        rows.append(("root cause", f["detail"] or f["cause"] or "not found"))
        rows.append(("fix", f["fix"] or "none needed"))
        if f["rollback_step"] is not None and f["symptom_step"] is not None:
            rows.append(("rolled back to / steps redone",
                         f"step {f['rollback_step']} / "
                         f"{f['symptom_step'] - f['rollback_step'] + 1}"))
        if f["fixed"] is not None:
            rows.append((f"loss at step {f['compare_step']}: fixed vs clean",
                         f"{_num(f['loss_fixed_at_step'])} vs {_num(f['loss_clean_at_step'])}"))
        elif f["recovered_by_itself_in"] is not None:
            rows.append(("steps for the loss to come back by itself",
                         str(f["recovered_by_itself_in"])))
        if f["batches_after_fix"] is not None:
            rows.append(("batches after the old failure step, no recurrence",
                         str(f["batches_after_fix"])))
        return rows

    def save(self, path: str | Path) -> Path:
        """Write ``markdown()`` to ``path`` (UTF-8; folders made as needed); returns it."""
        path = Path(path)
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(self.markdown(), encoding="utf-8")
        return path

    def _repr_markdown_(self) -> str:
        return self.markdown()

    def __str__(self) -> str:
        return self.markdown()


def _precision_words(f: dict) -> str:
    p = f["precision"]
    if p == "fp32":
        return "fp32 (full precision)"
    if p == "bf16":
        return "bf16 autocast (混合精度, bf16)"
    if p == "fp16-pure":
        return "pure fp16 (model weights and optimizer state in fp16, 半精度)"
    scaler = "with a GradScaler" if f["grad_scaler"] else "without a GradScaler"
    return f"fp16 mixed precision (混合精度: torch.amp autocast {scaler})"


def _optimizer_words(f: dict) -> str:
    name = "AdamW" if f["optimizer"] == "adamw" else "SGD with momentum"
    warm = f"{f['warmup_steps']} warmup steps" if f["warmup_steps"] else "no warmup"
    decay = "cosine decay" if f["schedule"] == "cosine" else "a constant LR"
    clip = (f"gradient clipping (梯度裁剪) at {f['grad_clip']:g}" if f["grad_clip"]
            else "no gradient clipping")
    return f"{name} at a peak LR of {f['lr']:g} ({warm}, {decay}), {clip}"


def _device_words(device: str | None) -> str:
    if not device:
        return "its machine"
    return "the CPU" if device == "cpu" else f"a GPU ({device})"


def _model_words(f: dict) -> str:
    m = f["model"]
    params = f"{m['num_params']:,} parameters" if m["num_params"] else "parameters unknown"
    norms = "" if m["use_norms"] else ", no LayerNorm"
    if f["task"] == "counting":
        what = "a decoder-only Transformer (GPT-style"
    else:
        what = f"a model ({m['class'] or 'my own'}"
    return (f"{what}, {m['n_layer']} layers, d_model {m['d_model']}, {m['n_head']} heads"
            f"{norms}, {params})")


def _task_words(f: dict) -> str:
    if f["task"] == "counting":
        m = f["model"]
        return (f"a synthetic next-token task (counting in strides, vocab {m['vocab_size']}, "
                f"sequence length {m['block_size']}, batch {f['batch_size']})")
    return f"its training task (batch {f['batch_size']})"


def _symptom_words(f: dict) -> str:
    """The failure itself, as it showed in the record."""
    s, step = f["symptom"], f["symptom_step"]
    if s == "nonfinite":
        loss = f["loss_at_symptom"]
        if _finite(loss):
            what = (f"the global grad norm became {_num(f['grad_norm_at_symptom'])} while the "
                    f"loss was still {_num(loss)}")
        else:
            what = f"the loss became {_num(loss)}"
        where = (f"On the very first step (step {step})" if step == 0 else f"At step {step}")
        before = ""
        if f["last_good_step"] is not None:
            before = (f" (at step {f['last_good_step']} the loss was still "
                      f"{_num(f['last_good_loss'])})")
        silent = "" if f["error"] else (
            " Nothing raised an error: without a check the run would have kept training on "
            "NaN weights (a NaN is silent, an OOM is loud).")
        return f"{where}, {what}{before}.{silent}"
    if s == "error":
        return f"At step {step} the run crashed: `{str(f['error']).rstrip('.')}`."
    if s == "spike":
        back = f["recovered_by_itself_in"]
        tail = (f" It came back on its own within {back} steps." if back is not None
                else " It did not come back on its own.")
        jump = ""
        if f["last_good_step"] is not None and _finite(f["loss_at_symptom"]) \
                and f["last_good_loss"]:
            ratio = f["loss_at_symptom"] / f["last_good_loss"]
            jump = (f" from {_num(f['last_good_loss'])} at step {f['last_good_step']}, "
                    f"{ratio:.0f}x")
        return (f"At step {step} the loss spiked to {_num(f['loss_at_symptom'])}{jump}, "
                f"with no NaN." + tail)
    if s == "diverge":
        start, end = f["start_loss"], f["end_loss"]
        if _finite(start) and _finite(end) and end >= start:
            return (f"The loss climbed from {_num(start)} to {_num(end)} over "
                    f"{f['steps_run']} steps instead of falling: it diverged (发散), with no "
                    f"NaN.")
        clean = f["clean"]
        ref = (f"; the clean baseline reaches {_num(clean['final_loss'])}" if clean
               and clean.get("final_loss") is not None else "")
        return (f"The loss only went from {_num(start)} to {_num(end)} over {f['steps_run']} "
                f"steps{ref}: the run failed to converge (不收敛), with no NaN.")
    if s == "stall":
        return (f"The loss stayed near {_num(f['end_loss'])} after {f['steps_run']} steps "
                f"(it started at {_num(f['start_loss'])}): training stalled, with no NaN.")
    return f"The run showed a {s}."


def _jump_words(f: dict) -> str:
    jump, step = f["grad_jump"], f["symptom_step"]
    if step is None:
        return ""
    if jump is None:
        return ("There was no grad-norm history before it to read: it failed within the "
                "first steps.")
    at = jump["at_step"]
    then = f", then {_num(at)} at step {step}" if at is not None else ""
    span = (f"from {_num(jump['low'])} at step {jump['low_step']} to {_num(jump['high'])} at "
            f"step {jump['high_step']}")
    decades = round(jump["decades"], 1)  # decide on the number the sentence shows
    if decades >= 1.0:
        return (f"In the {jump['window']} steps before it the global grad norm (梯度范数) "
                f"grew {jump['decades']:.1f} orders of magnitude, {span}{then}.")
    if decades >= 0.5:
        return (f"In the {jump['window']} steps before it the global grad norm (梯度范数) "
                f"rose {jump['decades']:.1f} orders of magnitude ({span}){then}: less than "
                f"one order of magnitude, so no explosion was building up.")
    return (f"The global grad norm (梯度范数) was flat in the {jump['window']} steps before "
            f"it ({span}, {jump['decades']:.1f} orders of magnitude){then}: nothing was "
            f"building up.")


def _location_words(f: dict) -> str:
    loc, step = f["location"], f["symptom_step"]
    rollback = f["rollback_step"]
    if rollback is None or step is None:
        return ""
    head = (f"I rolled back (回滚) to the last good checkpoint (检查点), saved at the start of "
            f"step {rollback}, and replayed step {step} exactly, with hooks on every module "
            f"and op, forward and backward (`locate`)")
    if loc is None:
        return head + "; the replay did not show where the value was made."
    if loc["error"] and not loc["tensor"]:
        return (f"{head}: it crashed in the {loc['pass']} pass"
                + (f", in `{loc['module']}`" if loc["module"] else "") + ".")
    where = f"in the {loc['pass']} pass"
    if loc["module"]:
        kind = f" ({loc['module_type']})" if loc["module_type"] else ""
        where += f", in `{loc['module']}`{kind}"
    c = loc["counts"] or {}
    counts = ""
    if c:
        inf = (c.get("posinf") or 0) + (c.get("neginf") or 0)
        counts = f", {c.get('nan', 0)} NaN and {inf} inf of {c.get('numel', '?')} values"
    tensor = f", tensor `{loc['tensor']}`" if loc["tensor"] else ""
    order = {True: "inf came before NaN (an overflow first, then inf - inf or inf / inf)",
             False: "NaN came without an inf before it (a 0 / 0 or a NaN fed in, not an "
                    "overflow)",
             None: "inf and NaN appeared in the same operation"}[loc["inf_before_nan"]]
    return f"{head}: the first non-finite value was made {where}{tensor}{counts}; {order}."


def _sop_words(f: dict) -> str:
    """The SOP steps in order, each with its verdict, as a Markdown list."""
    lines = []
    for item in f["sop"]:
        label = _SOP_SHORT.get(item["step"], item["step"])
        verdict = _VERDICT_WORDS.get(item["verdict"], item["verdict"])
        lines.append(f"- **{label}**: {verdict}: {item['text']}.")
    done = {item["step"] for item in f["sop"]}
    rest = [_SOP_SHORT[k] for k in _SOP_SHORT if k not in done]
    if rest and f["cause"]:
        lines.append(f"- The SOP stops at the first step that explains the failure, so "
                     f"{', '.join(rest)} did not need a replay.")
    jump = f["grad_jump"]
    if (jump and jump["decades"] < 1.0 and f["symptom"] in ("nonfinite", "error")
            and "grad_norms" not in done):
        lines.append(f"- The grad norm before the failure grew only {jump['decades']:.1f} orders "
                     f"of magnitude in {jump['window']} steps, which also rules out a gradient "
                     f"explosion building up.")
    return "\n".join(lines)


def _result_words(f: dict, words: _Words) -> str:
    fixed, clean, step = f["fixed"], f["clean"], f["compare_step"]
    failed_at = f["symptom_step"]
    parts = []
    fix = f["fix"]
    if fixed is not None:
        healthy = fixed["verdict"] == "healthy"  # nanlab.analysis.judge, as the matrix and diagnose
        against = (lambda x: f" against {_num(x)} in the clean baseline") if clean is not None \
            else (lambda x: "")
        head = (f"With `{fix}` and the same seed ({f['seed']}), the run trained all "
                f"{fixed['steps_run']} steps.")
        if failed_at is not None:
            head += (f" At step {step}, where it had failed, the loss was "
                     f"{_num(f['loss_fixed_at_step'])}{against(f['loss_clean_at_step'])}")
            if fixed["last_step"] != step:
                head += (f"; at the last step ({fixed['last_step']}) "
                         f"{_num(fixed['final_loss'])}"
                         + (f" against {_num(clean['final_loss'])}" if clean else ""))
            head += "."
        else:
            head += (f" The loss fell from {_num(fixed['start_loss'])} to "
                     f"{_num(fixed['final_loss'])} at step {fixed['last_step']}"
                     f"{against(clean['final_loss'] if clean else None)}, where the faulty "
                     f"run had ended near {_num(f['end_loss'])}.")
        parts.append(head)
        if healthy and failed_at is not None:
            verify = (f"Verified (验证) with the same seed: {f['batches_after_fix']} batches "
                      f"after the old failure step, no non-finite loss and no spike: no "
                      f"recurrence (未复现).")
        elif healthy:
            verify = (f"Verified (验证) with the same seed over all {fixed['steps_run']} "
                      f"batches: no non-finite loss, no spike, and no "
                      f"{'stall' if f['symptom'] == 'stall' else 'divergence'}.")
        else:
            at = fixed["verdict_step"]
            verify = (f"Not yet proven: the fixed run still shows a problem at step "
                      f"{at if at is not None else fixed['last_step']} "
                      f"({fixed['verdict_reason']}).")
        skipped = fixed["bad_batches_skipped"]
        if skipped:
            noun = "batch was" if len(skipped) == 1 else "batches were"
            verify += (f" {len(skipped)} bad {noun} logged and skipped (batch "
                       f"{', '.join(str(b) for b in skipped)}).")
        parts.append(verify)
        back = f["back_on_clean_curve_at"]
        near = f"within {RECOVERY_TOLERANCE:.0%} (+{RECOVERY_SLACK:g}) of the clean run's loss"
        if clean is not None and failed_at is not None:
            if back is not None and back == step:
                parts.append(f"From step {step} to the end it stayed {near}.")
            elif back is not None:
                parts.append(f"It was back {near} {back - step} steps after step {step}, "
                             f"at step {back}, and stayed there.")
            else:
                parts.append(f"It ended above the clean run's loss ({_num(fixed['final_loss'])}"
                             f" vs {_num(clean['final_loss'])} at step {fixed['last_step']}): "
                             f"with this fix it learns more slowly than the clean baseline.")
    elif fix is None and f["cause"]:
        text = (f"The cure is in the {'scheduler' if f['cause_key'] == 'lr_jump' else 'setup'}"
                f", not in the model or the data: {words.why_fix}.")
        back = f["recovered_by_itself_in"]
        if back is not None:
            text += (f" The record shows it: the loss was back at its level before the spike "
                     f"{back} steps later, and the other {f['steps_after_symptom']} steps "
                     f"after it had {len(f['later_spikes']) or 'no'} further spike"
                     f"{'' if len(f['later_spikes']) == 1 else 's'}")
            if clean is not None:
                text += (f"; at the last step the loss was {_num(f['last_loss'])} against "
                         f"{_num(clean['final_loss'])} in the clean baseline")
            text += "."
        if f["cause_key"] == "lr_jump" and clean is not None:
            n = len(clean["spikes"])
            text += (f" With the schedule fixed, the same seed and config are the clean "
                     f"baseline: {clean['steps_run']} steps, {n or 'no'} "
                     f"spike{'' if n == 1 else 's'}, loss {_num(clean['final_loss'])} at the "
                     f"last step.")
        parts.append(text)
    else:
        parts.append(f"The diagnosed fix was checked by the SOP's replay: "
                     f"{f['fix_evidence']}.")
    if f["rollback_step"] is not None and failed_at is not None:
        redo = failed_at - f["rollback_step"] + 1
        which = (f"only step {failed_at}" if redo == 1
                 else f"{redo} steps ({f['rollback_step']} to {failed_at})")
        parts.append(f"Recovery cost: the last good checkpoint was saved at the start of "
                     f"step {f['rollback_step']}, so {which} had to be redone.")
    parts.append(f"Prevention (预防) and monitoring (监控): {words.prevention}; "
                 f"{_ALWAYS_PREVENT}.")
    return " ".join(parts)


def _problem(f: dict) -> str:
    """The incident in two or three words: 'NaN loss', 'loss spike', ... (a non-finite
    step whose loss was still finite is a non-finite gradient: the backward broke)."""
    if f["symptom"] == "nonfinite" and _finite(f.get("loss_at_symptom")):
        return "non-finite gradient"
    if f["symptom"] == "diverge":
        start, end = f["start_loss"], f["end_loss"]
        climbed = _finite(start) and _finite(end) and end >= start
        return "divergence" if climbed else "failure to converge"
    return {"nonfinite": "NaN loss", "error": "crash", "spike": "loss spike",
            "stall": "training stall"}.get(f["symptom"], "failure")


def _headline(f: dict, words: _Words) -> str:
    m = f["model"]
    size = f"{m['num_params']:,}-parameter" if m["num_params"] else "small"
    what = _problem(f)
    at = f" at step {f['symptom_step']}" if f["symptom_step"] is not None else ""
    if f["fault"]:
        line = (f"Built a fault-injection harness; reproduced a {what}{at} of a {size} "
                f"Transformer (injected `{f['fault']}`) and diagnosed it as {words.name}")
    else:
        line = f"Diagnosed a {what}{at} of a {size} Transformer as {words.name}"
    fixed, clean = f["fixed"], f["clean"]
    if f["fix"]:
        line += f", fixed it with `{f['fix']}`"
    if fixed is not None and f["batches_after_fix"] is not None:
        line += (f" and verified it over {f['batches_after_fix']} batches with the same seed "
                 f"(loss {_num(f['loss_fixed_at_step'])}")
        if f["loss_clean_at_step"] is not None:
            line += f" vs {_num(f['loss_clean_at_step'])} clean"
        line += f" at step {f['compare_step']})"
    elif fixed is not None:
        line += (f" and verified it over {fixed['steps_run']} steps with the same seed (final "
                 f"loss {_num(fixed['final_loss'])}")
        if clean is not None:
            line += f" vs {_num(clean['final_loss'])} clean"
        line += f", against {_num(f['end_loss'])} before the fix)"
    elif f["recovered_by_itself_in"] is not None:
        line += f"; the loss came back on its own within {f['recovered_by_itself_in']} steps"
    return line + "."


def story_from_facts(facts: dict) -> StarStory:
    """Write the STAR story from ``incident_facts`` (no runs, no replays: just words).

    >>> story = story_from_facts(incident_facts(run))  # doctest: +SKIP
    """
    f = facts
    words = _CAUSE_WORDS.get(f["cause_key"], _CAUSE_WORDS["unknown"])
    setup = (f"{_model_words(f)} on {_task_words(f)}, in {_precision_words(f)} on "
             f"{_device_words(f['device'])}, with {_optimizer_words(f)}; seed {f['seed']}, "
             f"{f['steps_planned']} steps planned.")
    if f["fault"]:  # a reproduction, told as one: not a production incident
        opening = (f"I built a fault-injection harness and reproduced a "
                   f"{_problem(f)} on purpose: I injected the `{f['fault']}` fault into a "
                   f"known-good run of {setup} A controlled reproduction, not a production "
                   f"incident: every number below comes from my own runs.")
    else:
        opening = f"I was training {setup}"
    situation = " ".join(s for s in [
        opening,
        _symptom_words(f),
        _jump_words(f),
    ] if s)
    problem = _problem(f)
    mechanism = words.on_error if f["symptom"] == "error" and words.on_error \
        else words.mechanism
    blind = (" Treat it as an incident: the SOP has to find the cause from the run's record "
             "and replays, not from the name of what I injected." if f["fault"] else "")
    task = (f"Find the root cause (根因) of the {problem}, not just a workaround; fix it; and "
            f"prove the fix on the same seed against the clean baseline, losing as little "
            f"training as possible.{blind}")
    stop = ""
    if f["symptom"] == "error":
        stop = ("The crash stopped the run; I kept its record and checkpoints as "
                "evidence. ")
    elif f["symptom"] == "nonfinite":
        if f["symptom_step"] is not None and f["steps_run"] <= f["symptom_step"] + 1:
            stop = (f"The run was stopped at step {f['symptom_step']} (止损), keeping its "
                    f"record and checkpoints as evidence. ")
        else:
            stop = ("I stopped the run (止损) and kept its record and checkpoints as "
                    "evidence. ")
    elif f["symptom"] == "spike":
        stop = ("The loss came back by itself, so nothing had to be rolled back; I read the "
                "run's record (loss, LR and grad norm per step) against the clean baseline. ")
    else:
        stop = ("I read the run's record (loss, LR and grad norm per step) against the clean "
                "baseline. ")
    fix_line = ""
    if f["fix"]:
        summary = f": {f['fix_summary']}" if f["fix_summary"] else ""
        fix_line = (f"Fix: `{f['fix']}`{summary}. Why this is the fix and not a "
                    f"workaround: {words.why_fix}.")
    action = (
        stop + _location_words(f)
        + ("\n\n" if f["location"] or f["rollback_step"] is not None else "")
        + "Then I went through the SOP in order (排查顺序: data -> AMP off -> LR / 10 -> "
          "grad norms -> init / eps), one change at a time, each a controlled replay with "
          "the same seed:\n\n"
        + _sop_words(f)
        + f"\n\nRoot cause (根因): {words.name}: {mechanism}. " + fix_line
    ).strip()
    result = _result_words(f, words)
    what = f["fault"] or "my run"
    title = f"STAR story: {words.name} ({what})"
    return StarStory(title, _headline(f, words), situation, task, action, result, facts)


def star_story(
    fault_run: Any,
    diagnosis: Any = None,
    *,
    clean: Any = None,
    fixed: Any = None,
    location: Any = None,
) -> StarStory:
    """A STAR story of the incident in ``fault_run``, with that run's real numbers.

    ``fault_run`` is a :class:`nanlab.faults.FaultRun` (best made with
    ``checkpoint_every=10, stop_when_poisoned=True``); ``diagnosis`` its
    :class:`nanlab.debug.diagnose.Diagnosis` (run here when not given). ``fixed`` is the same
    run with the diagnosed fix and ``clean`` the clean baseline; both are run here, with
    the original seed and length, when not given (``faults.run_fault(name,
    fixes=[diagnosis.fix])`` and ``faults.run_fault(None)``). ``location`` is a
    :class:`nanlab.debug.locate.Location` of the first bad step (found here when not given).

    The story names the model (parameters, layers, d_model), the task, precision,
    optimizer and LR; the step of the first NaN or spike and the grad-norm jump before
    it; where ``locate`` found the first non-finite value and whether inf came first;
    each SOP step's verdict (what was ruled out, and why); the root cause and the fix;
    the steps redone after the rollback; the loss at the same step against the clean
    run; the batches run after the fix without a recurrence; and prevention.

    >>> from nanlab import faults
    >>> run = faults.run_fault("nan_input", steps=60, checkpoint_every=10,
    ...                        stop_when_poisoned=True)
    >>> story = star_story(run)  # doctest: +SKIP
    >>> print(story.markdown())  # doctest: +SKIP
    """
    facts = incident_facts(fault_run, diagnosis, clean=clean, fixed=fixed, location=location)
    return story_from_facts(facts)
