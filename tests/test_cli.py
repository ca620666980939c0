import json
import subprocess
import sys


def nanlab(*args):
    return subprocess.run([sys.executable, "-m", "nanlab", *args], capture_output=True, text=True,
                          timeout=300)


def test_run_json_end_to_end(tmp_path):
    out = nanlab("run", "--steps", "25", "--seed", "1", "--out", str(tmp_path / "r"), "--json")
    assert out.returncode == 0, out.stderr
    summary = json.loads(out.stdout.strip().splitlines()[-1])
    assert summary["steps_run"] == 25
    assert summary["first_nonfinite_step"] is None
    assert 0 < summary["final_loss"] < 3.5
    assert (tmp_path / "r" / "manifest.json").exists()
    assert (tmp_path / "r" / "steps.jsonl").read_text().count("\n") == 25


def test_run_human_summary(tmp_path):
    out = nanlab("run", "--steps", "5", "--out", str(tmp_path / "r"))
    assert out.returncode == 0, out.stderr
    assert "first non-finite step: none" in out.stdout


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
