"""Two gloo processes on the CPU, a bad batch on rank 1 only (see nanlab.distributed)."""

import math

import pytest
import torch

from nanlab import distributed
from nanlab.distributed import launch, replica_gap, replicas_identical, train_data_parallel
from nanlab.errors import NanlabError
from nanlab.guard import agree, is_distributed

# Short runs: the bad batch is rank 1's 11th (local index 11) for NaN. A garbled shard
# spikes the loss only once the model predicts with confidence (at step 11 it is 1.34x
# the other rank's loss, at step 24 2.8x), and the detector gets a shorter window than
# its default: the loss still falls steeply this early, which inflates sigma (with
# window 20 the garbled batch scores z = 4.8 at step 24, with window 10 z = 11.6).
RUN = {"steps": 14, "at_step": 11, "checkpoint_every": 5}
SPIKE_RUN = {"steps": 25, "at_step": 24, "checkpoint_every": 5}
DETECTOR = {"window": 10, "warmup": 10}


def both(results: list[list[dict]], i: int) -> tuple[dict, dict]:
    return results[0][i], results[1][i]


def test_nan_on_one_rank_reaches_every_rank_through_ddp():
    runs = [{**RUN, "fault": "nan_input", "guard": None},
            {**RUN, "fault": "nan_input", "guard": {"mode": "skip"}},
            {**RUN, "fault": "nan_input", "guard": {"mode": "skip", "sync_ranks": False}}]
    results = launch(train_data_parallel, 2, runs)

    r0, r1 = both(results, 0)  # no guard
    assert math.isnan(r1["losses"][11]) and math.isfinite(r0["losses"][11])  # local loss
    assert not r0["finite"] and not r1["finite"]  # DDP averaged rank 1's NaN gradient in
    assert replicas_identical([r0["params"], r1["params"]])  # identically destroyed

    for i in (1, 2):  # guarded: with the flag all-reduce, and without it
        r0, r1 = both(results, i)
        assert r0["skipped"] == r1["skipped"] == [11]
        assert r0["finite"] and r1["finite"]
        assert replicas_identical([r0["params"], r1["params"]])
    # rank 0's own loss was finite: it saw the NaN in the averaged gradients itself
    r0, _ = both(results, 2)
    reason = next(e for e in r0["events"] if e["kind"] == "guard")["reason"]
    assert reason.startswith("non-finite grad norm (loss 2.")


def test_a_spike_on_one_rank_needs_the_all_reduce():
    runs = [{**SPIKE_RUN, "fault": "garbled", "guard": {"spike": "skip", **DETECTOR}},
            {**SPIKE_RUN, "fault": "garbled", "guard": {"spike": "skip", "sync_ranks": False,
                                                        **DETECTOR}},
            {**SPIKE_RUN, "fault": "garbled", "guard": {"spike": "recover", **DETECTOR}}]
    results = launch(train_data_parallel, 2, runs)

    r0, r1 = both(results, 0)  # the flags all-reduced: both skip, still bit-identical
    assert r1["losses"][24] > 2 * r0["losses"][24]  # only rank 1's shard is garbled
    assert r0["skipped"] == r1["skipped"] == [24]
    assert replicas_identical([r0["params"], r1["params"]])
    reason = next(e for e in r0["events"] if e["kind"] == "guard")["reason"]
    assert reason.startswith("loss spike on another rank")

    r0, r1 = both(results, 1)  # each rank alone: rank 1 skips, rank 0 steps, they drift
    assert r0["skipped"] == [] and r1["skipped"] == [24]
    assert not replicas_identical([r0["params"], r1["params"]])
    assert replica_gap([r0["params"], r1["params"]]) > 1e-4

    r0, r1 = both(results, 2)  # recover: both roll back together
    for r in (r0, r1):
        (rollback,) = [e for e in r["events"] if e["kind"] == "rollback"]
        assert (rollback["step"], rollback["to_step"]) == (24, 20)
    assert replicas_identical([r0["params"], r1["params"]])


def test_helpers_outside_a_process_group():
    assert agree(True, False) == (True, False)
    assert not is_distributed()
    with pytest.raises(NanlabError, match="process group"):
        distributed.ddp_trainer()
    assert replicas_identical([torch.tensor([float("nan")])] * 2)
    assert distributed.shard(lambda i: i, 0, 3)(2) == 6


def test_a_bit_flip_on_one_rank_is_transient_on_both():
    """Silent data corruption on rank 1's device: one exponent bit of its first nn.Linear
    output flips once (nanlab.faults.hardware). DDP averages rank 1's NaN gradient into
    rank 0's; with rerun=True both ranks run the step again, agree that it is clean
    (the verdict is all-reduced) and apply the rerun's update: the run is the clean one.
    With the same settings a NaN in the data is still persistent, and skipped."""
    guard = {"mode": "skip", "rerun": True}
    runs = [{**RUN, "fault": None, "guard": None},
            {**RUN, "fault": "bit_flip", "guard": None},
            {**RUN, "fault": "bit_flip", "guard": guard},
            {**RUN, "fault": "nan_input", "guard": guard}]
    results = launch(train_data_parallel, 2, runs)
    clean0, _ = both(results, 0)

    r0, r1 = both(results, 1)  # no guard: rank 1's flip destroys both replicas
    assert math.isnan(r1["losses"][11]) and math.isfinite(r0["losses"][11])
    assert not r0["finite"] and not r1["finite"]

    r0, r1 = both(results, 2)
    for r in (r0, r1):
        (rerun,) = [e for e in r["events"] if e["kind"] == "rerun"]
        assert (rerun["step"], rerun["verdict"]) == (11, "transient")
        assert r["skipped"] == [] and r["finite"] and r["guard"]["transient"] == 1
    assert replicas_identical([r0["params"], r1["params"], clean0["params"]])

    r0, r1 = both(results, 3)
    for r in (r0, r1):
        (rerun,) = [e for e in r["events"] if e["kind"] == "rerun"]
        assert (rerun["step"], rerun["verdict"]) == (11, "persistent")
        assert r["skipped"] == [11] and r["finite"]
    assert replicas_identical([r0["params"], r1["params"]])
