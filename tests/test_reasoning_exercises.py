"""The reasoning exercises of Labs 11-14 and 16: a decision read from the lab's own evidence.

Each check (``judge_*`` in ``nanlab/course/questions/labNN.py``) derives its key from the
evidence the lab printed, so it must (1) pass every decision the evidence supports, a
different valid one included, (2) fail a wrong one with a line that points at the evidence
and does not name the answer, and (3) agree with the lab: the lab's stored output, parsed
back, gives the key of the lab's reference answer; and on this CPU the hidden runs, rerun,
show the mechanism each key stands for, checked by ranges (another CPU sums in another
order: no exact step or loss is pinned).
"""

from __future__ import annotations

import math
import re
from pathlib import Path

import nbformat
import numpy as np
import pytest
import torch

from nanlab.course.questions import lab11, lab12, lab13, lab14, lab16
from nanlab.debug.sensitivity import Sweep

ROOT = Path(__file__).resolve().parents[1]


def outputs_of(lab: str, marker: str) -> str:
    """The text the stored solution notebook printed in the code cell holding ``marker``."""
    nb = nbformat.read(ROOT / "solutions" / f"{lab}.ipynb", as_version=4)
    cells = [c for c in nb.cells if c.cell_type == "code" and marker in c.source]
    assert len(cells) == 1, f"{lab}: {len(cells)} cells hold {marker!r}"
    return "".join(o.get("text", "") for o in cells[0].outputs)


# --- Lab 11: ship a recipe and an LR --------------------------------------------------------

LRS = [3e-4, 1e-3, 3e-3, 1e-2, 3e-2, 1e-1, 3e-1]
TOY = {  # final losses shaped like the lab's sweep (a valley; QK-LayerNorm the flattest)
    "baseline": [2.9, 2.16, 1.15, 0.83, 1.2, 2.13, 3.34],
    "QK-LayerNorm": [2.89, 2.09, 1.02, 1.24, 1.54, 1.65, 2.51],
    "no warmup": [2.9, 2.15, 1.21, 0.96, 2.26, 2.64, 3.39],
}


def toy_sweep(losses=TOY, l0=3.47) -> Sweep:
    return Sweep(rows=[{"variant": v, "lr": lr, "final_loss": x, "initial_loss": l0}
                       for v, xs in losses.items() for lr, x in zip(LRS, xs, strict=True)])


@pytest.mark.parametrize("answer", [{"recipe": "QK-LayerNorm", "lr": 3e-3},
                                    {"recipe": "QK-LayerNorm", "lr": 0.01}],
                         ids=["its best LR", "one step higher, still near its best"])
def test_ship_passes_every_robust_choice_with_margin(answer):
    assert lab11.judge_ship(answer, toy_sweep()) is None


@pytest.mark.parametrize(("answer", "evidence"), [
    ({"recipe": "baseline", "lr": 1e-2}, "LR sensitivity is 1."),
    ({"recipe": "QK-LayerNorm", "lr": 3e-2}, "ended at 1.54, 0.52 above its best"),
    ({"recipe": "QK-LayerNorm", "lr": 1e-3}, "ended at 2.09"),
    ({"recipe": "QK-LayerNorm", "lr": 3e-1}, "ended at 2.51"),
    ({"recipe": "QK-LayerNorm", "lr": 2e-3}, "not on the sweep's grid"),
    ({"recipe": "QK-LayerNorm", "lr": "3e-3"}, "a number of the grid"),
    ({"recipe": "qk norm", "lr": 3e-3}, "not a recipe of the sweep"),
    ({"recipe": "QK-LayerNorm"}, "keys 'recipe' and 'lr'"),
])
def test_ship_fails_a_wrong_choice_pointing_at_the_sweep(answer, evidence):
    message = lab11.judge_ship(answer, toy_sweep())
    assert message and evidence in message, message


