"""One walker over nested batches (nanlab.train.batches), one atomic writer (nanlab.runs.atomic)."""

import collections
import dataclasses
import json
import os
import stat

import pytest
import torch

from nanlab import faults
from nanlab.errors import NanlabError
from nanlab.runs.atomic import atomic_torch_save, atomic_write, atomic_write_with
from nanlab.runs.checkpoint import CheckpointStore, atomic_save, safe_load
from nanlab.runs.record import RunRecord
from nanlab.train.batches import map_tensors, named_tensors, replace_tensor, tensor_at, tensor_paths


@dataclasses.dataclass
class Batch:
    features: torch.Tensor
    extra: dict
    targets: torch.Tensor


Pair = collections.namedtuple("Pair", "x y")


def nested():
    return Batch(torch.zeros(2), {"mask": torch.ones(2).bool(), "more": [torch.ones(1)]},
                 torch.zeros(2).long())


# -- the walker ---------------------------------------------------------------------------
def test_paths_and_names_walk_the_same_tensors_in_the_same_order():
    b = nested()
    assert [p for p, _ in tensor_paths(b)] == [("features",), ("extra", "mask"),
                                               ("extra", "more", 0), ("targets",)]
    assert [n for n, _ in named_tensors(b)] == ["features", "extra[mask]", "extra[more][0]",
                                                "targets"]
    assert [n for n, _ in named_tensors([b], "batch")][:2] == ["batch[0].features",
                                                               "batch[0].extra[mask]"]


@pytest.mark.parametrize("where", [("extra", "more", 0), "extra[more][0]"])
def test_replace_tensor_rebuilds_only_the_path_and_keeps_the_containers(where):
    b = nested()
    new = replace_tensor(b, where, torch.full((1,), 5.0))
    assert isinstance(new, Batch) and isinstance(new.extra["more"], list)
    assert tensor_at(new, where).item() == 5.0 and b.extra["more"][0].item() == 1.0
    assert new.features is b.features and new.extra["mask"] is b.extra["mask"]


def test_replace_tensor_keeps_tuples_named_tuples_and_a_bare_tensor():
    t = replace_tensor((torch.zeros(1), torch.ones(1)), (1,), torch.zeros(1))
    assert type(t) is tuple and t[1].item() == 0.0
    p = replace_tensor(Pair(torch.zeros(1), 3), "[0]", torch.ones(1))
    assert isinstance(p, Pair) and p.x.item() == 1.0 and p.y == 3
    assert replace_tensor(torch.zeros(1), (), torch.ones(1)).item() == 1.0
    with pytest.raises(NanlabError, match="no tensor named 'labels'.*'features'"):
        replace_tensor(nested(), "labels", torch.ones(1))


def test_map_tensors_moves_every_tensor_and_leaves_the_rest():
    out = map_tensors({"p": Pair(torch.ones(1), "id"), "n": 3}, lambda t: t.half())
    assert out["p"].x.dtype == torch.float16 and out["p"].y == "id" and out["n"] == 3


def test_a_fault_finds_inputs_and_labels_through_the_walker():
    """Top-level tensors first (as before), then nested ones; the container survives."""
    batch = {"input": {"x": torch.ones(2, 3)}, "y": torch.zeros(2).long()}
    inj = faults.inject("nan_input", batches=lambda i: batch, at_step=0)
    out = inj.batches(0)
    assert torch.isnan(out["input"]["x"]).any() and not torch.isnan(batch["input"]["x"]).any()
    assert out["y"] is batch["y"]
    pair = faults.inject("all_masked", batches=lambda i: Pair(torch.ones(2), torch.ones(2).long()),
                         at_step=0).batches(0)
    assert isinstance(pair, Pair) and (pair.y == -100).all()
    with pytest.raises(NanlabError, match="integer label tensor; got dict; name it with"):
        faults.inject("all_masked", batches=lambda i: {"x": torch.ones(1)}, at_step=0).batches(0)


# -- the writer ---------------------------------------------------------------------------
def test_atomic_write_writes_bytes_and_text_and_keeps_the_mode(tmp_path):
    path = tmp_path / "deep" / "f.txt"
    atomic_write(path, "a\nb\n")
    assert path.read_bytes() == b"a\nb\n"
    umask = os.umask(0)
    os.umask(umask)
    assert stat.S_IMODE(path.stat().st_mode) == 0o666 & ~umask  # not mkstemp's 0o600
    os.chmod(path, 0o640)
    atomic_write(path, b"\x00")
    assert path.read_bytes() == b"\x00" and stat.S_IMODE(path.stat().st_mode) == 0o640


def test_a_failed_write_leaves_the_old_file_and_no_temporary_file(tmp_path):
    path = tmp_path / "ckpt.pt"
    atomic_torch_save({"step": 1}, path)

    def half_then_crash(f):
        f.write(b"half a checkpoint")
        raise KeyboardInterrupt

    with pytest.raises(KeyboardInterrupt):
        atomic_write_with(path, half_then_crash)
    assert safe_load(path) == {"step": 1}
    assert sorted(p.name for p in tmp_path.iterdir()) == ["ckpt.pt"]


def test_checkpoints_progress_and_manifests_go_through_the_one_writer(tmp_path, monkeypatch):
    import nanlab.runs.atomic as atomic
    from nanlab.course import progress
    from nanlab.course.notebooks import atomic_write as notebook_writer

    written = []
    real = atomic._replacing

    def spy(path):
        written.append(path.name)
        return real(path)

    monkeypatch.setattr(atomic, "_replacing", spy)
    atomic_save({"w": torch.ones(1)}, tmp_path / "a.pt")
    CheckpointStore(tmp_path / "ckpt").save(3, {"step": 3})
    progress.record("01_numbers", "x", correct=True, path=tmp_path / "progress.json")
    rec = RunRecord(tmp_path / "run", manifest={"seed": 0})
    rec.write_manifest()
    rec.close()
    notebook_writer(tmp_path / "lab.py", "# %%\n")
    assert set(written) == {"a.pt", "ckpt_000003.pt", "progress.json", "manifest.json", "lab.py"}
    assert json.loads((tmp_path / "run" / "manifest.json").read_text())["seed"] == 0
