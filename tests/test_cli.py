"""The ``nanlab`` command line, as a careless user and as a script use it.

Bad input: one line on stderr, exit status 2, never a traceback (checked in-process, fast).
Exit codes: each one from a real run (short runs: 30 steps) of ``main()``, the function
``python -m nanlab`` exits with; a process of its own proves that ``main()``'s status is
the process's exit code, for a healthy run and a failed one (``PROCESS``). Each extra
process costs the import of torch again, about 3 s of a 2-core CI machine.
"""

import argparse
import contextlib
import io
import json
import os
import subprocess
import sys
import traceback
from pathlib import Path
from types import SimpleNamespace

import pytest

from nanlab import cli
from nanlab.errors import NanlabError


def nanlab_process(*args, cwd=None):
    """``python -m nanlab ARGS`` in a process of its own: (returncode, stdout, stderr)."""
    return subprocess.run([sys.executable, "-m", "nanlab", *args], capture_output=True, text=True,
                          timeout=300, cwd=cwd)


def nanlab(*args, cwd=None):
    """``main(ARGS)`` in this process, its output captured as a process's would be (a
    traceback printed to stderr and status 1 where an exception escapes, as Python does)."""
    out, err = io.StringIO(), io.StringIO()
    here = os.getcwd()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        try:
            if cwd is not None:
                os.chdir(cwd)
            code = cli.main([str(a) for a in args])
        except SystemExit as e:
            code = 0 if e.code is None else e.code if isinstance(e.code, int) else 1
        except Exception:  # noqa: BLE001 - what an uncaught error does to a process
            traceback.print_exc()
            code = 1
        finally:
            os.chdir(here)
    return SimpleNamespace(returncode=code, stdout=out.getvalue(), stderr=err.getvalue())


def run_cli(capsys, monkeypatch, tmp_path, *args):
    """``main(args)`` in-process, in a scratch folder: (status, stdout, stderr)."""
    monkeypatch.chdir(tmp_path)
    try:
        status = cli.main(list(args))
    except SystemExit as e:  # argparse exits by itself on today's code
        status = e.code
    out = capsys.readouterr()
    return status, out.out, out.err


def assert_one_line_error(status, err, *words):
    assert status == 2, err
    assert "Traceback" not in err
    lines = [line for line in err.splitlines() if line.strip()]
    assert len(lines) == 1, err
    assert lines[0].startswith("nanlab: error: "), err
    for w in words:
        assert w in lines[0], err


def strict_json(text: str) -> dict:
    """The last line of stdout as strict JSON (a NaN or Infinity in it is an error)."""
    def refuse(name):
        raise AssertionError(f"not strict JSON: {name}")
    return json.loads(text.strip().splitlines()[-1], parse_constant=refuse)


# -- healthy runs, end to end ---------------------------------------------------------------
def test_run_json_end_to_end(tmp_path):
    out = nanlab_process("run", "--steps", "25", "--seed", "1", "--out", str(tmp_path / "r"),
                         "--json")
    assert out.returncode == 0, out.stderr
    summary = strict_json(out.stdout)
    assert summary["steps_run"] == 25
    assert summary["first_nonfinite_step"] is None
    assert 0 < summary["final_loss"] < 3.5
    assert (summary["exit_code"], summary["outcome"]) == (0, "healthy")
    assert (tmp_path / "r" / "manifest.json").exists()
    assert (tmp_path / "r" / "steps.jsonl").read_text().count("\n") == 25


def test_run_human_summary(tmp_path):
    out = nanlab("run", "--steps", "5", "--out", str(tmp_path / "r"))
    assert out.returncode == 0, out.stderr
    assert "first non-finite step: none" in out.stdout
    assert "outcome: healthy (exit 0)" in out.stdout


