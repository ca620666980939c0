"""The question bank, its validation, the answer frameworks, the mock interview, the cheat sheet."""

from __future__ import annotations

import copy
import json
import re

import pytest
from shared_runs import shared_run

import nanlab.interview
from nanlab.course.rubric import WRONG_CLAIM_CAP
from nanlab.errors import NanlabError
from nanlab.interview import (
    FRAMEWORKS,
    LEVELS,
    TOPICS,
    BankError,
    MockInterview,
    answer_framework,
    bank_counts,
    cheat_sheet,
    check_bank,
    default_bank_path,
    frameworks_markdown,
    get_question,
    load_bank,
    parse_bank,
    resolve,
)

CJK = re.compile(r"[\u4e00-\u9fff]")


@pytest.fixture(scope="module")
def bank():
    return load_bank()


@pytest.fixture()
def raw():
    """The shipped bank as raw JSON entries (topic files in TOPICS order), to break in tests."""
    files = [default_bank_path() / f"{t}.json" for t in TOPICS]
    data = [e for f in files for e in json.loads(f.read_text(encoding="utf-8"))]
    return copy.deepcopy(data)


def problems_of(entries) -> list[str]:
    with pytest.raises(BankError) as info:
        parse_bank(entries)
    assert str(info.value).count("\n- ") == len(info.value.problems)
    return info.value.problems



# ------------------------------------------------------------------------------- the bank


def test_bank_size_topics_and_levels(bank):
    assert len(bank) >= 36
    counts = bank_counts(bank)
    assert all(n >= 3 for n in counts["topic"].values()), counts
    assert all(n >= 8 for n in counts["level"].values()), counts
    assert set(counts["topic"]) == set(TOPICS) and set(counts["level"]) == set(LEVELS)


def test_one_file_per_topic():
    folder = default_bank_path()
    assert sorted(p.name for p in folder.glob("*.json")) == sorted(f"{t}.json" for t in TOPICS)
    for topic in TOPICS:
        entries = json.loads((folder / f"{topic}.json").read_text(encoding="utf-8"))
        assert isinstance(entries, list) and entries, topic
        assert {e["topic"] for e in entries} == {topic}, f"{topic}.json holds another topic"


def test_every_question_is_complete(bank):
    ids = {q.id for q in bank}
    for q in bank:
        assert q.key_points, q.id
        assert q.common_mistakes, q.id
        assert 1 <= len(q.follow_ups) <= 3, q.id
        assert CJK.search(q.question_zh), q.id
        assert len(CJK.findall(q.answer)) >= 2, f"{q.id}: Chinese terms beside English ones"
        names = {p.name for p in q.key_points}
        for f in q.follow_ups:
            assert set(f.targets) <= names, q.id
            target = resolve(f, bank)
            assert target.key_points, target.id
            if f.id is not None:
                assert f.id in ids and f.id != q.id


def test_most_key_points_have_chinese_phrases(bank):
    points = [p for q in bank for p in q.key_points]
    with_zh = [p for p in points if any(CJK.search(s) for s in p.synonyms)]
    assert len(with_zh) / len(points) > 0.75


def test_every_model_answer_earns_full_marks_on_its_own_rubric(bank):
    questions = list(bank) + [f.question for q in bank for f in q.follow_ups if f.question]
    for q in questions:
        result = q.score(q.answer)
        assert result.score == 1.0, (q.id, result.missing)


def _all_questions():
    bank = load_bank()
    return list(bank) + [f.question for q in bank for f in q.follow_ups if f.question]


@pytest.mark.parametrize("question", _all_questions(), ids=lambda q: q.id)
def test_every_question_fails_its_wrong_answers(question):
    """Each question lists wrong claims, each with a sentence that makes it: that sentence
    fails alone, and added to the model answer it caps the score below any pass mark."""
    assert question.must_not, f"{question.id}: no wrong claims, so a wrong answer can pass"
    for claim in question.must_not:
        assert claim.example, (question.id, claim.claim)
        alone = question.score(claim.example)
        assert claim.claim in alone.wrong and alone.score < 0.6, (question.id, claim.claim)
        spoiled = question.score(question.answer + " " + claim.example)
        assert spoiled.score <= WRONG_CLAIM_CAP, (question.id, claim.claim, spoiled.score)
        assert claim.claim in spoiled.feedback


