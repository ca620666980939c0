"""Checks the Hugging Face and Lightning guard callbacks share (tests/test_guard_*.py)."""

from __future__ import annotations

import runpy

import torch
from test_examples import PAGES, ROOT, code_of, page_blocks


def assert_ranks_agree(rank0: dict, rank1: dict, bad: int) -> None:
    """Two DDP ranks, a NaN in rank 1's batch ``bad``: the same decisions, the same weights."""
    assert [(e["step"], e["action"]) for e in rank0["events"]] == \
           [(e["step"], e["action"]) for e in rank1["events"]] == \
           [(bad, "rollback"), (bad + 1, "skip_batch"), (bad + 2, "skip_batch")]
    # the NaN was rank 1's: rank 0 saw it only in the gradients DDP averaged
    assert rank1["events"][0]["reason"].startswith("non-finite loss")
    assert rank0["events"][0]["reason"].startswith("non-finite grad norm")
    assert torch.isfinite(rank0["params"]).all()
    assert torch.equal(rank0["params"], rank1["params"])


def assert_readme_example_survives(name: str, tmp_path, monkeypatch, capsys) -> None:
    """examples/NAME is what its documentation page shows (the README shows ten lines of
    one: tests/test_examples.py), and it survives its NaN with one rollback."""
    assert code_of(name) in page_blocks(name), f"{PAGES[name]}'s copy of the example is stale"
    monkeypatch.chdir(tmp_path)  # its output folder
    runpy.run_path(str(ROOT / "examples" / name), run_name="__main__")
    out = capsys.readouterr().out
    assert "guard: 1 incident, 1 rollback;" in out and "finite: True" in out
