"""Lab 15's final exam: one fault per family from a seed, none named by its config or a
crash, at least one decided only by a replay, finite runs judged by their signature,
answers graded a bounded number of times and the cause shown only after."""

import re

import pytest
from shared_runs import shared_run

from nanlab.analysis.judge import judge
from nanlab.course.mysteries import EXAM_EVIDENCE, ExamMystery, exam_report
from nanlab.errors import NanlabError
from nanlab.faults import FAULTS, fault_config, mystery
from nanlab.faults.mystery import (
    EXAM_FAMILIES,
    EXAM_LEFT_OUT,
    EXAM_ORDER,
    EXAM_SIZE,
    EXAM_TRAPS,
    MAX_ATTEMPTS,
    NAMES_THE_BUG,
    exam_draw,
    exam_run,
)
from nanlab.train.config import TrainConfig

CLAIMED = {"dirty_data", "learning_rate", "fp16_overflow", "softmax_overflow",
           "adam_eps_fp16", "bad_init", "myth", "optimizer_state", "grad_accum",
           "llm_data", "hardware"}
"""Every family the exam draws from, listed by hand: a change to the pool must change this."""
LEFT_OUT_FAMILIES = {"deep_explosion", "tiny_eps",  # slow; its config reads norm_eps: 0.0
                     "masked_attention", "backward_nan",  # new since Lab 15's stored draws
                     "moe_router", "low_precision_scaling"}
SEEDS = range(200)


def test_the_exam_covers_every_family_it_claims_and_says_why_the_rest_is_out():
    assert set(EXAM_FAMILIES) == CLAIMED
    assert {f.family for f in FAULTS.values()} - CLAIMED == LEFT_OUT_FAMILIES
    assert len(EXAM_ORDER) == len(set(EXAM_ORDER))
    assert set(EXAM_ORDER).isdisjoint(EXAM_LEFT_OUT)
    assert set(EXAM_ORDER) | set(EXAM_LEFT_OUT) == set(FAULTS), "a new fault: exam or not?"
    assert all(len(why) > 20 for why in EXAM_LEFT_OUT.values())
    assert set(EXAM_EVIDENCE) == CLAIMED
    drawn = [exam_draw(seed) for seed in SEEDS]
    assert {name for names in drawn for name in names} == set(EXAM_ORDER)
    assert all(len({FAULTS[n].family for n in names}) == EXAM_SIZE for names in drawn)


def test_lab_07s_pool_and_draws_are_unchanged():
    assert mystery.POOL == ("nan_input", "illegal_label", "all_masked", "zero_std",
                            "high_lr", "high_lr_adam", "lr_jump", "no_warmup",
                            "fp16_overflow", "bad_init", "tiny_eps", "softmax_overflow",
                            "position_overflow", "adam_eps_fp16", "dead_relu", "oov_token",
                            "oov_token_masked", "repeated_token_shard")
    assert [mystery.draw(s) for s in range(5)] == ["position_overflow", "high_lr",
                                                   "illegal_label", "no_warmup", "no_warmup"]


def test_the_draw_is_a_pure_function_of_the_seed():
    assert exam_draw(9) == exam_draw(9) == ("oov_token_masked", "adam_unfreeze_spike",
                                            "bit_flip", "accum_mean_of_means", "bad_init",
                                            "high_lr")
    assert len({exam_draw(seed) for seed in SEEDS}) > 150
    assert exam_draw(4, size=5) == exam_draw(4, size=5)
    with pytest.raises(NanlabError, match="seed"):
        exam_draw(-1)
    with pytest.raises(NanlabError, match="size"):
        exam_draw(0, size=len(CLAIMED) + 1)
    with pytest.raises(NanlabError, match="not an exam fault"):
        exam_run("tiny_eps")


def test_every_draw_holds_a_replay_trap_and_a_run_that_stays_finite():
    for seed in SEEDS:
        names = exam_draw(seed)
        assert set(names) & set(EXAM_TRAPS), seed
        assert {FAULTS[n].signature for n in names} & {"spike", "diverge", "stall"}, seed


def test_no_exam_fault_is_named_by_its_config():
    """The config is visible, as in a real incident: no field of it spells out the bug
    (resume_skips), and no norm eps of 0."""
    clean = TrainConfig().to_dict()
    for name in EXAM_ORDER:
        config = fault_config(name).to_dict()
        assert all(config[k] == clean[k] for k in NAMES_THE_BUG), name
        assert config["model"]["norm_eps"] == clean["model"]["norm_eps"], name
        assert FAULTS[name].signature != "error", name  # a crash's message names its op