def test_bad_values_give_one_line_errors():
    for args, words in [
        (["--steps", "-3"], "steps=-3"),
        (["--precision", "fp8"], "precision='fp8'"),
        (["--steps", "ten"], "'ten' is not an integer"),
    ]:
        out = nanlab("run", *args)
        assert out.returncode == 2
        assert "Traceback" not in out.stderr
        lines = [line for line in out.stderr.splitlines() if "error" in line]
        assert len(lines) == 1 and words in lines[0], out.stderr


# -- bad input: each case a careless user hit -------------------------------------------------
def test_set_fixes_is_not_iterated_letter_by_letter(capsys, monkeypatch, tmp_path):
    status, _, err = run_cli(capsys, monkeypatch, tmp_path, "run", "--steps", "3", "--fault",
                             "nan_input", "--set", "fixes=lr_div10")
    assert_one_line_error(status, err, "fixes", "--fix lr_div10", "at_step")
    assert "fix='l'" not in err


def test_set_grad_scaler_abc_does_not_turn_the_scaler_on(capsys, monkeypatch, tmp_path):
    status, _, err = run_cli(capsys, monkeypatch, tmp_path, "run", "--steps", "3", "--fault",
                             "nan_input", "--set", "grad_scaler=abc")
    assert_one_line_error(status, err, "grad_scaler", "--config grad_scaler=")
    assert not (tmp_path / "runs").exists()  # refused before anything ran


def test_config_grad_scaler_must_be_a_boolean(capsys, monkeypatch, tmp_path):
    status, _, err = run_cli(capsys, monkeypatch, tmp_path, "run", "--steps", "3", "--config",
                             "grad_scaler=abc")
    assert_one_line_error(status, err, "grad_scaler='abc' is not a boolean", "allowed: true")


def test_set_model_3_is_one_line(capsys, monkeypatch, tmp_path):
    status, _, err = run_cli(capsys, monkeypatch, tmp_path, "run", "--steps", "3", "--fault",
                             "nan_input", "--set", "model=3")
    assert_one_line_error(status, err, "model", "--config model.")


def test_config_model_3_is_one_line(capsys, monkeypatch, tmp_path):
    status, _, err = run_cli(capsys, monkeypatch, tmp_path, "run", "--steps", "3", "--config",
                             "model=3")
    assert_one_line_error(status, err, "model", "model.n_layer")


def test_huge_seed_is_one_line(capsys, monkeypatch, tmp_path):
    status, _, err = run_cli(capsys, monkeypatch, tmp_path, "run", "--steps", "3", "--seed",
                             "99999999999999999999999")
    assert_one_line_error(status, err, "seed=99999999999999999999999", "allowed: an integer")


def test_matrix_negative_workers_is_one_line(capsys, monkeypatch, tmp_path):
    status, _, err = run_cli(capsys, monkeypatch, tmp_path, "matrix", "--faults", "nan_input",
                             "--fixes", "lr_div10", "--steps", "5", "--workers", "-3")
    assert_one_line_error(status, err, "workers=-3", ">= 1")


def test_out_naming_a_file_is_one_line(capsys, monkeypatch, tmp_path):
    (tmp_path / "afile").write_text("not a folder\n")
    status, _, err = run_cli(capsys, monkeypatch, tmp_path, "run", "--steps", "3", "--out",
                             "afile")
    assert_one_line_error(status, err, "'afile'", "is a file")
    assert (tmp_path / "afile").read_text() == "not a folder\n"


def test_mystery_make_into_a_file_is_one_line(capsys, monkeypatch, tmp_path):
    (tmp_path / "afile").write_text("not a folder\n")
    status, _, err = run_cli(capsys, monkeypatch, tmp_path, "mystery", "make", "afile")
    assert_one_line_error(status, err, "run_dir 'afile' is a file")


def _unwritable_folder(tmp_path: Path) -> Path:
    """A folder this process cannot write in: chmod 555, or (root ignores modes) /sys."""
    ro = tmp_path / "ro"
    ro.mkdir()
    ro.chmod(0o555)
    try:
        (ro / "probe").mkdir()
    except OSError:
        return ro
    (ro / "probe").rmdir()
    sys_dir = Path("/sys")
    try:
        (sys_dir / "nanlab-cli-test").mkdir()
    except OSError:
        return sys_dir
    (sys_dir / "nanlab-cli-test").rmdir()
    pytest.skip("no folder here refuses writes to this user")