def test_bank_covers_the_article_and_its_corrections(bank):
    text = " ".join(q.question + " " + q.answer for q in bank)
    for needle in [
        "65504",
        "6e-8",
        "2^16",
        "2000",
        "0.5",
        "inf - inf",
        "1e-8",
        "1e-4",
        "log Z",
        "1e4",
        "Wortsman",
        "128",
        "PaLM",
        "100 steps",
        "200 to 500",
        "OLMo-core",
        "Megatron-LM",
        "DeepSpeed",
        "all-reduce",
        "detect_anomaly",
        "2.5-3x",
        "code commit",
        "data version",
        "seed",
        "hint, not proof",
        "dead ReLU",
        "QK-LayerNorm",
        "z-loss",
        "BF16",
        "stall",
    ]:
        assert needle in text, needle
    # the two follow-ups quoted by the article
    assert "how many batches" in get_question("confirm-no-recur", bank).question.lower()
    under_over = get_question("fp16-under-over", bank)
    assert "underflow" in under_over.question and "overflow" in under_over.question


def test_modern_amp_api_only(bank):
    for q in bank:
        for sentence in re.split(r"(?<=\.)\s", q.answer):
            if "torch.cuda.amp" in sentence:
                assert "deprecated" in sentence, q.id
    assert "torch.amp.autocast(device_type=" in get_question("amp-api", bank).answer
    assert "torch.amp.GradScaler" in get_question("gradscaler", bank).answer


def test_get_question_errors_name_the_id(bank):
    with pytest.raises(NanlabError, match="'no-such-id' not found"):
        get_question("no-such-id", bank)
    inline = get_question("data-zero-std/follow-up-2", bank)
    assert inline.parent == "data-zero-std"


# ------------------------------------------------------------------------------ validation


def test_load_bank_reads_a_file_and_accepts_a_bare_list(tmp_path, raw):
    path = tmp_path / "bank.json"
    path.write_text(json.dumps(raw, ensure_ascii=False), encoding="utf-8")
    assert len(load_bank(path)) == len(raw)


def test_load_bank_reads_a_folder_and_names_the_file_of_each_problem(tmp_path, raw):
    (tmp_path / "data.json").write_text(json.dumps(raw[:4]), encoding="utf-8")
    (tmp_path / "mine.json").write_text(json.dumps({"questions": raw[4:]}), encoding="utf-8")
    assert [q.id for q in load_bank(tmp_path)] == [e["id"] for e in raw]
    raw[5]["level"] = "intern"
    (tmp_path / "mine.json").write_text(json.dumps(raw[4:]), encoding="utf-8")
    with pytest.raises(BankError) as info:
        load_bank(tmp_path)
    (msg,) = info.value.problems
    assert msg.startswith(f"mine.json[1] (id '{raw[5]['id']}'): field 'level' = 'intern'")
    assert str(tmp_path) in str(info.value)


def test_invalid_json_names_line_and_column(tmp_path):
    path = tmp_path / "broken.json"
    path.write_text('{"questions": [\n  {"id": "a",}\n]}', encoding="utf-8")
    with pytest.raises(BankError, match=r"not valid JSON at line 2, column"):
        load_bank(path)


def test_missing_file_is_a_clear_error(tmp_path):
    with pytest.raises(BankError, match="cannot read the file"):
        load_bank(tmp_path / "nope.json")


def test_unknown_topic(raw):
    raw[2]["topic"] = "learning_rate"
    (msg,) = problems_of(raw)
    qid = raw[2]["id"]
    assert msg.startswith(f"questions[2] (id '{qid}'): field 'topic' = 'learning_rate'")
    assert "choose one of 'data', 'precision', 'lr'" in msg


def test_unknown_level(raw):
    raw[0]["level"] = "intern"
    (msg,) = problems_of(raw)
    assert "field 'level' = 'intern' is not allowed" in msg
    assert "'new_grad', 'experienced', 'senior'" in msg


def test_missing_key_points(raw):
    del raw[5]["key_points"]
    msgs = problems_of(raw)
    assert any("questions[5]" in m and "missing field 'key_points'" in m for m in msgs)


def test_empty_key_points_and_bad_synonyms(raw):
    raw[1]["key_points"] = []
    raw[4]["key_points"][0]["synonyms"] = "isfinite"
    raw[6]["key_points"][1]["synonyms"] = ["..."]
    msgs = problems_of(raw)
    assert any(
        "questions[1]" in m and "'key_points' = [] must be a non-empty list" in m for m in msgs
    )
    assert any(
        "questions[4]" in m and "key_points[0]: field 'synonyms' = 'isfinite'" in m for m in msgs
    )
    assert any("questions[6]" in m and "could never match" in m for m in msgs)


def test_follow_up_id_not_found(raw):
    raw[3]["follow_ups"][0]["id"] = "does-not-exist"
    (msg,) = problems_of(raw)
    assert "follow_ups[0]: follow-up id 'does-not-exist' not found in the bank" in msg


def test_follow_up_target_must_be_a_key_point(raw):
    raw[0]["follow_ups"][0]["targets"] = ["something else"]
    (msg,) = problems_of(raw)
    assert "target 'something else' is not a key point of this question; allowed:" in msg


