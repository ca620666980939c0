# ---
# jupyter:
#   jupytext:
#     notebook_metadata_filter: -jupytext.text_representation.jupytext_version
#     text_representation:
#       extension: .py
#       format_name: percent
#       format_version: '1.3'
#   kernelspec:
#     display_name: Python 3 (ipykernel)
#     language: python
#     name: python3
# ---

# %% [markdown] tags=["solution-only"]
# **Source notebook (solution version).** This pair, `solutions/10_interview.py` and
# `solutions/10_interview.ipynb`, is the single source of `labs/10_interview.ipynb`, answers
# filled in. Edit either file (in JupyterLab the other follows on save), then run
# `nanlab course execute solutions/10_interview.py` (syncs the pair, stores the outputs
# the tests compare) and `nanlab course build` (writes the learner's version).

# %% [markdown]
# # Lab 10 · Interview practice (面试): say it in order, with your own numbers
#
# "Your loss suddenly became NaN. What do you do?" (Loss 突然变成 NaN，你怎么办？)
# is a standard question for LLM-training roles. Knowing the fixes is half of the
# answer. The other half is saying it **in order**, **at the depth your level is
# expected to show**, and **with numbers from a run you actually debugged**. In
# this lab:
#
# 1. **the structure** of a good answer (claim I1);
# 2. **three levels**: what a new graduate, an experienced engineer and a senior
#    engineer are each expected to show, and the typical mistake of each (I2);
# 3. **the rubric**: how a written answer is scored, and why a list of keywords
#    scores nothing;
# 4. **practice questions and a mock interview** with follow-ups aimed at what your
#    answer left out (I3);
# 5. **your own incident**: you break a run, diagnose it, and write its STAR story
#    (Situation, Task, Action, Result) from the run's real numbers (I4);
# 6. **the cheat sheet** for the night before.
#
# CPU only, about 40 minutes. Labs 00 to 02 show the tools used here. Cells marked
# `# YOUR CODE HERE` are yours; the cell after each one checks it.

# %% [markdown]
# ## Setup

# %%
import math

from IPython.display import Markdown, display

from nanlab.course import check, hint, solution, start_lab  # noqa: F401  (yours, when stuck)
from nanlab.debug import diagnose
from nanlab.faults import run_fault
from nanlab.interview import (
    MockInterview,
    MockInterviewWidget,
    bank_counts,
    cheat_sheet,
    frameworks_markdown,
    free_text,
    get_question,
    grad_norm_jump,
    star_story,
)
from nanlab.runs.record import RunRecord
from nanlab.viz import plot_compare

start_lab("10_interview")

# %% [markdown]
# ## 1. The shape of a good answer
# Interviewers hear many answers that start and end with "gradient explosion"
# (梯度爆炸). A strong answer walks the same five beats every time:
#
# 1. **Name it**: a numerical instability (数值不稳定): somewhere a value overflowed
#    to inf, or a 0 / 0 happened, and NaN spread from there.
# 2. **Stop and locate**: stop the run (止损), keep the evidence, find the **first**
#    non-finite step, roll back (回滚) to the last good checkpoint (检查点).
# 3. **Diagnose in order**, cheapest first, one change at a time: data -> AMP off ->
#    LR / 10 -> grad norms -> init / eps (排查顺序), each with the evidence it gave.
# 4. **Fix and prove it**: the root-cause fix, not only a workaround; the same seed
#    passes the old failure step and matches the clean run's loss; *how many
#    batches* you ran to be sure it did not come back.
# 5. **Prevent**: what now catches it automatically (data assertions, a guard, a
#    spike detector, dashboards).
#
# ## 2. Three levels, three answers
# The same question is asked of a new graduate (校招), an experienced engineer
# (社招) and a senior engineer or architect (资深). The depth expected differs, and
# so does the typical mistake.

# %%
display(Markdown(frameworks_markdown()))

# %%
from nanlab.course import practice

practice("10-level-mistake")

# %% [markdown]
# ## 3. The question bank and the rubric
# The course ships a bank of interview questions as data (`nanlab/interview/questions/`,
# one JSON file per topic, easy for an instructor to extend). Each has a model answer with the Chinese key
# terms beside the English ones, the key points a good answer must contain (its
# **rubric**), the common mistakes, and follow-up questions.

# %% tags=["nbval-check-output"]
counts = bank_counts()
print("questions:", sum(counts["level"].values()))
print("by level:", counts["level"])
print("by topic:", counts["topic"])