def test_ship_asks_for_margin_above_the_chosen_lr():
    """The LR above the choice failing (near the loss at init) is no margin; the top of
    the grid has no run above it."""
    steep = {"QK-LayerNorm": [2.89, 2.09, 1.3, 1.02, 1.1, 3.3, 3.4], **{
        k: v for k, v in TOY.items() if k != "QK-LayerNorm"}}
    message = lab11.judge_ship({"recipe": "QK-LayerNorm", "lr": 3e-2}, toy_sweep(steep))
    assert "one grid step above yours, ended at 3.30" in message
    flat = {"QK-LayerNorm": [2.0, 1.5, 1.2, 1.1, 1.05, 1.0, 1.0], **{
        k: v for k, v in TOY.items() if k != "QK-LayerNorm"}}
    assert "top of the grid" in lab11.judge_ship({"recipe": "QK-LayerNorm", "lr": 3e-1},
                                                 toy_sweep(flat))
    assert lab11.judge_ship({"recipe": "QK-LayerNorm", "lr": 1e-1}, toy_sweep(flat)) is None


def test_ship_follows_the_sweep_not_a_fixed_recipe():
    """Where another recipe is the flattest, QK-LayerNorm fails and that one passes."""
    other = {**TOY, "independent decay 1e-3": [1.3, 1.2, 1.1, 1.0, 1.05, 1.1, 1.3]}
    assert "another recipe's is lower" in lab11.judge_ship(
        {"recipe": "QK-LayerNorm", "lr": 3e-3}, toy_sweep(other))
    assert lab11.judge_ship({"recipe": "independent decay 1e-3", "lr": 1e-2},
                            toy_sweep(other)) is None


def test_ship_key_agrees_with_the_labs_printed_sweep():
    """The sweep table Lab 11 printed, parsed back (3 significant digits; the loss at init
    taken as ln 32, the toy's vocabulary), passes the lab's reference answer."""
    text = outputs_of("11_lr_sensitivity", "print(sweep.table())")
    rows = []
    for line in text.splitlines()[1:]:
        parts = line.split()
        if len(parts) < 9:
            continue
        rows.append({"variant": " ".join(parts[:-8]), "lr": float(parts[-8]),
                     "final_loss": float(parts[-7]), "initial_loss": math.log(32)})
    sweep = Sweep(rows=rows)
    assert len(sweep.variants()) == 6 and len(rows) == 42
    assert lab11.judge_ship({"recipe": "QK-LayerNorm", "lr": 3e-3}, sweep) is None
    assert lab11.judge_ship({"recipe": "baseline", "lr": 1e-2}, sweep) is not None


# --- Lab 12: the first remedy of two incidents ----------------------------------------------

STATE = {"near state, the window": 115.0, "earlier state, the window": 1.2,
         "near state, other batches": 160.0, "every loss finite": True}
DATA = {"near state, the window": 5.5, "earlier state, the window": 1.4,
        "near state, other batches": 1.1, "every loss finite": True}
REMEDY_KEY = {"run A": "restart_lower_lr", "run B": "restart_skip_batches"}


def test_remedies_pass_the_right_decision_for_each_incident():
    assert lab12.judge_remedies(REMEDY_KEY, {"run A": STATE, "run B": DATA}) is None
    # the same evidence under other names: the key follows the evidence, not the name
    assert lab12.judge_remedies({"run A": "restart_skip_batches", "run B": "restart_lower_lr"},
                                {"run A": DATA, "run B": STATE}) is None


@pytest.mark.parametrize(("answer", "evidence"), [
    ({"run A": "restart_skip_batches", "run B": "restart_skip_batches"},
     "run A: from its near state, batches it never saw spiked too (rise x160.0)"),
    ({"run A": "restart_lower_lr", "run B": "restart_lower_lr"},
     "run B: from the same near state, batches it never saw stayed calm (rise x1.1)"),
    ({"run A": "bf16", "run B": "restart_skip_batches"}, "run A: the run is fp32"),
    ({"run A": "embedding_layernorm", "run B": "restart_skip_batches"},
     "run A: an embedding LayerNorm changes the model"),
    ({"run A": "lower the LR", "run B": "restart_skip_batches"}, "not one of the REMEDIES"),
    ({"run A": "restart_lower_lr"}, "one remedy for each"),
])
def test_remedies_fail_a_wrong_decision_pointing_at_the_replays(answer, evidence):
    message = lab12.judge_remedies(answer, {"run A": STATE, "run B": DATA})
    assert message and evidence in message, message
    wrong_run = message.split(":")[0]
    if wrong_run in REMEDY_KEY and "not one of" not in message:
        assert REMEDY_KEY[wrong_run] not in message  # points at evidence, not the answer


