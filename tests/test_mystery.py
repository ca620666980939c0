"""Mystery runs: drawn from a seed, the fault sealed on disk, still replayable, gradable."""

import json
import shutil

import pytest

from nanlab.cli import main
from nanlab.debug.diagnose import diagnose, load_run
from nanlab.errors import NanlabError
from nanlab.faults import fault_config, mystery, run_fault
from nanlab.train.config import TrainConfig


def test_draw_is_a_pure_function_of_the_seed_and_covers_the_pool():
    assert mystery.draw(5) == mystery.draw(5)
    assert {mystery.draw(s) for s in range(200)} == set(mystery.POOL)
    assert not set(mystery.SLOW) & set(mystery.POOL)


def test_no_mystery_fault_is_named_by_its_config():
    """The manifest shows the config: a fault whose config field spells out the bug (a
    resume that skips the optimizer) is not drawn. Lab 07's warm-up pool also keeps out
    the families added since (Lab 15's exam draws them, tests/test_exam.py)."""
    for name in ("resume_fresh_optimizer", "accum_mean_of_means", "scaler_update_micro_batch",
                 "adam_unfreeze_spike"):
        assert name not in mystery.POOL
    clean = TrainConfig().to_dict()
    for name in mystery.POOL:
        config = fault_config(name).to_dict()
        assert all(config[k] == clean[k] for k in mystery.NAMES_THE_BUG), name


def test_bad_seed_pool_and_token_are_clear_errors():
    with pytest.raises(NanlabError, match="seed"):
        mystery.draw(-1)
    with pytest.raises(NanlabError, match="pool is empty"):
        mystery.draw(0, pool=())
    with pytest.raises(NanlabError, match="no_such_fault"):
        mystery.draw(0, pool=("no_such_fault",))
    with pytest.raises(NanlabError, match="is not a sealed fault"):
        mystery.unseal("nan_input")


@pytest.fixture(scope="module")
def folder(tmp_path_factory):
    out = tmp_path_factory.mktemp("mystery") / "m"
    return mystery.make(0, out, pool=("nan_input",), steps=60)


def test_the_manifest_does_not_name_the_fault_but_diagnose_still_finds_it(folder):
    text = "".join(p.read_text() for p in folder.glob("*.json*"))
    assert "nan_input" not in text
    assert json.loads((folder / "manifest.json").read_text())["fault"]["sealed"]
    run = load_run(folder)
    assert run.fault == "nan_input" and run.first_bad_step == 40
    found = diagnose(run)
    assert found.fix == "validate_data"


def test_reveal_and_grade_with_bounded_recorded_attempts(folder, tmp_path, capsys):
    truth = mystery.reveal(folder)
    assert truth["name"] == "nan_input" and truth["cure"] == "validate_data"
    fresh = tmp_path / "copy"
    shutil.copytree(folder, fresh)  # a second learner's copy, before any answer
    assert mystery.grade(folder, "  ").startswith("no answer given")  # not an attempt
    assert mystery.grade(folder, "lr").startswith("wrong (attempt 1 of 3)")
    assert mystery.grade(folder, "illegal_label").startswith("close (attempt 2 of 3)")
    assert mystery.grade(folder, "data").startswith("right (attempt 3 of 3)")
    assert mystery.grade(folder, "nan_input").startswith("already answered right")
    assert [a["verdict"] for a in mystery.attempts(folder)] == ["wrong", "close", "right"]
    for answer in ("lr", "amp", "init_eps"):
        assert mystery.grade(fresh, answer).startswith("wrong")
    assert mystery.grade(fresh, "nan_input").startswith("no attempts left")
    assert len(mystery.attempts(fresh)) == mystery.MAX_ATTEMPTS == 3
    assert main(["mystery", "reveal", str(folder)]) == 0
    assert capsys.readouterr().out.startswith("nan_input: ")


def test_nothing_in_the_folder_names_the_fault_or_its_seed(folder):
    manifest = json.loads((folder / "manifest.json").read_text())
    assert "mystery_seed" not in manifest  # draw(seed) would name the fault
    assert set(manifest["fault"]) == {"sealed"}
    for path in folder.rglob("*"):
        if path.is_file() and path.suffix in (".json", ".jsonl", ".md", ".txt"):
            assert "nan_input" not in path.read_text(), path


@pytest.fixture(scope="module")
def runs():
    """Three faults that break differently: a bad batch at 40, a NaN at step 0, a run
    that diverges without a NaN."""
    return {name: run_fault(name, steps=steps, stop_when_poisoned=True)
            for name, steps in (("nan_input", 45), ("tiny_eps", 5), ("high_lr_adam", 60))}


def test_hints_are_read_from_the_run_and_stay_true(runs):
    hints = {name: mystery.run_hints(r.record, r.error, r.error_step)
             for name, r in runs.items()}
    assert len({h[0] for h in hints.values()}) == 3  # each run gets its own first hint
    bad = runs["nan_input"].record.first_nonfinite_step
    assert f"step {bad} " in hints["nan_input"][0] and bad == 40
    assert f"--step {bad}" in hints["nan_input"][2]
    assert runs["tiny_eps"].record.first_nonfinite_step == 0
    assert "step 0, before any optimizer update" in hints["tiny_eps"][0]
    assert runs["high_lr_adam"].record.first_nonfinite_step is None
    assert "finite" in hints["high_lr_adam"][0] and "no step to locate" in hints[
        "high_lr_adam"][2]
    for name, r in runs.items():  # the grad-norm figure is the record's, to one decimal
        decades = mystery.grad_decades(r.record, r.record.first_nonfinite_step)
        if decades is None:
            assert "almost no grad-norm history" in hints[name][1]
        else:
            assert f"grew {decades:.1f} orders" in hints[name][1]
    for h in hints.values():  # concept, pointer, code: only the last names a command
        assert "`" not in h[0] + h[1]


def test_make_refuses_to_overwrite_a_run(folder):
    with pytest.raises(NanlabError, match="already holds a run"):
        mystery.make(0, folder)


def test_lab_mysteries_grade_a_bounded_number_of_times_and_hint_from_their_run():
    from nanlab.course.mysteries import Mystery

    families = {"data": "dirty data", "amp": "mixed precision (fp16)",
                "lr": "learning rate", "grad_norms": "gradient explosion",
                "init_eps": "init / eps"}
    pool = ["nan_input", "tiny_eps"]
    made = [Mystery(0, i, pool, families, {"steps": 45}) for i in (0, 1)]
    by_fault = {m._fault: m for m in made}
    assert set(by_fault) == set(pool)
    data, eps = by_fault["nan_input"], by_fault["tiny_eps"]
    assert data.run.record.manifest["fault"] == "(hidden)"
    h_data, h_eps = data.hints(), eps.hints()
    assert h_data[0] != h_eps[0] and h_data[2] != h_eps[2]
    assert "step 40 " in h_data[0] and "step 0, before any optimizer update" in h_eps[0]
    assert "locate(m.run.trainer, 40)" in h_data[2] and "data pass" in h_data[2]
    assert "locate(m.run.trainer, 0)" in h_eps[2]
    # three graded answers at most; a malformed one is not an attempt; never names the family
    assert "answer with one of" in eps.grade("eps")
    for wrong in ("dirty data", "learning rate", "gradient explosion"):
        verdict = eps.grade(wrong)
        assert verdict.startswith("not the family") and "init / eps" not in verdict
    assert eps.grade("init / eps").startswith("no attempts left")
    assert len(eps.attempts) == 3
    assert data.grade("dirty data") is None