# %% [markdown]
# A written answer is scored against the key points, in English or Chinese, each a
# claim with many phrasings. Two to four **core** points decide the score; an answer
# passes with 60 % of them (the one pass mark of every widget and the mock interview);
# **bonus** points are named in the feedback and never fail you. One rule matters for
# how you practise: **a key point counts only when it is explained**, with a couple of
# words of its own in the same sentence, so a bare list of keywords scores nothing.
# Here are five answers to the same question:

# %% tags=["nbval-check-output"]
q = get_question("first-thing")
print(q.question, "/", q.question_zh, "\n")
answers = {
    "model answer": q.answer,
    "four points": (
        "The first thing I do is stop the run so it does not keep training on "
        "garbage, and I save the logs and a snapshot of the weights as evidence. "
        "Next I look through the loss log to find the first step where the loss went "
        "non-finite. Then I roll back to the last good checkpoint before that step "
        "and restart with the learning rate divided by 10 to see if it comes back."),
    "keyword list": "stop, logs, first NaN step, checkpoint, rollback, LR / 10, AMP",
    "off-topic": "I would buy more GPUs and train a bigger model for longer.",
    "Chinese": (
        "首先停止训练，保存日志和模型快照作为证据。然后在日志里找到第一个出现 NaN 的 step，"
        "先检查那一步 batch 里的数据有没有 NaN 或者越界的 label。再回滚到最后一个正常的"
        " checkpoint，用十分之一的 LR 重新跑，看 NaN 是否复现。"),
}
for label, text in answers.items():
    result = q.score(text)
    verdict = "pass" if result.passed else "fail"
    print(f"{label:13} score {result.score:4.0%} {verdict}  covered: {result.present}")

# %% [markdown]
# Naming a point is not enough either way: a phrase the sentence **negates** or
# **dismisses** earns nothing ("I would not roll back", "rolling back is a waste of
# time"), and each question lists **wrong claims** a good answer must not make. One
# wrong claim caps the score at 40 %, whatever else is right. Three answers that use
# the right words:

# %% tags=["nbval-check-output"]
tricky = {
    "negated": (
        "I would not stop the run and I would not keep the evidence: no logs, no "
        "snapshot. I would never roll back to the last good checkpoint, and I would not "
        "check the data of the failing batch."),
    "dismissed": (
        "Stopping the run is a waste of time because it may recover. The last thing I "
        "would do is roll back to an older checkpoint; I would keep training."),
    "wrong claim": q.answer + " " + q.must_not[0].example,
}
for label, text in tricky.items():
    result = q.score(text)
    print(f"{label:12} score {result.score:4.0%}  negated: {result.negated}  wrong: {result.wrong}")

# %% [markdown]
# Where the order is the point (the SOP), steps out of order fail too. The rubric
# reads words, not meaning: every bank question carries answers that people wrote
# without seeing its key points, and the tests require each good one to pass and each
# wrong one to fail, but a paraphrase can still slip past. So the feedback quotes the
# sentence that earned each point, and after a graded try the widget shows the model
# answer and lets you tick the core points you covered: a self-assessment, recorded
# beside the grader's verdict.
#
# ## 4. Practice: three questions from the bank
# Write each answer in full sentences, then press **Check**. **Hint** shows the key
# points one at a time. The last two are the follow-ups the source article quotes:
# "how many batches did you use to confirm it did not recur?" and "how do you
# handle FP16 gradient underflow and overflow?"

# %%
free_text("first-thing", lab="10_interview")

# %%
free_text("confirm-no-recur", lab="10_interview")

# %%
free_text("fp16-under-over", lab="10_interview")

# %% [markdown]
# ## 5. A mock interview
# The mock interview asks a question, scores your answer, and then, as a real
# interviewer does, **follows up on what you left out**: the follow-up is chosen
# from the key points your answer missed. After the last question it shows a summary
# with your weakest topics and what to practise next. It draws from the topics of
# Labs 00-09; the large-run questions wait for Labs 12-14 (`topics=None` asks them
# all). Change `level` to `"new_grad"` or `"senior"`, or `seed` for other questions.

# %%
LABS_00_TO_09 = ["data", "precision", "lr", "gradients", "init", "norms", "monitoring",
                 "recovery", "process", "distributed"]