def test_follow_up_count_and_inline_fields(raw):
    raw[0]["follow_ups"] = []
    raw[1]["follow_ups"] = raw[1]["follow_ups"] * 4
    inline = {
        "question": "Why?",
        "question_zh": "为什么？",
        "answer": "Because (因为).",
        "targets": [raw[2]["key_points"][0]["name"]],
    }
    raw[2]["follow_ups"] = [inline]
    msgs = problems_of(raw)
    assert any(m.startswith("questions[0]") and "must be a list of 1 to 3" in m for m in msgs)
    assert any(m.startswith("questions[1]") and "must be a list of 1 to 3" in m for m in msgs)
    assert any(m.startswith("questions[2]") and "missing field 'key_points'" in m for m in msgs)


def test_duplicate_id(raw):
    raw[7]["id"] = raw[0]["id"]
    msgs = problems_of(raw)
    assert any(
        f"questions[7] (id '{raw[0]['id']}'): duplicate id; questions[0] already uses it" in m
        for m in msgs
    )


def test_unknown_field_and_non_object_entry(raw):
    raw[0]["topc"] = "data"
    raw.append("just a string")
    msgs = problems_of(raw)
    assert any("unknown field 'topc'" in m for m in msgs)
    assert any(m.startswith(f"questions[{len(raw) - 1}]: expected an object") for m in msgs)


def test_chinese_is_required_where_promised(raw):
    raw[0]["question_zh"] = "no chinese here"
    raw[1]["answer"] = "An answer with no Chinese terms at all."
    msgs = problems_of(raw)
    assert any("question_zh" in m and "has no Chinese characters" in m for m in msgs)
    assert any("'answer' has no Chinese key terms" in m for m in msgs)


def test_every_problem_is_reported_at_once(raw):
    raw[0]["topic"] = "x"
    raw[1]["level"] = "y"
    del raw[2]["answer"]
    assert len(problems_of(raw)) == 3
    assert len(check_bank(raw)) == 3


def test_empty_bank():
    assert problems_of([]) == ["the bank has no questions"]
    assert problems_of({"questions": []}) == ["the bank has no questions"]


# ------------------------------------------------------------------------------ frameworks


def test_frameworks_cover_three_levels_with_templates_and_mistakes():
    assert set(FRAMEWORKS) == set(LEVELS)
    for level in LEVELS:
        md = answer_framework(level)
        assert "What the interviewer wants to hear" in md
        assert "Fill-in template" in md and "____" in md
        assert "Typical mistakes" in md
    assert "梯度爆炸" in answer_framework("new_grad")
    assert "No numbers" in answer_framework("experienced")
    senior = answer_framework("senior")
    assert "Detached from a concrete model" in senior
    assert "No prevention or monitoring story" in senior
    assert frameworks_markdown().count("### ") == 3


def test_framework_rejects_unknown_level():
    with pytest.raises(NanlabError, match="level='intern' is not allowed"):
        answer_framework("intern")


# -------------------------------------------------------------------------- mock interview


def asked(mock: MockInterview, answer: str = "") -> list[str]:
    ids = []
    while not mock.done:
        ids.append(mock.current.id)
        mock.answer(answer)
    return ids


def test_same_seed_same_interview(bank):
    first = asked(MockInterview(level="experienced", seed=7, bank=bank))
    again = asked(MockInterview(level="experienced", seed=7, bank=bank))
    assert first == again
    others = {tuple(asked(MockInterview(level="experienced", seed=s, bank=bank))) for s in range(5)}
    assert len(others) > 1


def test_questions_come_from_the_level_and_topics(bank):
    mock = MockInterview(level="senior", seed=1, n_questions=4, max_follow_ups=0, bank=bank)
    main = asked(mock)
    assert len(main) == 4
    assert all(get_question(q, bank).level == "senior" for q in main)
    assert len({get_question(q, bank).topic for q in main}) == 4  # topics interleaved
    mock = MockInterview(topics=["precision"], seed=0, n_questions=3, max_follow_ups=0, bank=bank)
    assert all(get_question(q, bank).topic == "precision" for q in asked(mock))


def test_short_pool_is_topped_up_from_other_levels(bank):
    mock = MockInterview(
        level="senior", topics=["data"], n_questions=2, max_follow_ups=0, bank=bank
    )
    assert len(asked(mock)) == 2  # no senior data question; other levels fill in


def test_bad_arguments_are_clear_errors(bank):
    with pytest.raises(NanlabError, match="topics='cooking' is not allowed"):
        MockInterview(topics=["cooking"], bank=bank)
    with pytest.raises(NanlabError, match="level='junior' is not allowed"):
        MockInterview(level="junior", bank=bank)
    with pytest.raises(NanlabError, match="n_questions=0 is out of range"):
        MockInterview(n_questions=0, bank=bank)