def parse_incidents(text: str) -> dict:
    incidents, run = {}, None
    for line in text.splitlines():
        if m := re.match(r"^(run \w) \(fp32\)", line):
            run = incidents.setdefault(m[1], {})
        elif run is not None and (m := re.match(r"^   (.+?)\s+rise x([\d.]+)$", line)):
            run[m[1]] = float(m[2])
        elif run is not None and (m := re.match(r"^   every loss finite\s+(\w+)$", line)):
            run["every loss finite"] = m[1] == "True"
        elif line.startswith("REMEDIES"):
            run = None
    return incidents


def test_remedy_key_agrees_with_the_labs_printed_replays():
    incidents = parse_incidents(outputs_of("12_incidents", "incident_runs()"))
    assert set(incidents) == {"run A", "run B"}
    assert {run: lab12.key_remedy(ev) for run, ev in incidents.items()} == REMEDY_KEY
    assert lab12.judge_remedies(REMEDY_KEY, incidents) is None


def rise(losses, first=10):
    return float(np.max(losses) / np.median(losses[:first]))


def test_the_hidden_incidents_show_their_mechanism_on_this_cpu():
    """Run A is the spiky recipe (state alone: any batches spike from the near state);
    run B a junk shard (only the window spikes, only from the near state)."""
    torch.set_num_threads(1)
    evidence = {}
    for name, run in lab12.incident_runs().items():
        by_step = {r["step"]: r["loss"] for r in run.record.steps}
        losses = np.array([by_step[s] for s in sorted(by_step)])
        spike = next(t for t in range(40, len(losses))
                     if losses[t] > 5.0 * np.median(losses[t - 20:t]))
        near = run.checkpoints.nearest(spike - 15)
        far = run.checkpoints.nearest(near - 100)
        window = list(range(near, spike + 15))

        def replay(start, batches, run=run):
            run.restore(start)
            return np.array([run.train_step(batch_index=b, record_layers=False).loss_value
                             for b in batches])

        evidence[name] = {"near state, the window": rise(replay(near, window)),
                          "earlier state, the window": rise(replay(far, window)),
                          "near state, other batches": rise(
                              replay(near, range(1000, 1000 + len(window))))}
        assert np.isfinite(losses).all()
    a, b = evidence["run A"], evidence["run B"]
    # the state spikes on batches it never saw (x160 on AVX-512 kernels, x3.3 on AVX2)
    assert a["near state, the window"] > 10 and a["near state, other batches"] > lab12.CALM
    assert b["near state, the window"] > 3 > 2 > b["near state, other batches"]
    assert b["earlier state, the window"] < 2
    assert all(REMEDY_KEY[run] in lab12.accepted(ev) for run, ev in evidence.items())
    assert lab12.accepted(b) == {"restart_skip_batches"}


# --- Lab 13: which state did each resume lose -----------------------------------------------

LATE = {"LR saved in the checkpoint": 1.1e-3, "LR after the restart": 2.5e-4,
        "LR 20 steps later": 5e-3, "peak / loss before": 12.0, "steps to the peak": 18}
AT_ONCE = {"LR saved in the checkpoint": 8e-4, "LR after the restart": 8e-4,
           "LR 20 steps later": 5e-4, "peak / loss before": 11.0, "steps to the peak": 1}
CALM = {"LR saved in the checkpoint": 2.4e-3, "LR after the restart": 2.4e-3,
        "LR 20 steps later": 1.6e-3, "peak / loss before": 1.0, "steps to the peak": 2}
LOST_KEY = {"resume P": "lr_schedule", "resume Q": "adam_state", "resume R": "nothing"}
RESUMES = {"resume P": LATE, "resume Q": AT_ONCE, "resume R": CALM}


def test_lost_state_passes_the_right_decisions_whatever_the_names():
    assert lab13.judge_lost(LOST_KEY, RESUMES) is None
    swapped = {"resume P": AT_ONCE, "resume Q": CALM, "resume R": LATE}
    assert lab13.judge_lost({"resume P": "adam_state", "resume Q": "nothing",
                             "resume R": "lr_schedule"}, swapped) is None