MockInterviewWidget(level="experienced", seed=4, n_questions=3, topics=LABS_00_TO_09,
                    lab="10_interview")

# %% [markdown]
# What decides the follow-up? Here is the same machinery driven from code: an answer
# to "what do you do first?" that says everything except checking the failing batch's
# data before anything else. The follow-up probes exactly that gap.

# %% tags=["nbval-check-output"]
no_data_answer = (
    "The first thing I do is stop the run so it does not keep training on garbage, and "
    "I save the logs and a snapshot of the weights as evidence. I don't start changing "
    "hyperparameters blindly. Next I look through the loss log to find the first step "
    "where the loss went non-finite. Then I roll back to the last good checkpoint "
    "before that step. If it still appears, I turn AMP off and rerun, and only then "
    "restart with the learning rate divided by 10.")
mock = MockInterview(ids=["first-thing", "nan-vs-oom"])
reply = mock.answer(no_data_answer)
print(f"score {reply.result.score:.0%}, missing: {reply.result.missing}")
print("follow-up:", reply.is_follow_up, "->", reply.next_question.id)
print(reply.next_question.question)

# %% [markdown]
# ## 6. Your own incident, told as STAR
# The experienced level's answer is one real incident, told as **STAR**: Situation
# (情境), Task (任务), Action (行动), Result (结果), with numbers. "A toy model" is a
# fine Situation if the numbers are real and you can defend every one of them, so we
# make an incident now.
#
# ### 6a. Break a run
# One NaN reading arrives in one batch (`nan_input`, the dirty-data fault of Lab 02).
# Checkpoints every 10 steps; the run stops itself once a non-finite update reached
# the weights. Want a different story? Try `"zero_std"`, `"all_masked"` or
# `"tiny_eps"` (a few seconds each); `"high_lr"` runs in fp16 and is slow on a CPU.

# %%
FAULT = "nan_input"
bad = run_fault(FAULT, checkpoint_every=10, stop_when_poisoned=True, progress=True)
clean = run_fault(None, progress=True)  # the clean baseline: same seed, same length

# %% tags=["nbval-check-output"]
print("fault:", bad.fault, bad.params)
print("first bad step:", bad.first_bad_step)
print("steps run before the stop:", len(bad.record.steps))

# %% [markdown]
# ### 6b. Diagnose it with the SOP
# `diagnose` runs the SOP in order, each step a controlled replay, and proves the
# fix it proposes (Lab 02 and the SOP lab show how each step works).

# %%
d = diagnose(bad)
print(d.report())

# %% tags=["nbval-check-output"]
print("symptom:", d.symptom, "at step", d.symptom_step)
print("root cause:", d.cause)
print("fix:", d.fix, "| proven:", d.fix_verified)


# %% [markdown]
# ### 6c. The numbers an interviewer asks for
# "What did the gradient norm do before the NaN?" is a favourite follow-up: a slow
# climb over orders of magnitude says *explosion* (梯度爆炸); a flat norm followed by
# a sudden NaN says *something arrived at that step*, such as a bad batch.
#
# **Exercise 1 · `grad_jump`.** From a run record, return `(low_step, high_step,
# decades)` for the `window` steps before `step` (steps `step - window` to
# `step - 1`): among the finite, positive global grad norms (`row["grad_norm"]` of
# `record.steps`) find the smallest (`low`, at `low_step`), then the largest at or
# after `low_step` (`high`, at `high_step`); `decades = log10(high / low)`, the
# orders of magnitude it grew. On ties, take the earliest step.

# %%
def grad_jump(record, step, window=20):
    """(low_step, high_step, decades) of the global grad norm before `step`."""
    ### BEGIN SOLUTION
    norms = {r["step"]: r.get("grad_norm") for r in record.steps}
    points = []
    for s in range(max(0, step - window), step):
        g = norms.get(s)
        if g is not None and math.isfinite(g) and g > 0:
            points.append((s, g))
    low_step, low = min(points, key=lambda p: p[1])
    high_step, high = max((p for p in points if p[0] >= low_step), key=lambda p: p[1])
    return low_step, high_step, math.log10(high / low)
    ### END SOLUTION


# %% tags=["nbval-check-output"]
# a made-up explosion: flat at 1.0 for 10 steps, then x10 every 4 steps, then inf
exploding = RunRecord()
norms = [1.0] * 10 + [10 ** (k / 4) for k in range(1, 17)] + [math.inf]
for s, g in enumerate(norms):
    exploding.log_step({"step": s, "loss": 1.0, "grad_norm": g, "finite": math.isfinite(g)})