GOOD_FIRST_THING = (
    "The first thing I do is stop the run so it does not keep training on garbage, and I save "
    "the logs and a snapshot of the weights as evidence. I don't start changing "
    "hyperparameters blindly. Next I look through the loss log to find the first step where "
    "the loss went non-finite. Then I roll back to the last good checkpoint before that step "
    "and check the data of the failing batch, the cheapest test. If it still appears, I turn "
    "AMP off and rerun, and only then restart with the learning rate divided by 10."
)
# Covers everything except the roll-back (first-thing's third follow-up targets it).
NO_ROLLBACK_FIRST_THING = (
    "The first thing I do is stop the run so it does not keep training on garbage, and I save "
    "the logs and a snapshot of the weights as evidence. I don't start changing "
    "hyperparameters blindly. Next I look through the loss log to find the first step where "
    "the loss went non-finite, and check the data of the failing batch, the cheapest test. If "
    "it still appears, I turn AMP off and rerun, and only then restart with the learning rate "
    "divided by 10."
)


def test_a_good_answer_moves_to_the_next_question(bank):
    mock = MockInterview(ids=["first-thing", "nan-vs-oom"], bank=bank)
    reply = mock.answer(GOOD_FIRST_THING)
    assert reply.result.score == 1.0
    assert not reply.is_follow_up
    assert reply.next_question.id == "nan-vs-oom"
    assert "**Next question**" in reply.message


def test_the_follow_up_targets_what_was_missing(bank):
    first = get_question("first-thing", bank)
    assert [f.id for f in first.follow_ups] == ["sop-order", "lr-divide-10", "spike-vs-nan"]
    mock = MockInterview(ids=["first-thing", "nan-vs-oom"], bank=bank)
    reply = mock.answer(NO_ROLLBACK_FIRST_THING)
    assert reply.result.missing == ["roll back to the last good checkpoint"]
    assert reply.is_follow_up
    assert reply.next_question.id == "spike-vs-nan"  # not the first follow-up in the list
    assert "probing: roll back to the last good checkpoint" in reply.message
    # one follow-up per question by default: then the next main question
    reply = mock.answer("")
    assert not reply.is_follow_up and reply.next_question.id == "nan-vs-oom"


def test_an_empty_answer_gets_the_first_follow_up_and_depth_is_bounded(bank):
    mock = MockInterview(ids=["first-thing"], max_follow_ups=2, bank=bank)
    assert mock.answer("").next_question.id == "sop-order"
    assert mock.answer("").next_question.id == "data-first-check"  # sop-order's first
    assert mock.answer("").next_question is None
    assert mock.done
    with pytest.raises(NanlabError, match="the mock interview is over"):
        mock.answer("more")


def test_no_follow_ups_when_disabled_and_no_repeats(bank):
    mock = MockInterview(ids=["first-thing", "sop-order"], max_follow_ups=0, bank=bank)
    assert asked(mock) == ["first-thing", "sop-order"]
    # sop-order was already asked as a follow-up, so it is not asked again
    mock = MockInterview(ids=["first-thing", "sop-order", "nan-vs-oom"], bank=bank)
    assert asked(mock) == ["first-thing", "sop-order", "nan-vs-oom", "what-to-log"]


def test_inline_follow_ups_are_asked(bank):
    zero_std = get_question("data-zero-std", bank)
    answer = (
        "The std is 0 for a constant column so we divide 0 / 0 and get NaN everywhere. "
        "I would clamp the std with a small eps before dividing by it in the pipeline. "
        "After normalising I assert isfinite on the whole tensor to catch anything left."
    )
    result = zero_std.score(answer)
    assert result.missing == ["global statistics"]
    mock = MockInterview(ids=["data-zero-std"], bank=bank)
    reply = mock.answer(answer)
    assert reply.next_question.id == "data-zero-std/follow-up-2"
    assert reply.next_question.parent == "data-zero-std"


def test_summary_reports_scores_topics_and_practice(bank):
    mock = MockInterview(ids=["first-thing", "fp16-range"], max_follow_ups=0, bank=bank)
    mock.answer(GOOD_FIRST_THING)
    mock.answer("FP16 has a small range so values can overflow during training runs.")
    summary = mock.summary()
    assert [r[0] for r in summary.rows] == ["first-thing", "fp16-range"]
    assert summary.rows[0][2] == 1.0 and summary.rows[1][2] < 0.5
    assert summary.strongest == ["recovery"] and summary.weakest == ["precision"]
    assert summary.practise[0].startswith("fp16-range: add max 65504")
    assert any(p.startswith("more precision questions:") for p in summary.practise)
    md = summary.markdown()
    assert "| first-thing | recovery | 100% |" in md
    assert "Weakest: precision" in md