@pytest.mark.parametrize(("run", "pick", "evidence"), [
    ("resume P", "adam_state", "is not the LR the checkpoint saved (1.10e-03)"),
    ("resume P", "nothing", "rose to 12.0x"),
    ("resume P", "rng", "cannot explain a loss 12.0x"),
    ("resume Q", "lr_schedule", "is the LR the checkpoint saved (8.00e-04)"),
    ("resume Q", "nothing", "rose to 11.0x"),
    ("resume R", "adam_state", "stayed within 1.0x"),
    ("resume R", "weights", "not one of LOST"),
])
def test_lost_state_fails_a_wrong_decision_pointing_at_lr_or_loss(run, pick, evidence):
    message = lab13.judge_lost({**LOST_KEY, run: pick}, RESUMES)
    assert message and message.startswith(run) and evidence in message, message
    assert LOST_KEY[run] not in message or "not one of" in message


def parse_resumes(text: str) -> dict:
    resumes, run = {}, None
    for line in text.splitlines():
        if m := re.match(r"^(resume \w): restarted", line):
            run = resumes.setdefault(m[1], {})
        elif run is not None and (m := re.match(r"^   (.+?)\s+([-\d.e+]+)$", line)):
            run[m[1]] = float(m[2])
        elif line.startswith("LOST"):
            run = None
    return resumes


def test_lost_state_key_agrees_with_the_labs_printed_resumes():
    resumes = parse_resumes(outputs_of("13_optimizer_state", "resumed_runs()"))
    assert set(resumes) == set(LOST_KEY)
    assert {run: lab13.key_lost(ev) for run, ev in resumes.items()} == LOST_KEY


def test_the_hidden_resumes_lose_what_the_key_says_on_this_cpu():
    """The key read from each run's LR and loss is the state its resume left out (the
    restart event, which the lab does not show, says which)."""
    torch.set_num_threads(1)
    named = {("scheduler",): "lr_schedule", ("optimizer",): "adam_state", (): "nothing"}
    for name, run in lab13.resumed_runs().items():
        event = next(e for e in run.record.events if e["kind"] == "restart")
        at = event["step"]
        saved = run.trainer.checkpoints.load(run.trainer.checkpoints.nearest(at))
        losses, lrs = run.record.losses(), run.record.column("lr")
        level = np.median(losses[at - 10:at])
        top = at + int(np.argmax(losses[at:at + 40]))
        evidence = {"LR saved in the checkpoint": saved["scheduler"]["_last_lr"][0],
                    "LR after the restart": float(lrs[at]),
                    "peak / loss before": float(losses[top] / level),
                    "steps to the peak": top - at}
        assert lab13.key_lost(evidence) == named[tuple(event["fresh"])] == LOST_KEY[name]


# --- Lab 14: triage three incidents ---------------------------------------------------------

ACCUM = {"exact replay gives the same loss": True, "worst quarter's share of the loss": 0.28,
         "targets per micro-batch": [1, 248, 248, 248]}
FLIP = {"exact replay gives the same loss": False, "worst quarter's share of the loss": 0.31,
        "targets per micro-batch": [248, 248, 248, 248]}
JUNK = {"exact replay gives the same loss": True, "worst quarter's share of the loss": 0.91,
        "targets per micro-batch": [248, 248, 248, 248]}
FAMILY_KEY = {"incident A": "accumulation", "incident B": "hardware", "incident C": "data"}
TRIAGE = {"incident A": ACCUM, "incident B": FLIP, "incident C": JUNK}


def test_triage_passes_the_right_families_whatever_the_order():
    assert lab14.judge_families(FAMILY_KEY, TRIAGE) is None
    assert lab14.judge_families({"incident A": "data", "incident B": "accumulation",
                                 "incident C": "hardware"},
                                {"incident A": JUNK, "incident B": ACCUM,
                                 "incident C": FLIP}) is None


@pytest.mark.parametrize(("incident", "pick", "evidence"), [
    ("incident A", "data", "carries 28% of the loss"),
    ("incident A", "hardware", "the exact replay gave the same loss"),
    ("incident B", "data", "did not give the same loss"),
    ("incident B", "accumulation", "did not give the same loss"),
    ("incident C", "accumulation", "hold [248, 248, 248, 248] targets, even"),
    ("incident C", "hardware", "the exact replay gave the same loss"),
    ("incident C", "dirty data", "not one of the FAMILIES"),
])
def test_triage_fails_a_wrong_family_pointing_at_the_evidence(incident, pick, evidence):
    message = lab14.judge_families({**FAMILY_KEY, incident: pick}, TRIAGE)
    assert message and message.startswith(incident) and evidence in message, message


