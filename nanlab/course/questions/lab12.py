"""Lab 12 (12_incidents): its practice questions with their keys, shown by id in the lab."""

from nanlab.course.quiz import MultipleChoiceQuestion

LAB = "12_incidents"

QUESTIONS = [
    MultipleChoiceQuestion(
        "12-palm-replay",
        "PaLM's team fed the batches around a loss spike to an earlier checkpoint, and the "
        "loss did not spike. What does that rule out?",
        ["that the batches alone cause the spike, whatever the model state",
         "that the model state plays any part",
         "that a lower learning rate would help",
         "that the spike can be avoided by skipping data"],
        answers=0,
        explanation="Bad data alone would spike from any state. An earlier state took the "
        "same batches calmly, so the spike needed those batches and that state together "
        "(PaLM section 5.1).",
        hints=["If the data alone were to blame, what would the earlier checkpoint have done "
               "with it?"],
        why=["Section 1: data alone would spike from any state; the earlier state took the "
             "same batches calmly, so the spike needed those batches and that state "
             "together.",
             "The experiment points the other way: the state decided whether the same "
             "batches spiked (section 1).",
             "The replay changed the state, not the LR, so it says nothing about the LR; "
             "OPT's lower LR is another experiment (section 3).",
             "PaLM did avoid its spikes by restarting earlier and skipping batches "
             "(section 1): the replay is consistent with that, it does not rule it out."],
    ),
    MultipleChoiceQuestion(
        "12-skip-came-back",
        "A guard rolled back and skipped the batches around a spike; a few steps later the "
        "loss spiked again on different batches. What is the best next move?",
        ["go back to an earlier checkpoint and lower the LR (or clip tighter), as OPT did",
         "skip more batches around the new spike, and keep the LR",
         "switch fp16 to bf16: a spike on other batches is an overflow",
         "keep training: a spike that comes back will heal by itself"],
        answers=0,
        explanation="A spike that returns on other data says the state, not the data, is "
        "the problem: the updates are too large for it. A lower LR or a lower clipping "
        "threshold shrinks them; skipping more data changes nothing (Lab 12, sections 2-3).",
        hints=["What did changing the batches tell you about the cause?",
               "Which knobs make each update smaller?"],
        why=["Sections 2 and 3: a spike that returns on other data says the state is the "
             "problem; a lower LR or a tighter clip shrinks the updates, as OPT did.",
             "Section 2: on the toy, skipping data alone let the spike come back; only the "
             "LR cut ended it.",
             "A spike on other batches says nothing about range, and section 1's spiky run "
             "is fp32, with no overflow at all.",
             "A spike that keeps coming back is not healing; leave alone only a spike the "
             "model recovers from by itself (section 2)."],
    ),
    MultipleChoiceQuestion(
        "12-leave-it-alone",
        "A scheduler glitch makes one update 10x too large; the loss spikes, then heals "
        "within a few dozen steps. Against leaving the run alone, how did a guard that "
        "rolls back on the spike (recover mode) end, over three seeds?",
        ["worse on every seed: the replay hits the same glitch, the guard goes back "
         "further and cuts the LR, and the run then learns slowly",
         "better on every seed: the rollback undoes the bad update, so the spike is gone",
         "the same: a rollback costs only the few steps it replays",
         "the run stopped: a spike that comes back twice is fatal to the guard"],
        answers=0,
        explanation="The LR is a function of the step: the replayed step hits the glitch "
        "again, the guard counts a repeat, goes one checkpoint further back and cuts the "
        "LR tenfold, and the rest of the run learns slowly. A spike the model heals from "
        "alone is best left alone: alert, find its cause, act only if the loss stays up "
        "(section 2).",
        hints=["What is the LR of the glitched step when the guard replays it?",
               "What did the guard do when the spike came back?"],
        why=["Section 2: the rollback replays the glitched step at the same LR, the spike "
             "returns, and the LR cut that follows slows the run: recover ended above "
             "leaving it alone on every seed.",
             "Section 2: the rollback does undo the bad update, but the replayed step runs "
             "at the same glitched LR and spikes again.",
             "Section 2: that was the skip guard, within 20 % of leaving it alone; the "
             "rollback paid for a repeat and an LR cut.",
             "Section 2: the guard finished every run; after the repeat it went back "
             "further and cut the LR, and it stops only after max_rollbacks (Lab 08, "
             "section 5)."],
    ),
]


# --- the on-call exercise (section 7): two incidents, one remedy each -------------------

REMEDIES = {
    "restart_skip_batches": "PaLM: restart from a checkpoint before the spike and skip the "
                            "batches around it",
    "restart_lower_lr": "OPT: restart from an earlier checkpoint with a lower LR",
    "embedding_layernorm": "BLOOM: add a LayerNorm after the embedding",
    "bf16": "BLOOM: train in bf16 instead of fp16",
}
"""The remedies the big runs used, by the name a learner answers with."""

