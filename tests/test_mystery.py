"""Mystery runs: drawn from a seed, the fault sealed on disk, still replayable, gradable."""

import json

import pytest

from nanlab.cli import main
from nanlab.debug.diagnose import diagnose, load_run
from nanlab.errors import NanlabError
from nanlab.faults import mystery


def test_draw_is_a_pure_function_of_the_seed_and_covers_the_pool():
    assert mystery.draw(5) == mystery.draw(5)
    assert {mystery.draw(s) for s in range(200)} == set(mystery.POOL)
    assert not set(mystery.SLOW) & set(mystery.POOL)


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


def test_reveal_and_grade(folder, capsys):
    truth = mystery.reveal(folder)
    assert truth["name"] == "nan_input" and truth["cure"] == "validate_data"
    assert mystery.grade(folder, "nan_input").startswith("right")
    assert mystery.grade(folder, "data").startswith("right")
    assert mystery.grade(folder, "illegal_label").startswith("close")
    assert mystery.grade(folder, "lr").startswith("not this one")
    assert mystery.grade(folder, "  ").startswith("no answer given")
    assert main(["mystery", "reveal", str(folder)]) == 0
    assert capsys.readouterr().out.startswith("nan_input: ")


def test_make_refuses_to_overwrite_a_run(folder):
    with pytest.raises(NanlabError, match="already holds a run"):
        mystery.make(0, folder)