def parse_triage(text: str) -> dict:
    triage, name = {}, None
    for line in text.splitlines():
        if m := re.match(r"^(incident \w)$", line):
            name = triage.setdefault(m[1], {})
        elif name is not None and line.startswith("   "):
            row, value = re.split(r"\s{2,}", line.strip(), maxsplit=1)
            if row == "exact replay gives the same loss":
                name[row] = value == "True"
            elif row == "worst quarter's share of the loss":
                name[row] = float(value.rstrip("%")) / 100
            elif row == "targets per micro-batch":
                name[row] = [int(n) for n in re.findall(r"\d+", value)]
        elif line.startswith("FAMILIES"):
            name = None
    return triage


def test_triage_key_agrees_with_the_labs_printed_evidence():
    triage = parse_triage(outputs_of("14_large_run_faults", "incident_runs()"))
    assert set(triage) == set(FAMILY_KEY)
    assert {name: lab14.key_family(ev) for name, ev in triage.items()} == FAMILY_KEY


def test_the_hidden_incidents_are_the_families_the_key_says_on_this_cpu():
    """Each hidden run's fault belongs to the family its evidence gives, and the evidence
    sits far from the thresholds: a replay that differs only for the flip, a micro-batch
    with 1 target only in the accumulation run, most of the loss on a quarter of the
    sequences only in the junk shard."""
    from nanlab.debug.attribution import per_sample_loss
    from nanlab.faults import get_fault
    from nanlab.train.accum import split_batch, target_count

    torch.set_num_threads(1)
    family = {"grad_accum": "accumulation", "hardware": "hardware", "llm_data": "data"}
    for name, run in lab14.incident_runs().items():
        losses = np.array(run.record.losses())
        at = next(t for t in range(20, len(losses)) if not np.isfinite(losses[t])
                  or losses[t] > 2.0 * np.median(losses[t - 10:t]))
        tr = run.trainer
        kept = tr.checkpoints.nearest(at)
        batch = tr.batches(at)
        alone = per_sample_loss(tr.model, batch, tr.loss_fn,
                                state=tr.checkpoints.load(kept)["model"])
        scored = np.sort([s.loss for s in alone.samples if np.isfinite(s.loss)])[::-1]
        tr.restore(kept)
        again = [tr.train_step(batch_index=b, record_layers=False).loss_value
                 for b in range(kept, at + 1)][-1]
        evidence = {"exact replay gives the same loss":
                    np.array_equal(again, losses[at], equal_nan=True),
                    "worst quarter's share of the loss":
                    float(scored[:len(scored) // 4].sum() / scored.sum()),
                    "targets per micro-batch": [target_count(m) for m in split_batch(batch, 4)]}
        want = family[get_fault(run.fault).family]
        assert lab14.key_family(evidence) == want == FAMILY_KEY[name]
        share = evidence["worst quarter's share of the loss"]
        assert share > 0.7 if want == "data" else share < 0.45


# --- Lab 16: the first change for three incidents --------------------------------------------

NAN = float("nan")
FP8 = {"first non-finite step": 0, "loss there": 3.475, "grad norm there": NAN,
       "FP8 casts with an inf scale there": 32, "largest router logit there": None,
       "router dtype": None}
ROUTER = {"first non-finite step": 30, "loss there": NAN, "grad norm there": NAN,
          "FP8 casts with an inf scale there": 0, "largest router logit there": 11.3,
          "router dtype": "float16"}
WHERE = {"first non-finite step": 25, "loss there": 1.639, "grad norm there": NAN,
         "FP8 casts with an inf scale there": 0, "largest router logit there": None,
         "router dtype": None}
CHANGE_KEY = {"incident A": "amax_floor", "incident B": "router_fp32",
              "incident C": "double_where"}
INCIDENTS = {"incident A": FP8, "incident B": ROUTER, "incident C": WHERE}


def test_first_change_passes_the_right_changes_whatever_the_order():
    assert lab16.judge_changes(CHANGE_KEY, INCIDENTS) is None
    assert lab16.judge_changes({"incident A": "double_where", "incident B": "amax_floor",
                                "incident C": "router_fp32"},
                               {"incident A": WHERE, "incident B": FP8,
                                "incident C": ROUTER}) is None


@pytest.mark.parametrize(("incident", "pick", "evidence"), [
    ("incident A", "double_where", "another row says"),   # finite loss, NaN grad: tempting
    ("incident A", "grad_clip", "grad norm there is nan"),
    ("incident B", "lr_div10", "not the arithmetic"),      # the logits grew: tempting
    ("incident B", "double_where", "the loss itself is nan"),
    ("incident B", "skip_step", "the same code meets the same arithmetic"),
    ("incident C", "grad_clip", "clipping multiplies every gradient"),
    ("incident C", "amax_floor", "no FP8 cast had an inf scale"),
    ("incident C", "router_fp32", "no router logit"),
    ("incident C", "amp_off", "not one of the CHANGES"),
])
def test_first_change_fails_a_tempting_wrong_change_pointing_at_the_evidence(incident, pick,
                                                                            evidence):
    message = lab16.judge_changes({**CHANGE_KEY, incident: pick}, INCIDENTS)
    assert message and message.startswith(incident) and evidence in message, message
    if pick in lab16.CHANGES:  # (an unknown name gets the list of every change)
        assert CHANGE_KEY[incident] not in message.split(":", 1)[1]


def test_a_router_logit_that_fits_its_dtype_points_nowhere_near_the_router():
    fits = {**ROUTER, "largest router logit there": 9.5, "loss there": 2.0}
    assert lab16.key_change(fits) == "double_where"
    assert lab16.key_change({**ROUTER, "router dtype": "bfloat16"}) is None


def test_an_fp8_cast_past_its_max_points_to_current_scaling_not_the_double_where():
    """Section 3's stale amax has a finite loss and a NaN gradient too: the FP8 row, not
    the menu, tells it from a backward-only NaN (a learner found the two confusable)."""
    stale = {**WHERE, "FP8 casts past the format's max there": 1}
    assert lab16.key_change(stale) == "current_scaling"
    message = lab16.judge_changes({**CHANGE_KEY, "incident C": "double_where"},
                                  {**INCIDENTS, "incident C": stale})
    assert message and "another row says" in message
    assert lab16.judge_changes({**CHANGE_KEY, "incident C": "current_scaling"},
                               INCIDENTS).startswith("incident C: no FP8 cast went past")


def test_the_stale_amax_run_itself_points_to_current_scaling():
    from nanlab.faults import run_fault

    torch.set_num_threads(1)
    run = run_fault("fp8_stale_amax", steps=5, stop_when_poisoned=True)
    assert lab16.key_change(lab16.evidence_of(run)) == "current_scaling"


def parse_lab16_incidents(text: str) -> dict:
    found, name = {}, None
    for line in text.splitlines():
        if m := re.match(r"^(incident \w)$", line):
            name = found.setdefault(m[1], {})
        elif name is not None and line.startswith("   "):
            row, value = re.split(r"\s{2,}", line.strip(), maxsplit=1)
            name[row] = (None if value == "None" else value if row == "router dtype"
                         else float(value))
        elif line.startswith("CHANGES"):
            name = None
    return found


def test_first_change_key_agrees_with_the_labs_printed_evidence():
    printed = parse_lab16_incidents(outputs_of("16_new_failure_modes", "incident_runs()"))
    assert set(printed) == set(CHANGE_KEY)
    assert {name: lab16.key_change(ev) for name, ev in printed.items()} == CHANGE_KEY


def test_lab16_hidden_incidents_show_their_mechanism_on_this_cpu():
    """Each hidden run is the fault its key stands for, far from the thresholds: an inf
    scale only in the FP8 run, a float16 router logit past log(65504) only in the router
    run (whose loss is NaN), a finite loss with a NaN gradient in the where run."""
    from nanlab.faults import get_fault

    torch.set_num_threads(1)
    cure = {"fp8_amax_floor": "amax_floor", "router_fp32": "router_fp32",
            "double_where": "double_where"}
    for name, run in lab16.incident_runs().items():
        ev = lab16.evidence_of(run)
        assert lab16.key_change(ev) == cure[get_fault(run.fault).cure] == CHANGE_KEY[name]
        if name == "incident B":
            assert ev["largest router logit there"] > math.log(65504)
            assert not math.isfinite(ev["loss there"])
        else:
            assert math.isfinite(ev["loss there"]) and not math.isfinite(ev["grad norm there"])
        assert (ev["FP8 casts with an inf scale there"] > 0) == (name == "incident A")