SPIKE = 3.0
"""A replay "spikes" when its worst loss passes this many times its first losses' median."""

REPLAYS = ("near state, the window", "earlier state, the window", "near state, other batches")
"""The three replays of section 1, the evidence of each incident, in the order printed."""


def incident_runs() -> dict:
    """The two runs of section 7, built out of sight (on call, nobody tells you the cause):
    {name: its Trainer after the run}. Checkpoints every 10 steps, fp32, as section 1's.

    >>> runs = incident_runs()  # tens of seconds  # doctest: +SKIP
    >>> {name: type(trainer).__name__ for name, trainer in runs.items()}  # doctest: +SKIP
    {'run A': 'Trainer', 'run B': 'Trainer'}
    """
    from nanlab.faults import run_fault
    from nanlab.train import TrainConfig, Trainer

    spiky = TrainConfig(steps=300, lr=1e-2, beta2=0.99, schedule="constant",
                        checkpoint_every=10, record_every=0, progress=False, seed=1)
    run_a = Trainer(spiky)
    run_a.run()
    run_b = run_fault("repeated_token_shard", steps=170, checkpoint_every=10).trainer
    return {"run A": run_a, "run B": run_b}


def key_remedy(evidence: dict) -> str | None:
    """The remedy to try first, read from one incident's replays (their rises), or None
    when the near state does not spike again on the window (nothing to decide from).

    >>> key_remedy({"near state, the window": 40.0, "earlier state, the window": 1.2,
    ...             "near state, other batches": 60.0})
    'restart_lower_lr'
    """
    if evidence["near state, other batches"] > SPIKE:
        return "restart_lower_lr"  # the state spikes on any batches: smaller updates
    if evidence["near state, the window"] > SPIKE:
        return "restart_skip_batches"  # only those batches (from that state) spike
    return None


CALM = 2.0
"""At or below this rise a replay stayed calm."""


def accepted(evidence: dict) -> set[str]:
    """The remedies one incident's replays support: its key, or both restarts where the
    window spiked and the replay on other batches rose only a little (between CALM and
    twice SPIKE): the summation order of a machine moves that rise (x3.3 on AVX2
    kernels for run A, x160 on AVX-512), and a small rise supports either reading.

    >>> sorted(accepted({"near state, the window": 30.0, "earlier state, the window": 1.2,
    ...                  "near state, other batches": 2.5}))
    ['restart_lower_lr', 'restart_skip_batches']
    """
    key = key_remedy(evidence)
    if key is None:
        return set(REMEDIES)  # nothing to decide from
    if evidence["near state, the window"] > SPIKE and \
            CALM < evidence["near state, other batches"] <= 2 * SPIKE:
        return {"restart_lower_lr", "restart_skip_batches"}
    return {key}


def judge_remedies(got, incidents: dict) -> str | None:
    """None when each incident's remedy is the one its evidence points to, else one line
    that names the incident and the evidence against the choice (never the answer).

    ``incidents``: {run: {replay: rise, "every loss finite": bool}}, as the lab prints it.

    >>> state = {"near state, the window": 40.0, "earlier state, the window": 1.2,
    ...          "near state, other batches": 60.0, "every loss finite": True}
    >>> judge_remedies({"run A": "restart_lower_lr"}, {"run A": state}) is None
    True
    >>> print(judge_remedies({"run A": "restart_skip_batches"}, {"run A": state}))
    run A: from its near state, batches it never saw spiked too (rise x60.0): ...
    """
    if not isinstance(got, dict) or set(got) != set(incidents):
        return (f"return a dict with one remedy for each of {sorted(incidents)}, like "
                f"{{'run A': '...', 'run B': '...'}}; got {got!r}"[:300])
    for run, evidence in incidents.items():
        pick = got[run]
        near, far, other = (evidence[r] for r in REPLAYS)
        if pick not in REMEDIES:
            return f"{run}: {pick!r} is not one of the REMEDIES: {', '.join(REMEDIES)}"
        if pick in accepted(evidence):
            continue
        if pick == "bf16":
            return (f"{run}: the run is fp32 and every loss stayed finite: there is no "
                    "range to gain from bf16; read its three replays")
        if pick == "embedding_layernorm":
            return (f"{run}: an embedding LayerNorm changes the model, so the run starts "
                    "over from step 0; on call you restart the run you have. Which replay "
                    "says what the spike needs?")
        if pick == "restart_skip_batches":
            return (f"{run}: from its near state, batches it never saw spiked too (rise "
                    f"x{other:.1f}): skipping the window's batches leaves the cause in "
                    "place")
        return (f"{run}: from the same near state, batches it never saw stayed calm (rise "
                f"x{other:.1f}) while the window spiked (x{near:.1f}; from the earlier "
                f"state x{far:.1f}): the spike needs those batches. A lower LR slows every "
                "later step to dodge a few batches")
    return None