def test_summary_before_any_answer():
    assert MockInterview(seed=0).summary().markdown().endswith("No answers yet.")


# ----------------------------------------------------------------------------- cheat sheet


def test_cheat_sheet_has_the_sop_in_order():
    sheet = cheat_sheet()
    assert "data -> AMP off -> LR / 10 -> grad norms -> init / eps" in sheet
    steps = ["1. **Data", "2. **AMP off", "3. **LR / 10", "4. **Grad norms", "5. **Init / eps"]
    positions = [sheet.index(s) for s in steps]
    assert positions == sorted(positions)


def test_cheat_sheet_numbers_terms_and_length():
    sheet = cheat_sheet()
    for needle in [
        "65504",
        "6e-8",
        "2^16",
        "2000",
        "0.5",
        "1e-4",
        "1e4",
        "6 sigma",
        "128",
        "100 steps",
        "200-500",
        "hint, not proof",
        "stall",
        "torch.amp.autocast",
        "梯度裁剪",
        "损失缩放",
        "学习率预热",
        "回滚",
        "检查点",
        "混合精度",
    ]:
        assert needle in sheet, needle
    assert "torch.cuda.amp" in sheet and "deprecated" in sheet
    assert len(sheet.splitlines()) <= 70  # one page



def test_adam_numbers_in_bank_and_cheat_sheet_come_from_one_function(bank):
    """The fp16 Adam-v threshold and Kingma & Ba's step bound are quoted as
    nanlab.optim.numerics computes them (Lab 04 and Lab 03 print the same functions)."""
    from nanlab.optim.numerics import adam_step_bound, adam_v_underflow_grad

    sheet = cheat_sheet()
    eps_answer = get_question("adam-eps-fp16", bank).answer
    for beta2 in (0.95, 0.999):
        quoted = f"{adam_v_underflow_grad(beta2):.1e}".replace("e-0", "e-")  # 7.7e-4, 5.5e-3
        assert quoted in sheet and quoted in eps_answer, quoted
    assert "sqrt(2^-25 / (1 - b2))" in sheet
    bound = f"{adam_step_bound(0.9, 0.999):.2f}"  # 3.16
    assert bound in sheet and bound in get_question("lr-adam-bounded", bank).answer
    assert adam_step_bound(0.9, 0.95) == 1.0

# ------------------------------------------------------------------------------ STAR story

STORY_STEPS = 60  # long enough to pass the failure at step 40 and learn; short for CI


@pytest.fixture(scope="module")
def clean_run():
    return shared_run(None, steps=STORY_STEPS)


@pytest.fixture(scope="module")
def dirty_story(clean_run):
    """nan_input (dirty data): the fixed run is made here, so the test knows its numbers."""
    from nanlab.debug.diagnose import diagnose

    run = shared_run("nan_input", steps=STORY_STEPS, checkpoint_every=10,
                     stop_when_poisoned=True)
    diagnosis = diagnose(run)
    fixed = shared_run("nan_input", steps=STORY_STEPS, fixes=[diagnosis.fix])  # test_faults too
    story = nanlab.interview.star_story(run, diagnosis, clean=clean_run, fixed=fixed)
    return run, diagnosis, fixed, story


@pytest.fixture(scope="module")
def eps_story(clean_run):
    """tiny_eps (a norm's eps of 0): diagnosis, locate and the fixed run made by star_story."""
    run = shared_run("tiny_eps", steps=STORY_STEPS, checkpoint_every=10,
                     stop_when_poisoned=True)
    return run, nanlab.interview.star_story(run, clean=clean_run)


def fmt(x: float) -> str:
    return f"{x:.3g}"