def _keywords(name: str) -> set[str]:
    fault = FAULTS[name]
    words = {fault.name, fault.family, *fault.name.split("_"), *fault.family.split("_")}
    return {w.lower() for w in words if len(w) > 3 and w not in {"data", "input"}}


@pytest.mark.slow
@pytest.mark.parametrize("name", EXAM_ORDER)
def test_each_exam_run_fails_by_its_signature_and_no_error_names_it(name):
    """Every exam run is judged as its fault's signature (a spike, a divergence or a stall
    with every loss finite included); none crashes, and no error text, if any, holds a
    word of its fault or family."""
    run = shared_run(name, stop_when_poisoned=True, **exam_run(name))
    assert judge(run).kind == FAULTS[name].signature, (name, judge(run).reason)
    assert run.error is None, run.error
    for word in _keywords(name):
        assert not re.search(word, str(run.error or ""), re.I), (name, word)


def _mystery(name: str) -> ExamMystery:
    """The exam mystery of one fault (the seed that draws it first, mystery index)."""
    seed = next(s for s in SEEDS if name in exam_draw(s))
    return ExamMystery(seed, exam_draw(seed).index(name))


def test_a_trap_draw_is_decided_by_a_replay_that_is_finite_but_does_not_learn():
    """high_lr in fp16: AMP off gives a finite run that does not learn (finite alone would
    convict the precision); LR / 10 is finite and learning."""
    m = _mystery("high_lr")
    assert m.run.first_bad_step is not None and m.run.trainer.config.precision == "fp16"
    amp_off = judge(m.replay("amp_off"))
    assert amp_off.first_nonfinite is None and amp_off.kind != "error"
    assert not amp_off.healthy, amp_off.reason
    assert judge(m.replay("lr_div10")).healthy


def test_a_transient_fault_does_not_come_back_in_a_replay():
    """bit_flip: the unchanged replay is clean (a real flipped bit does not repeat), and
    LR / 10, finite but learning too little, does not pass for a cure."""
    m = _mystery("bit_flip")
    assert m.run.first_bad_step == 40
    unchanged = m.replay()
    assert unchanged.first_bad_step is None and judge(unchanged).healthy
    lr_div10 = judge(m.replay("lr_div10"))
    assert lr_div10.first_nonfinite is None and not lr_div10.healthy
    nan = _mystery("nan_input")
    assert nan.replay().first_bad_step == 40  # a fault that reproduces fails again


def test_answers_are_graded_a_bounded_number_of_times_and_the_cause_shown_after():
    m = _mystery("bit_flip")
    assert not m.closed
    with pytest.raises(NanlabError, match="not answered yet"):
        m.reveal()
    assert "not answered yet" in exam_report([m])
    assert "answer with one of" in m.grade("a flipped bit")  # not a family: not an attempt
    assert m.grade(None).startswith("answer with one of") and m.attempts == []
    close = m.grade("dirty_data")  # the same SOP step (the batch check), another family
    assert close.startswith("close (2 attempt(s) left)") and "hardware" not in close
    assert m.grade("dirty_data").startswith("already graded")  # the same answer again
    assert m.grade(" Learning_Rate ").startswith("not this run's family (1 attempt(s) left)")
    assert len(m.attempts) == 2
    assert m.grade("myth").startswith("not this run's family (0 attempt(s) left)")
    assert m.closed and len(m.attempts) == MAX_ATTEMPTS
    assert m.grade("hardware").startswith("no attempts left")  # bounded, even when right
    assert len(m.attempts) == MAX_ATTEMPTS
    shown = m.reveal()
    assert shown["fault"] == "bit_flip" and shown["family"] == "hardware"
    assert not shown["right"] and shown["answers"] == ["dirty_data", "learning_rate", "myth"]
    report = exam_report([m])
    assert "bit_flip (hardware)" in report and "score: 0 of 1 right" in report


def test_a_right_answer_closes_the_mystery_and_stays_right():
    m = _mystery("bit_flip")
    assert m.grade("hardware") is None and m.closed
    assert m.grade("hardware") is None and len(m.attempts) == 1
    assert m.grade("myth") == "already answered right before"
    assert "right at attempt 1" in exam_report([m])
    assert "1 at the first attempt" in exam_report([m])


@pytest.mark.slow
def test_diagnose_agrees_on_the_exams_mean_of_means():
    """The lab says to compare your answers with m.diagnose(): on the exam's mean-of-means
    run (from step 140 of 170, a model that has learned) it names the accumulation loop;
    moved to step 90 it blamed the data."""
    found = _mystery("accum_mean_of_means").diagnose()
    assert found.cause == "grad_accum" and found.fix_verified, found.report()