def test_out_in_a_read_only_folder_is_one_line(capsys, monkeypatch, tmp_path):
    target = _unwritable_folder(tmp_path) / "run"
    status, _, err = run_cli(capsys, monkeypatch, tmp_path, "run", "--steps", "3", "--out",
                             str(target))
    assert_one_line_error(status, err, str(target), "cannot be written")


def test_out_holding_a_run_is_refused(capsys, monkeypatch, tmp_path):
    (tmp_path / "old").mkdir()
    (tmp_path / "old" / "manifest.json").write_text("{}\n")
    status, _, err = run_cli(capsys, monkeypatch, tmp_path, "run", "--steps", "3", "--out", "old")
    assert_one_line_error(status, err, "'old'", "already holds a run")
    assert (tmp_path / "old" / "manifest.json").read_text() == "{}\n"


@pytest.mark.parametrize("args, words", [
    (["--config", "lr=fast"], ["lr='fast' is not a number"]),
    (["--config", "steps=5.0"], ["steps='5.0' is not an integer"]),
    (["--config", "lr=nan"], ["lr='nan' is not a finite number"]),
    (["--config", "nope=1"], ["'nope'", "allowed:", "warmup_steps"]),
    (["--config", "lr"], ["--config 'lr'", "KEY=VALUE"]),
    (["--config", "model.n_layr=4"], ["'model.n_layr'", "model.n_layer"]),
    (["--config", "model.n_layer=0"], ["GPTConfig.n_layer=0 is out of range"]),
    (["--config", "out_dir=x"], ["--out"]),
    (["--lr", "1", "--lr", "2"], ["lr", "twice"]),
    (["--optimizer", "adam"], ["optimizer='adam' is not allowed", "'sgd'"]),
    (["--warmup-steps", "-1"], ["warmup_steps=-1 is out of range"]),
    (["--checkpoint-every", "x"], ["checkpoint_every='x' is not an integer"]),
    (["--fault", "nan_input", "--set", "at_step=5.5"], ["nan_input.at_step='5.5'"]),
    (["--fault", "nan_input", "--set", "value=zero"], ["value='zero' is not allowed"]),
    (["--fault", "nan_input", "--set", "at_step"], ["--set 'at_step'"]),
    (["--set", "at_step=5"], ["--fault"]),
    (["--fault", "nan_input", "--fix", "nope"], ["fix='nope' is not allowed"]),
    (["--guard", "recover", "--checkpoint-every", "0"], ["checkpoint_every"]),
    (["--guard", "retry"], ["mode='retry' is not allowed"]),
    (["--no-such-flag"], ["--no-such-flag"]),
    (["--out", ""], ["--out ''", "is empty"]),
    (["--rerun"], ["--rerun is not allowed without a guard"]),
])
def test_more_bad_values_are_one_line(capsys, monkeypatch, tmp_path, args, words):
    status, _, err = run_cli(capsys, monkeypatch, tmp_path, "run", "--steps", "3", *args)
    assert_one_line_error(status, err, *words)
    assert not (tmp_path / "runs").exists()  # refused before a run folder was made


# -- the training config from the command line ------------------------------------------------
def test_training_config_flags_reach_the_run(capsys, monkeypatch, tmp_path):
    status, out, err = run_cli(
        capsys, monkeypatch, tmp_path, "run", "--steps", "6", "--lr", "0.01", "--optimizer",
        "sgd", "--warmup-steps", "0", "--checkpoint-every", "3", "--config", "model.n_layer=1",
        "--config", "grad_scaler=no", "--config", "decay_steps=none", "--config",
        "model.qk_norm=YES", "--out", "r", "--json")
    assert status == 0, err
    config = json.loads((tmp_path / "r" / "manifest.json").read_text())["config"]
    assert (config["lr"], config["optimizer"], config["warmup_steps"]) == (0.01, "sgd", 0)
    assert (config["checkpoint_every"], config["grad_scaler"], config["decay_steps"]) == \
        (3, False, None)
    assert (config["model"]["n_layer"], config["model"]["qk_norm"]) == (1, True)
    assert strict_json(out)["config"]["lr"] == 0.01
    names = sorted(p.name for p in (tmp_path / "r" / "checkpoints").glob("ckpt_*.pt"))
    assert names == ["ckpt_000000.pt", "ckpt_000003.pt", "ckpt_000006.pt"]