def test_star_story_of_dirty_data_carries_the_runs_numbers(dirty_story, clean_run):
    run, diagnosis, fixed, story = dirty_story
    md = story.markdown()
    step = run.first_bad_step
    assert step == 40 and diagnosis.fix == "validate_data"
    # situation: the model, the task, the step, the grad norm before it
    params = run.record.manifest["num_params"]
    assert f"{params:,} parameters" in story.situation
    assert "2 layers, d_model 64, 4 heads" in story.situation
    assert "fp32" in story.situation and "AdamW at a peak LR of 0.005" in story.situation
    assert f"At step {step}, the loss became NaN" in story.situation
    before = run.record.steps[step - 1]["loss"]
    assert f"at step {step - 1} the loss was still {fmt(before)}" in story.situation
    jump = nanlab.interview.grad_norm_jump(run.record, step)
    assert jump["decades"] < 1
    assert "no explosion" in story.situation or "flat" in story.situation
    assert fmt(jump["low"]) in story.situation and fmt(jump["high"]) in story.situation
    # action: locate's answer, the SOP verdicts, the root cause and the fix
    assert "in the data pass, tensor `features`, 1 NaN and 0 inf" in story.action
    assert "**data (数据检查)**: the cause: batch 40 of step 40" in story.action
    assert "rules out a gradient explosion" in story.action
    assert "dirty data (脏数据)" in story.action and "`validate_data`" in story.action
    # result: the fixed run's and the clean run's loss at the same step, the batches after
    fixed_loss = fixed.record.steps[step]["loss"]
    clean_loss = clean_run.record.steps[step]["loss"]
    assert f"At step {step}, where it had failed, the loss was {fmt(fixed_loss)} against " \
           f"{fmt(clean_loss)} in the clean baseline" in story.result
    after = STORY_STEPS - step - 1
    assert f"{after} batches after the old failure step" in story.result
    assert "1 bad batch was logged and skipped (batch 40)" in story.result
    assert "only step 40 had to be redone" in story.result
    assert "Prevention (预防)" in story.result and "isfinite" in story.result
    facts = story.facts
    assert facts["loss_fixed_at_step"] == fixed_loss
    assert facts["loss_clean_at_step"] == clean_loss
    assert facts["batches_after_fix"] == after
    assert f"over {after} batches" in story.headline and f"{params:,}-parameter" in story.headline
    for part in ("**Situation (情境).**", "**Task (任务).**", "**Action (行动).**",
                 "**Result (结果).**", "| parameters | " + f"{params:,} |"):
        assert part in md


def test_star_story_of_a_norm_eps_fault_names_what_was_ruled_out(eps_story):
    run, story = eps_story
    facts = story.facts
    assert facts["family"] == "tiny_eps" and facts["fix"] == "norm_eps"
    step = run.first_bad_step
    assert facts["symptom_step"] == step
    params = run.record.manifest["num_params"]
    assert params != 106368  # its own model (33 tokens with a pad), its own count
    assert f"{params:,} parameters" in story.situation
    assert "LayerNorm eps" in story.title and "eps 过小" in story.action
    assert "`embed_norm` (LayerNorm)" in story.action  # locate: where the NaN was made
    # every SOP step before the cause is ruled out or skipped, with its reason
    assert "**data (数据检查)**: ruled out: batch" in story.action
    assert "**AMP off (关闭混合精度)**: not needed: the run is fp32 already" in story.action
    assert ("**LR / 10 (降低学习率)**: ruled out: LR 0.005 / 10 and / 100 replays: "
            "non-finite at step 0" in story.action)
    assert "**init / eps (初始化 / eps)**: the cause: a norm has eps = 0" in story.action
    assert [r["step"] for r in facts["ruled_out"]] == ["data", "lr", "grad_norms"]
    # the fixed run (made by star_story) and the clean run, at the same step
    assert facts["fixed"]["steps_run"] == STORY_STEPS and not facts["fixed"]["nonfinite_steps"]
    assert f"the loss was {fmt(facts['loss_fixed_at_step'])} against " \
           f"{fmt(facts['loss_clean_at_step'])}" in story.result
    assert f"{facts['batches_after_fix']} batches after the old failure step" in story.result


def test_star_story_markdown_export(dirty_story, tmp_path):
    story = dirty_story[3]
    path = story.save(tmp_path / "stories" / "mine.md")
    text = path.read_text(encoding="utf-8")
    assert text == story.markdown() == str(story)
    assert text.startswith("## STAR story: dirty data (脏数据)")
    assert story._repr_markdown_() == text
    assert "> Built a fault-injection harness; reproduced a NaN loss at step 40" in text
    assert "injected `nan_input`" in text


def test_star_story_of_an_injected_fault_is_framed_as_a_reproduction(dirty_story):
    """The learner did not run a production job: the story says so, in its own numbers."""
    story = dirty_story[3]
    assert story.situation.startswith("I built a fault-injection harness and reproduced a "
                                      "NaN loss on purpose: I injected the `nan_input` fault")
    assert "not a production incident" in story.situation
    assert "I was training" not in story.markdown()
    own = nanlab.interview.story_from_facts(dict(story.facts, fault=None))  # your own run
    assert own.situation.startswith("I was training ")
    assert own.headline.startswith("Diagnosed a NaN loss at step 40")


def test_a_nan_gradient_under_a_finite_loss_is_not_called_a_nan_loss(dirty_story):
    """A backward-only NaN (the loss still finite at the bad step) is a non-finite
    gradient in the headline, as the story's own symptom sentence says."""
    facts = dict(dirty_story[3].facts, fault=None, loss_at_symptom=1.25,
                 grad_norm_at_symptom=float("nan"))
    story = nanlab.interview.story_from_facts(facts)
    assert story.headline.startswith("Diagnosed a non-finite gradient at step 40")
    assert "while the loss was still 1.25" in story.markdown()
    assert "NaN loss" not in story.headline