CASES = {f"your {FAULT} run, 20 steps before step {bad.first_bad_step}":
         (bad.record, bad.first_bad_step, 20),
         "the made-up explosion, 20 steps before step 26": (exploding, 26, 20),
         "the made-up explosion, 5 steps before step 26": (exploding, 26, 5)}


def judge_jump(got):
    for case, (record, step, window) in CASES.items():
        mine = got[case]
        want = grad_norm_jump(record, step, window)
        expected = (want["low_step"], want["high_step"], want["decades"])
        if not isinstance(mine, tuple) or len(mine) != 3:
            return f"case {case!r}: return a tuple (low_step, high_step, decades); got {mine!r}"
        if mine[:2] != expected[:2] or not math.isclose(mine[2], expected[2],
                                                         rel_tol=1e-6, abs_tol=1e-9):
            return f"case {case!r}: got {mine}, expected {expected}"
    return None


check("grad_jump", grad_jump, cases=CASES, test=judge_jump,
      hints=[
          "Measure how much the grad norm grew before the bad step: from the lowest value in "
          "the window to the highest value after it, in orders of magnitude.",
          "The record's steps hold each step's grad_norm; keep the finite, positive ones from "
          "the window of steps before step; take the earliest lowest point, then the highest "
          "at or after it; orders of magnitude are the log10 of the ratio.",
          "Collect (step, norm) pairs; Python's min and max take a key function that compares"
          " the norms and keep the first of equal ones; math.isfinite and > 0 filter the "
          "norms, math.log10 gives the decades.",
      ], solution="""\
norms = {r["step"]: r.get("grad_norm") for r in record.steps}
points = []
for s in range(max(0, step - window), step):
    g = norms.get(s)
    if g is not None and math.isfinite(g) and g > 0:
        points.append((s, g))
low_step, low = min(points, key=lambda p: p[1])
high_step, high = max((p for p in points if p[0] >= low_step), key=lambda p: p[1])
return low_step, high_step, math.log10(high / low)""")

# %% [markdown]
# The package has the same function, `grad_norm_jump`; the story below uses it. What
# did the grad norm do before your failure?

# %%
jump = grad_norm_jump(bad.record, bad.first_bad_step)
if jump is None:
    print("no grad-norm history: the run failed on its first steps")
else:
    print(f"before step {jump['step']}: {jump['decades']:.1f} orders of magnitude, "
          f"{jump['low']:.3g} at step {jump['low_step']} -> {jump['high']:.3g} at step "
          f"{jump['high_step']}; at step {jump['step']}: {jump['at_step']}")

# %% [markdown]
# ### 6d. The fix, run with the same seed, against the clean baseline

# %%
fixed = run_fault(FAULT, fixes=[d.fix], progress=True)
plot_compare({"clean": clean.record, f"{FAULT}": bad.record,
              f"{FAULT} + {d.fix}": fixed.record});

# %% [markdown]
# ### 6e. Your STAR story
# `star_story` gathers every number (the model's size, the first bad step, the
# grad-norm jump, where `locate` found the first non-finite value, what each SOP
# step ruled out, the loss of the fixed and the clean run at the same step, the
# batches run after the fix) and writes them into the four parts. Read it aloud: it
# should take about a minute.

# %%
story = star_story(bad, d, clean=clean, fixed=fixed)
display(Markdown(story.markdown()))
path = story.save("runs/my_star_story.md")  # Markdown, to keep or paste elsewhere
print("saved to", path)

# %% tags=["nbval-check-output"]
facts = story.facts
print("parameters:", f"{facts['model']['num_params']:,}")
print("first bad step:", facts["symptom_step"], "| rolled back to:", facts["rollback_step"])
print("located in:", facts["location"]["pass"], "pass,", facts["location"]["tensor"])
print("fix:", facts["fix"], "| batches after the failure step:", facts["batches_after_fix"])


# %% [markdown]
# **Exercise 2 · the Result sentence.** The sentence interviewers remember is the
# quantified result. Write `result_sentence(facts)` that returns **one sentence**
# (at least 15 words) with: the fix (`facts["fix"]`), the step where the run had
# failed (`facts["symptom_step"]`), the loss at that step with the fix and in the
# clean run (`facts["loss_fixed_at_step"]`, `facts["loss_clean_at_step"]`, each
# written with 3 significant digits: `f"{x:.3g}"`), and how many batches ran after
# it with no recurrence (`facts["batches_after_fix"]`).

