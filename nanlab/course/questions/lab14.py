"""Lab 14 (14_large_run_faults): its practice questions with their keys, shown by id in the lab."""

from nanlab.course.quiz import MultipleChoiceQuestion, RootCauseQuestion

LAB = "14_large_run_faults"

QUESTIONS = [
    MultipleChoiceQuestion(
        "14-mean-of-means-weight",
        "A loop accumulates 4 micro-batches, takes each one's mean cross-entropy and divides "
        "by 4. The micro-batches hold 2, 100, 100 and 98 unmasked targets (N = 300). How "
        "much does one target of the first micro-batch weigh, against what it should?",
        ["1/8 against 1/300: about 37x too much",
         "1/300 against 1/300: the division by 4 fixes it",
         "1/400 against 1/300: a little too little",
         "0: a micro-batch that short is skipped"],
        answers=0,
        explanation="Its mean divides by n_0 = 2 and the loop by k = 4: weight 1/(k n_0) = "
        "1/8. A token-weighted loss gives every target 1/N = 1/300. The short micro-batch's "
        "two tokens pull the update as hard as a whole micro-batch.",
        hints=["Write the weight of one target as 1 / (k * n_i).",
               "Compare it with 1 / N, N the step's total count."],
        why=["Section 3: a target of micro-batch i weighs 1 / (k · n_i), here 1 / (4 · 2), "
             "where a token-weighted loss gives every target 1 / N.",
             "Dividing by k is right only when every micro-batch holds N / k targets "
             "(section 3); this one holds 2.",
             "That is the weight of a target in a micro-batch of 100 (1 / (4 · 100)), not "
             "in the short one of 2 (section 3).",
             "Nothing skips it: its mean is taken over its 2 targets like any other "
             "(section 3); only a micro-batch with no target at all is special (section "
             "4)."],
    ),
    MultipleChoiceQuestion(
        "14-transient-or-data",
        "A step's loss is NaN. You replay it from the checkpoint before, with the same "
        "batches and RNG: every step reproduces bit for bit and the NaN step comes back "
        "finite. What is the likeliest cause, and the cure?",
        ["the device: silent data corruption; rerun the step (and watch that GPU)",
         "dirty data in that batch; validate the data and skip it",
         "a too-high LR; divide it by 10",
         "an fp16 overflow; turn AMP off"],
        answers=0,
        explanation="Data, the LR or precision would fail again on an exact replay. A "
        "failure that does not reproduce from the same state and inputs is transient: a "
        "bit flipped on the device (Megatron-LM's RerunStateMachine calls it "
        "TRANSIENT_ERROR). Rerunning the step keeps the run; a device that does it often "
        "is taken out.",
        hints=["Which of the causes depend only on the state and the inputs?",
               "What would a replay of dirty data show?"],
        why=["Section 5: a result that the same weights, batch and RNG do not reproduce is "
             "transient; guard_rerun reruns the step and keeps the clean result.",
             "The same batch came back finite in the replay, where dirty data fails again; "
             "and section 5's run with validate_data still went NaN: the batch was clean.",
             "The LR of that step is the same in the replay, which came back finite: a too-"
             "high LR would fail again.",
             "The replay ran in the same precision and came back finite: an overflow of "
             "the format's range would recur."],
    ),
    RootCauseQuestion(
        "14-mystery-junk-shard",
        "Mystery: a pretraining run's loss jumps several-fold at step 150 for a few steps, "
        "then settles; no error, no NaN, every token id inside the vocabulary, and the "
        "batch check passes. What is the root cause? Tick the evidence that supports it.",
        ["junk sequences in the data", "learning rate too high",
         "gradient accumulation bug", "a flipped bit on the device",
         "a resume that lost state"],
        answer="junk sequences in the data",
        evidence=["per-sample loss: a quarter of the sequences carry most of the batch's "
                  "loss",
                  "each of those sequences is one token repeated",
                  "a replay from the checkpoint reproduces the spike bit for bit",
                  "the LR column is smooth through step 150",
                  "there is no restart event near step 150"],
        supporting=["per-sample loss: a quarter of the sequences carry most of the batch's "
                    "loss",
                    "each of those sequences is one token repeated"],
        explanation="A spiking batch loss is a mean: per-sample loss shows a few sequences "
        "carrying it, each one token repeated, junk that every id and number check passes "
        "(section 2). A replay that reproduces the spike rules out the device, and a smooth "
        "LR and no restart rule out the schedule and a resume, but only the per-sample loss "
        "points at the cause. quality_filter cures it; validate_data does not.",
        hints=["Is the batch's loss high on every sequence, or on a few?",
               "What does a batch check test, and what can it not see?"],
        why=["Section 2: a model that moved would be worse on every sequence; a few "
             "carrying the batch point at those sequences.",
             "Section 2: their most common token is all of each one, a broken dedup or a "
             "corrupted shard; a repetition filter (quality_filter) cures it.",
             "It rules out a transient device fault (section 5), but every deterministic "
             "cause replays too.",
             "It rules out a schedule glitch, but points at nothing.",
             "It rules out a resume (Lab 13), but points at nothing."],
        family_why=["Section 2: per-sample loss puts the spike on a few sequences, each one "
                    "token repeated; quality_filter cures it with the same seed.",
                    "A model that moved too far would be worse on most sequences; here most "
                    "kept a low loss, and the LR column is smooth.",
                    "A weighting bug shows where micro-batches are uneven (section 3); it "
                    "does not put the loss on a few sequences of one repeated token.",
                    "A flipped bit does not come back on a replay (section 5); this spike "
                    "replays bit for bit.",
                    "There was no restart near step 150 (Lab 13: the restart event names "
                    "that fault)."],
    ),
    RootCauseQuestion(
        "14-mystery-empty-micro-batch",
        "Mystery: a run accumulates gradients over 4 micro-batches; at step 40 its loss "
        "is NaN, in fp32, although the batch check passes batch 40. What is the root "
        "cause? Tick the evidence that supports it.",
        ["dirty data", "gradient accumulation bug", "a flipped bit on the device",
         "learning rate too high", "LayerNorm eps too small"],
        answer="gradient accumulation bug",
        evidence=["step 40's micro-batches hold 0, 248, 248 and 248 unmasked targets",
                  "locate: the first non-finite value is a NaN in the loss, with no inf "
                  "before it",
                  "the batch check passes batch 40: it has unmasked targets",
                  "a replay from the checkpoint fails again at step 40",
                  "the run is fp32"],
        supporting=["step 40's micro-batches hold 0, 248, 248 and 248 unmasked targets",
                    "locate: the first non-finite value is a NaN in the loss, with no inf "
                    "before it"],
        explanation="A micro-batch with no unmasked target has a mean loss of 0 / 0, and a "
        "loop that averages the micro-batches' means carries the NaN into the step's loss, "
        "although the batch as a whole is fine (section 4). The micro-batch counts and a "
        "NaN with no inf before it point at that 0 / 0; the passing batch check, the "
        "failing replay and fp32 only rule other causes out. Token weighting cures it: each "
        "target weighs 1 / N, and an empty micro-batch adds exactly 0.",
        hints=["Which division in an accumulation loop can be 0 / 0 on a batch that has "
               "targets?",
               "Is a NaN with no inf before it an overflow?"],
        why=["Section 4: a micro-batch with no target has a mean loss of 0 / 0, and the mean "
             "of means carries it into the step's loss.",
             "Section 4: a 0 / 0 makes NaN directly, with no overflow first; diagnose's "
             "locate found it in the loss.",
             "True of this run (section 4), but it only rules out whole-batch data "
             "problems; it points at nothing.",
             "It rules out a transient device fault, but every deterministic cause "
             "replays.",
             "It rules out an overflow of fp16's range, but points at nothing."],
        family_why=["Section 4: the batch as a whole has targets and passes the batch "
                    "check; validate_data does not prevent the NaN.",
                    "Section 4: the loop averages the micro-batches' means and one holds no "
                    "target: 0 / 0; token weighting (1 / N per target) cures it.",
                    "A flipped bit does not come back on a replay (section 5); this NaN "
                    "does.",
                    "Nothing grew: the NaN is a 0 / 0 in the loss, with no overflow, at the "
                    "step of the empty micro-batch.",
                    "locate found the first NaN in the loss, not in a norm's output (Lab 06, "
                    "section 2)."],
    ),
    MultipleChoiceQuestion(
        "14-bit-flip-value",
        "A marginal GPU core flips bit 30, the highest exponent bit, of one fp32 activation "
        "whose value is 0.5. What does the activation become, and what does a replay of "
        "that step from the checkpoint before show?",
        ["about 1.7e38, the exponent raised by 128; the replay comes back finite",
         "inf; the replay is NaN again, since the flip is in the weights now",
         "NaN; the replay is NaN again at the same step",
         "about 1.5e-39, the exponent lowered by 128; the replay comes back finite"],
        answers=0,
        explanation="fp32's exponent sits in bits 30-23, and flipping bit 30 adds or "
        "removes 128. For 0.5 the bit is clear, so it adds 128: 0.5 · 2^128 ≈ 1.7e38, "
        "finite but huge, one value the next ops can turn into inf and NaN. The flip "
        "happened once, on the device: a replay from the checkpoint before, same weights, "
        "batch and RNG, reproduces every step and comes back clean at this one, which is "
        "how diagnose and Megatron-LM's RerunStateMachine tell a transient fault from "
        "dirty data (section 5).",
        hints=["Which part of an fp32 number is bit 30, and is it set for 0.5?",
               "What does the checkpoint before hold, and does the flip happen again?"],
        why=["Section 5: below 1 in magnitude bit 30 is clear, so the flip adds 128 to the "
             "exponent, 0.5 · 2^128 ≈ 1.7e38; the flip is transient, so the replay is "
             "clean.",
             "Section 5: inf comes from a value in [1, 2), whose exponent becomes 255; and "
             "the checkpoint before holds clean weights, so the replay is finite.",
             "Section 5: NaN comes from a value like 1.5, exponent 255 with a non-zero "
             "mantissa; and a replay from the checkpoint before does not flip the bit "
             "again.",
             "Section 5: the exponent drops by 128 for values of 2 and up, whose bit 30 is "
             "set; 0.5 has it clear."],
    ),
]