def test_star_story_scores_well_on_the_banks_star_question(dirty_story):
    result = get_question("star-story").score(dirty_story[3].markdown())
    assert result.score >= 0.8, result.missing


def test_the_wording_reads_for_every_cause_and_symptom(dirty_story):
    """Every cause's words and every symptom render without a gap (no run needed)."""
    base = dirty_story[3].facts
    for key in nanlab.interview._CAUSE_WORDS:
        for symptom, step in [("nonfinite", 40), ("error", 40), ("spike", 40),
                              ("diverge", None), ("stall", None)]:
            facts = dict(base, cause_key=key, symptom=symptom, symptom_step=step,
                         error="RuntimeError: boom" if symptom == "error" else None)
            if symptom not in ("nonfinite", "error"):
                facts.update(location=None, rollback_step=None, recovered_by_itself_in=12)
            if step is None:
                facts.update(grad_jump=None, compare_step=STORY_STEPS - 1)
            story = nanlab.interview.story_from_facts(facts)
            md = story.markdown()
            assert "None" not in md.replace("None of", ""), (key, symptom)
            assert nanlab.interview._CAUSE_WORDS[key].name in md
            assert "____" not in md and "{" not in md


def test_grad_norm_jump_reads_an_explosion():
    from nanlab.runs.record import RunRecord

    rec = RunRecord()
    norms = [1.0] * 10 + [10.0 ** (k / 4) for k in range(1, 17)] + [float("inf")]
    for s, g in enumerate(norms):
        rec.log_step({"step": s, "loss": 1.0, "grad_norm": g, "finite": s < len(norms) - 1})
    jump = nanlab.interview.grad_norm_jump(rec)
    assert jump["step"] == 26 and jump["at_step"] == float("inf")
    assert jump["low"] == 1.0 and jump["high_step"] == 25
    assert jump["decades"] == pytest.approx(4.0)
    assert nanlab.interview.grad_norm_jump(rec, 1) is None  # no history before step 1


def test_a_healthy_run_has_no_story():
    from nanlab.debug.diagnose import Diagnosis

    healthy = Diagnosis("healthy", None, None, None, None, False, "nothing to fix", [])
    with pytest.raises(NanlabError, match="this run is healthy"):
        nanlab.interview.star_story(None, healthy)


# ----------------------------------------------------------------- mock interview widget


def test_mock_interview_widget_flow(bank, tmp_path, monkeypatch):
    from nanlab.course import progress

    monkeypatch.setenv("NANLAB_PROGRESS", str(tmp_path / "p.json"))
    mw = nanlab.interview.MockInterviewWidget(ids=["first-thing", "nan-vs-oom"],
                                              max_follow_ups=1, bank=bank, lab="10_interview")
    assert "What do you do first" in mw.question.value and "question 1" in mw.header.value
    assert mw.summary.value == "" and not mw.done
    # an answer that misses the roll-back: feedback, then the follow-up on it
    mw.answer.value = NO_ROLLBACK_FIRST_THING
    mw.submit.click()
    assert "<b>Score: 75%</b>" in mw.feedback.value  # 3 of 4 core points
    assert "Missing:" in mw.feedback.value and "roll back to the last" in mw.feedback.value
    assert ("<b>Follow-up next</b>, on what was missing: roll back to the last good checkpoint"
            in mw.feedback.value)
    assert "<summary>Model answer" in mw.feedback.value
    assert mw.mock.current.id == "spike-vs-nan" and "follow-up 2" in mw.header.value
    assert get_question("spike-vs-nan", bank).question[:30] in mw.question.value
    assert mw.answer.value == ""  # cleared for the next answer
    # an empty answer to the follow-up: then the next main question
    mw.submit.click()
    assert "<b>Score: 0%</b>" in mw.feedback.value
    assert mw.mock.current.id == "nan-vs-oom" and "question 3" in mw.header.value
    mw.answer.value = get_question("nan-vs-oom", bank).answer  # full marks: no follow-up
    mw.submit.click()
    assert "<b>Score: 100%</b>" in mw.feedback.value and "Follow-up next" not in mw.feedback.value
    # the end: the summary is shown, the answer box is closed
    assert mw.done and mw.submit.disabled and mw.answer.disabled
    assert "finished" in mw.header.value
    assert "Mock interview summary" in mw.summary.value
    assert "first-thing" in mw.summary.value and "spike-vs-nan (follow-up)" in mw.summary.value
    items = progress.load(tmp_path / "p.json")["labs"]["10_interview"]
    assert set(items) == {"mock:first-thing", "mock:spike-vs-nan", "mock:nan-vs-oom"}
    mw.submit.click()  # a click after the end changes nothing
    assert len(mw.mock.turns) == 3