# %%
def result_sentence(facts):
    """The quantified Result sentence of a STAR story, from its facts."""
    ### BEGIN SOLUTION
    return (f"With {facts['fix']} and the same seed, the run passed step "
            f"{facts['symptom_step']} with a loss of {facts['loss_fixed_at_step']:.3g} "
            f"against {facts['loss_clean_at_step']:.3g} in the clean run, and "
            f"{facts['batches_after_fix']} more batches ran without a NaN.")
    ### END SOLUTION


# %% tags=["nbval-check-output"]
other = dict(facts, fix="bf16", symptom_step=1234, loss_fixed_at_step=0.43219,
             loss_clean_at_step=0.42987, batches_after_fix=766)


SENTENCE_CASES = {"your story's facts": (facts,), "made-up facts (bf16, step 1234)": (other,)}


def judge_sentence(sentences):
    for case, (f,) in SENTENCE_CASES.items():
        text = sentences[case]
        if not isinstance(text, str):
            return f"case {case!r}: return a string; got {type(text).__name__}"
        needed = {"the fix": f["fix"], "the failure step": str(f["symptom_step"]),
                  "the fixed run's loss": f"{f['loss_fixed_at_step']:.3g}",
                  "the clean run's loss": f"{f['loss_clean_at_step']:.3g}",
                  "the batches after it": str(f["batches_after_fix"])}
        for what, value in needed.items():
            if value not in text:
                return f"case {case!r}: {what} ({value}) is not in: {text!r}"
        if len(text.split()) < 15:
            return f"case {case!r}: a full sentence please (15 words or more): {text!r}"
    return None


check("result_sentence", result_sentence, cases=SENTENCE_CASES, test=judge_sentence,
      hints=[
          "One sentence with the run's own numbers: the fix, the step that had failed, the "
          "fixed and clean losses there, and the batches run since.",
          "The facts dict holds fix, symptom_step, loss_fixed_at_step, loss_clean_at_step and "
          "batches_after_fix; losses read best with three significant digits.",
          "An f-string puts each fact in place; the format spec :.3g after a loss writes it "
          "with three significant digits (0.43219 becomes 0.432).",
      ], solution="""\
return (f"With {facts['fix']} and the same seed, the run passed step "
        f"{facts['symptom_step']} with a loss of {facts['loss_fixed_at_step']:.3g} "
        f"against {facts['loss_clean_at_step']:.3g} in the clean run, and "
        f"{facts['batches_after_fix']} more batches ran without a NaN.")""")

# %% [markdown]
# Now say it in your own words. The bank's question "Tell me about a NaN or
# loss-spike incident you debugged" has a rubric for exactly this: a concrete
# model and scale, the step and the symptom, actions in order with evidence, a
# result with numbers, and the prevention you added. Paste or retell your story:

# %%
free_text("star-story", lab="10_interview")

# %% [markdown]
# Two things to be ready for when you tell it:
#
# - **"How many batches did you run to confirm it did not recur?"** Your story has
#   the number. On a real run, run several times the gap between incidents (if the
#   NaN came every ~2,000 steps, 500 clean steps prove little).
# - **"Why is that the root cause and not a coincidence?"** Your Action part has
#   the controlled replays: same seed, one change at a time, and the step that
#   explained the failure.
#
# ## 7. The night before: the one-page cheat sheet

# %%
display(Markdown(cheat_sheet()))

# %% [markdown]
# ## Summary
# - Answer in five beats: name it, stop and locate, diagnose in order with evidence,
#   fix and prove it with numbers, prevent.
# - Match the level: principles and the standard order (校招); one real case with
#   numbers (社招); the system that prevents, detects and recovers (资深).
# - Explain each point in a sentence; a list of keywords convinces neither the
#   rubric nor an interviewer.
# - Expect follow-ups on what you left out: how many batches confirmed the fix,
#   FP16 underflow and overflow, why AMP off is a hint and not proof.
# - Your STAR story comes from your own run: its model size, the first bad step,
#   the grad-norm jump, where the NaN was made, what was ruled out, the fix, the
#   loss against the clean run, and the batches that proved it. It is saved in
#   `runs/my_star_story.md`.
#
# Your progress:

# %%
from nanlab.course import show_progress

show_progress();