# --- the triage exercise (section 7): three incidents, one fault family each -----------

FAMILIES = {
    "data": "something in the batch itself: junk sequences, bad ids",
    "accumulation": "the gradient-accumulation loop weighs the targets wrongly",
    "hardware": "the device returned a wrong number once",
}
"""The answers of the triage exercise, by the name a learner answers with."""

EVIDENCE = ("bad step's loss", "exact replay gives the same loss",
            "worst quarter's share of the loss", "targets per micro-batch")
"""The rows the lab prints for each incident, in order."""

CONCENTRATED = 0.5
"""A worst quarter of the sequences carrying more than this share of the loss: a few
sequences carry it (an even batch gives its worst quarter about a third)."""

UNEVEN = 10
"""Micro-batch target counts whose largest is more than this times the smallest."""


def incident_runs() -> dict:
    """The three runs of section 7, built out of sight, each with a fault at a step other
    than its section's: {incident: FaultRun}.

    >>> runs = incident_runs()  # tens of seconds  # doctest: +SKIP
    >>> list(runs), type(runs["incident A"]).__name__  # doctest: +SKIP
    (['incident A', 'incident B', 'incident C'], 'FaultRun')
    """
    from nanlab.faults import run_fault

    return {"incident A": run_fault("accum_mean_of_means", at_step=140, steps=165),
            "incident B": run_fault("bit_flip", at_step=90, steps=100,
                                    stop_when_poisoned=True),
            "incident C": run_fault("repeated_token_shard", at_step=160, steps=175)}