def test_free_text_practice_from_the_bank(bank):
    ft = nanlab.interview.free_text(get_question("confirm-no-recur", bank))
    assert ft.qid == "confirm-no-recur" and "how many batches" in ft.prompt.value.lower()
    ft.answer.value = get_question("confirm-no-recur", bank).answer
    ft.check_button.click()
    assert ft.last_feedback.correct


# ------------------------------------------------------- the large-run answers, executed


def test_large_run_answers_cite_their_sources(bank):
    """Every large_runs answer names where its facts come from: a paper's section or
    algorithm, or a repository file."""
    source = re.compile(r"section \d|Algorithm \d|arXiv|\.py\b|\.md\b|\.rst\b|huggingface\.co/")
    large = [q for q in bank if q.topic == "large_runs"]
    assert len(large) >= 10
    for q in large:
        assert source.search(q.answer), q.id


def test_a_fresh_adam_steps_the_full_lr_in_every_coordinate(bank):
    """resume-no-optimizer-state: with m = v = 0 and bias correction, Adam's first update
    is lr * g / (|g| + eps), about lr * sign(g), whatever the size of g."""
    import torch

    p = torch.nn.Parameter(torch.tensor([1.0, -2.0, 3.0]))
    opt = torch.optim.AdamW([p], lr=0.01, weight_decay=0.0)
    p.grad = torch.tensor([1e-3, 5.0, -200.0])
    opt.step()
    moved = p.detach() - torch.tensor([1.0, -2.0, 3.0])
    assert torch.allclose(moved, -0.01 * torch.sign(p.grad), rtol=1e-4)
    assert "lr * sign(g)" in get_question("resume-no-optimizer-state", bank).answer


def test_one_exponent_bit_flip_turns_one_into_inf(bank):
    """sdc-bit-flip: bit 30 of fp32 1.0 (0x3F800000) flipped gives 0x7F800000 = +inf."""
    import struct

    bits = struct.unpack("<I", struct.pack("<f", 1.0))[0]
    flipped = struct.unpack("<f", struct.pack("<I", bits ^ (1 << 30)))[0]
    assert bits == 0x3F800000 and flipped == float("inf")
    answer = get_question("sdc-bit-flip", bank).answer
    assert "0x3F800000" in answer and "0x7F800000" in answer


def test_out_of_range_ids_and_empty_batches_as_the_answers_say(bank):
    """token-id-beyond-vocab: loud in plain PyTorch; grad-accum-all-masked: 0 / 0 = NaN."""
    import torch
    import torch.nn.functional as F

    with pytest.raises(IndexError, match="index out of range in self"):
        torch.nn.Embedding(10, 4)(torch.tensor([12]))
    assert "'index out of range in self'" in get_question("token-id-beyond-vocab", bank).answer
    masked = F.cross_entropy(torch.randn(2, 10), torch.tensor([-100, -100]))
    assert torch.isnan(masked)
    assert "0 / 0 = NaN" in get_question("grad-accum-all-masked", bank).answer


def test_mean_of_means_differs_and_total_token_normalisation_matches(bank):
    """grad-accum-mean-of-means: with unequal token counts the mean of micro-batch means is
    not the full-batch mean; the sum over tokens divided by the total count is."""
    import torch

    losses = [torch.tensor([1.0, 2.0, 3.0, 4.0]), torch.tensor([10.0])]  # 4 and 1 tokens
    full = torch.cat(losses).mean()
    mean_of_means = sum(x.mean() for x in losses) / len(losses)
    total = sum(len(x) for x in losses)
    by_total = sum(x.sum() / total for x in losses)
    assert not torch.isclose(mean_of_means, full) and torch.isclose(by_total, full)
    assert "mean of means" in get_question("grad-accum-mean-of-means", bank).answer


def test_scaler_update_without_a_step_is_loud(bank):
    """grad-accum-gradscaler: update() with no step() since the last update raises."""
    import torch

    w = torch.nn.Parameter(torch.ones(3))
    scaler = torch.amp.GradScaler("cpu")
    scaler.scale((w * 2).sum()).backward()
    with pytest.raises(AssertionError, match="No inf checks were recorded prior to update"):
        scaler.update()
    assert "No inf checks were recorded prior to update" in get_question(
        "grad-accum-gradscaler", bank).answer


def test_wrong_answers_must_be_a_list_of_text(raw):
    raw[0]["wrong_answers"] = "just one string"
    raw[1]["wrong_answers"] = []
    msgs = problems_of(raw)
    assert any(m.startswith("questions[0]") and "'wrong_answers'" in m for m in msgs)
    assert any(m.startswith("questions[1]") and "'wrong_answers'" in m for m in msgs)