def test_typed_values_from_field_types():
    from nanlab.cli import parse as cli_parse

    parse = cli_parse.parse_value
    assert parse("grad_scaler", "0", bool | None) is False
    assert parse("grad_scaler", "None", bool | None) is None
    assert parse("lr", "1e-3", float) == 1e-3
    assert parse("lr", "2", float) == 2.0 and isinstance(parse("lr", "2", float), float)
    assert parse("dims", "1, 2,3", tuple[int, ...]) == (1, 2, 3)
    assert parse("names", "a,b", list[str]) == ["a", "b"]
    assert parse("pair", "1,0.5", tuple[int, float]) == (1, 0.5)
    with pytest.raises(NanlabError, match="dims='1,x' is not allowed"):
        parse("dims", "1,x", tuple[int, ...])
    with pytest.raises(NanlabError, match="pair='1' is not allowed; allowed: 2 comma-separated"):
        parse("pair", "1", tuple[int, float])
    with pytest.raises(NanlabError, match="is not a boolean"):
        parse("qk_norm", "2", bool)
    with pytest.raises(NanlabError, match="is not an integer"):
        parse("steps", "1_000", int)
    assert cli_parse.parse_config(["lr=0.5", "model.n_layer=3"]) == {"lr": 0.5,
                                                                    "model": {"n_layer": 3}}


# -- what it prints is what ran ---------------------------------------------------------------
def test_prints_the_precision_that_ran(tmp_path):
    out = nanlab("run", "--steps", "3", "--fault", "fp16_overflow", "--out", str(tmp_path / "r"))
    assert out.returncode == 0, out.stderr
    manifest = json.loads((tmp_path / "r" / "manifest.json").read_text())
    assert manifest["config"]["precision"] == "fp16"
    assert "precision fp16" in out.stdout and "precision fp32" not in out.stdout
    assert "precision: fp32 -> fp16" in out.stdout  # what the fault's conditions changed


def test_steps_run_after_a_rollback_are_the_run_not_the_rows(tmp_path):
    args = ["run", "--steps", "30", "--fault", "nan_input", "--set", "at_step=5",
            "--guard", "recover", "--out"]
    out = nanlab(*args, str(tmp_path / "h"))
    assert out.returncode == 0, out.stderr
    rows = (tmp_path / "h" / "steps.jsonl").read_text().count("\n")
    assert rows == 36  # steps 0..5, then (rolled back to 0) 0..29
    assert "ran 30 of 30 steps" in out.stdout and "ran 36" not in out.stdout
    assert "36 steps computed, 6 discarded by 1 rollback" in out.stdout
    assert "first non-finite step: 5" in out.stdout
    guard_line = next(line for line in out.stdout.splitlines() if line.startswith("guard "))
    assert "1 rollback" in guard_line, out.stdout
    out = nanlab(*args, str(tmp_path / "j"), "--json")
    s = strict_json(out.stdout)
    assert (s["steps_run"], s["steps_computed"], s["steps_discarded"]) == (30, 36, 6)
    assert (s["outcome"], s["exit_code"], s["guard"]["rollback"]) == ("guarded", 0, 1)
    final = [json.loads(line) for line in (tmp_path / "j" / "steps.jsonl").open()][-1]
    assert s["final_loss"] == final["loss"] and final["step"] == 29