def key_family(evidence: dict) -> str | None:
    """The family one incident's evidence points to, or None when it points nowhere.

    >>> key_family({"exact replay gives the same loss": False,
    ...             "worst quarter's share of the loss": 0.3,
    ...             "targets per micro-batch": [248, 248, 248, 248]})
    'hardware'
    """
    counts = evidence["targets per micro-batch"]
    if not evidence["exact replay gives the same loss"]:
        return "hardware"  # the same state and inputs do not fail again: transient
    if max(counts) > UNEVEN * max(min(counts), 1):
        return "accumulation"  # the loop weighs a short micro-batch's targets up
    if evidence["worst quarter's share of the loss"] > CONCENTRATED:
        return "data"  # a few sequences carry the spike
    return None


def judge_families(got, incidents: dict) -> str | None:
    """None when each incident's family is the one its evidence points to, else one line
    naming the incident and the evidence against the choice (never the answer).

    >>> flip = {"exact replay gives the same loss": False,
    ...         "worst quarter's share of the loss": 0.31,
    ...         "targets per micro-batch": [248, 248, 248, 248]}
    >>> judge_families({"incident B": "hardware"}, {"incident B": flip}) is None
    True
    >>> print(judge_families({"incident B": "data"}, {"incident B": flip}))
    incident B: the exact replay, the same state and batch, did not give the same loss: ...
    """
    if not isinstance(got, dict) or set(got) != set(incidents):
        return (f"return a dict with one family for each of {sorted(incidents)}; got "
                f"{got!r}"[:300])
    for name, evidence in incidents.items():
        pick, key = got[name], key_family(evidence)
        if pick not in FAMILIES:
            return f"{name}: {pick!r} is not one of the FAMILIES: {', '.join(FAMILIES)}"
        if key is None or pick == key:
            continue
        replayed = evidence["exact replay gives the same loss"]
        counts = evidence["targets per micro-batch"]
        share = evidence["worst quarter's share of the loss"]
        if pick == "hardware":
            return (f"{name}: the exact replay gave the same loss: a device fault that "
                    "strikes once would not strike again on the replay")
        if not replayed:
            return (f"{name}: the exact replay, the same state and batch, did not give the "
                    f"same loss: a {pick} fault would fail the same way again")
        if pick == "accumulation":
            return (f"{name}: its micro-batches hold {counts} targets, even: every target "
                    "weighs the same however the loop averages")
        return (f"{name}: its worst quarter of sequences carries {share:.0%} of the loss, "
                "about its share: no few sequences carry the spike. Read the other rows")
    return None