# -- exit codes, each from a real run ----------------------------------------------------------
@pytest.mark.parametrize("args, code, outcome", [
    (["--fault", "nan_input", "--set", "at_step=5"], 3, "nonfinite"),
    (["--fault", "illegal_label", "--set", "at_step=5"], 4, "crashed"),
    (["--fault", "nan_input", "--set", "at_step=5", "--guard", "stop"],
     6, "guard_stopped"),
    (["--fault", "nan_input", "--set", "at_step=5", "--guard", "recover",
      "--max-rollbacks", "0"], 5, "guard_gave_up"),
    (["--fault", "nan_input", "--set", "at_step=5", "--guard", "skip"], 0, "guarded"),
])
def test_exit_codes_from_real_runs(tmp_path, args, code, outcome):
    run = nanlab_process if code == 3 else nanlab  # one failed run in a process of its own
    out = run("run", "--steps", "30", *args, "--json", "--out", str(tmp_path / "r"))
    assert out.returncode == code, (out.stdout, out.stderr)
    assert "Traceback" not in out.stderr
    s = strict_json(out.stdout)
    assert (s["exit_code"], s["outcome"]) == (code, outcome)
    assert s["reason"]
    human = nanlab("run", "--steps", "30", *args, "--out", str(tmp_path / "h"))
    assert human.returncode == code
    assert f"outcome: {outcome} (exit {code})" in human.stdout


def test_exit_codes_are_distinct_and_documented():
    # the numbers are an interface: a script acts on them, so they never change
    assert (cli.EXIT_CODE_OK, cli.EXIT_CODE_BAD_INPUT, cli.EXIT_CODE_NONFINITE,
            cli.EXIT_CODE_CRASHED, cli.EXIT_CODE_GUARD_GAVE_UP, cli.EXIT_CODE_GUARD_STOPPED,
            cli.EXIT_CODE_INTERRUPTED, cli.EXIT_CODE_TERMINATED) == (0, 2, 3, 4, 5, 6, 130, 143)
    page = (Path(__file__).resolve().parents[1] / "docs" / "guides" / "cli.md").read_text()
    section = page.split("**Exit codes**", 1)[1]  # the command line guide's table
    for outcome, code in cli.EXIT_CODES.items():
        assert f"| {code} " in section and f"`{outcome}`" in section, outcome


def test_crash_in_json_is_strict_and_names_the_error(tmp_path):
    out = nanlab("run", "--steps", "30", "--fault", "illegal_label", "--set", "at_step=5",
                 "--json", "--out", str(tmp_path / "r"))
    s = strict_json(out.stdout)
    assert s["error"] and s["first_bad_step"] == 5 and s["steps_run"] == 5
    events = [json.loads(line) for line in (tmp_path / "r" / "events.jsonl").open()]
    assert any(e["kind"] == "error" for e in events)


def test_help_exits_zero(capsys, monkeypatch, tmp_path):
    status, out, _ = run_cli(capsys, monkeypatch, tmp_path, "run", "--help")
    assert status == 0 and "--checkpoint-every" in out and "Exit codes" in out


def _parsers(parser, name="nanlab"):
    """``(command, parser)`` for the main parser and every sub-command, nested ones too."""
    yield name, parser
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for sub_name, sub in action.choices.items():
                yield from _parsers(sub, f"{name} {sub_name}")


def test_help_is_plain_text_without_rst_markup():
    """A docstring may feed a help text, but ``nanlab --help`` is read in a terminal:
    no ``literal``, :func:`role` or `reference`_ markup in any help, sub-commands' included."""
    parsers = dict(_parsers(cli.build_parser()))
    assert {"nanlab run", "nanlab diagnose", "nanlab course build"} <= set(parsers), parsers
    for name, parser in parsers.items():
        text = parser.format_help()
        for mark in ("``", ":func:", ":class:", ":mod:", "`_"):
            assert mark not in text, f"{name} --help shows {mark!r}:\n{text}"
    assert "The nanlab command line" in parsers["nanlab"].format_help()
