"""Each spike rule on hand-made sequences that should and should not trigger it (its
warm-up, its one-sidedness, what a NaN does to it), the table's arithmetic on a tiny
corpus with known answers, and ``nanlab detectors --quick --json``."""

from __future__ import annotations

import json
import math

import numpy as np
import pytest

from nanlab.cli import main
from nanlab.faults.corpus import Run, best, score
from nanlab.guard.detectors import (
    RULES,
    Detector,
    Lightning,
    LLMFoundry,
    Megatron,
    Nanlab,
    OlmoCore,
    ZClip,
    alarms,
    make_detector,
)

NAN = math.nan


def replay(detector: Detector, losses, norms=None) -> list[bool]:
    norms = [1.0] * len(losses) if norms is None else norms
    return alarms(detector, losses, norms)


def wobble(n: int, base: float = 1.0) -> list[float]:
    """A healthy, slightly noisy series (so that a std is not zero)."""
    return [base * (1.0 + 0.05 * ((i * 7) % 5 - 2) / 2) for i in range(n)]


def test_every_rule_names_its_source():
    for name in RULES:
        d = make_detector(name)
        assert d.name == name and d.source and d.summary


# --- Megatron-LM: 10x the max of the first 100 finite losses --------------------------
def test_megatron_warm_up_then_ten_times_the_max():
    assert not any(replay(Megatron(), [1.0] * 99 + [50.0]))  # inside the 100 samples
    flags = replay(Megatron(), [2.0] * 100 + [19.9, 20.0, 100.0, 2.0])
    assert flags[100:] == [False, True, True, False]


def test_megatron_ignores_nan_and_never_fires_low():
    seq = [NAN] * 5 + [2.0] * 100 + [NAN, math.inf, 0.0, 20.0]
    flags = replay(Megatron(), seq)
    assert not any(flags[:107]) and flags[107:] == [False, True]  # NaN not counted, not an alarm


# --- Lightning SpikeDetection: >= 3x the running mean of 10, and not improving --------
def test_lightning_three_times_the_mean():
    assert replay(Lightning(), [1.0] * 10 + [3.0])[-1]
    assert not replay(Lightning(), [1.0] * 10 + [2.9])[-1]
    assert not replay(Lightning(), [1.0] * 10 + [0.01])[-1]  # a drop is "better"


def test_lightning_warm_up_and_the_improvement_gate():
    assert not replay(Lightning(), [100.0])[0]  # batch 0 < warmup 1
    d = Lightning(warmup=10)
    replay(d, [0.001] * 9 + [1.0])  # kept while warming up: last value 1.0, mean ~0.1
    assert d.observe(0.9, 1.0) is False  # 9x the mean, but lower than the last value
    assert d.observe(1.1, 1.0) is True


def test_lightning_nan_is_a_spike_but_poisons_while_warming_up():
    assert replay(Lightning(), [1.0] * 5 + [NAN])[-1]  # finite_only=True: NaN is a spike
    flags = replay(Lightning(), [NAN] + [1.0] * 5 + [100.0] + [1.0] * 10 + [100.0])
    assert flags[6] is False  # the warm-up NaN is in the mean: nothing compares
    assert flags[-1] is True  # ten values later it has left the window


# --- llm-foundry KillLossSpike: 2x the mean of 100, five in a row ----------------------
def test_llm_foundry_five_outliers_in_a_row():
    assert replay(LLMFoundry(), [1.0] * 100 + [10.0] * 5)[100:] == [False] * 4 + [True]
    assert not any(replay(LLMFoundry(), [1.0] * 100 + [10.0] * 4 + [1.0] + [10.0] * 4))


def test_llm_foundry_waits_for_a_full_window_and_is_one_sided():
    assert not any(replay(LLMFoundry(), [1.0] * 50 + [10.0] * 20))
    assert not any(replay(LLMFoundry(), [1.0] * 100 + [0.01] * 20))


def test_llm_foundry_nan_blinds_it_for_a_window():
    flags = replay(LLMFoundry(), [1.0] * 99 + [NAN] + [10.0] * 10)
    assert not any(flags)


# --- OLMo-core SkipStepOptimizer: mean + 6 std of 128, one-sided, after 64 ------------
def test_olmo_core_warm_up_of_64_losses():
    assert not replay(OlmoCore(), wobble(62) + [100.0])[-1]  # 63 kept: not yet
    assert replay(OlmoCore(), wobble(63) + [100.0])[-1]  # the 64th decides


def test_olmo_core_is_one_sided_and_watches_the_grad_norm():
    assert not replay(OlmoCore(), wobble(100) + [0.0])[-1]  # far below: not skipped
    assert replay(OlmoCore(), wobble(100) + [1.0], wobble(100) + [50.0])[-1]
    assert not replay(OlmoCore(watch_grad_norm=False), wobble(101), wobble(100) + [50.0])[-1]
    assert not replay(OlmoCore(), wobble(100) + [1.06])[-1]  # within 6 std


def test_olmo_core_nan_poisons_its_window_and_the_finite_variant_survives():
    seq = wobble(80) + [NAN] + wobble(140)
    flags = replay(OlmoCore(), seq)
    assert all(flags[81:81 + 128]) and not any(flags[81 + 128:])  # 128 healthy steps skipped
    assert not any(replay(OlmoCore(finite=True), seq)[81:])


# --- ZClip: EMA z-score of the grad norm > 2.5, after 25 ------------------------------
def test_zclip_warm_up_and_threshold():
    assert not any(replay(ZClip(), [1.0] * 25, wobble(24) + [100.0]))
    assert replay(ZClip(), [1.0] * 27, wobble(26) + [100.0])[-1]
    assert not replay(ZClip(), [100.0] * 27, wobble(27))[-1]  # the loss is not watched


def test_zclip_is_one_sided():
    assert not replay(ZClip(), [1.0] * 31, wobble(30) + [0.0])[-1]


def test_zclip_nan_poisons_the_ema_for_ever():
    norms = wobble(30) + [NAN] + wobble(20) + [100.0]
    assert not any(replay(ZClip(), [1.0] * len(norms), norms))
    assert replay(ZClip(finite=True), [1.0] * len(norms), norms)[-1]


# --- nanlab: z > 6 over 20 finite values and >= 1.5x the mean --------------------------
def test_nanlab_warm_up_one_sided_and_the_relative_gate():
    assert not replay(Nanlab(), wobble(3) + [100.0])[-1]  # WARMUP = 4 finite values
    assert replay(Nanlab(), wobble(4) + [100.0])[-1]
    assert not replay(Nanlab(), wobble(30) + [0.0])[-1]
    # a flat stretch: a tiny wobble has a huge z but is not 1.5x the mean
    assert not replay(Nanlab(), [1.0] * 30 + [1.4])[-1]
    assert replay(Nanlab(), [1.0] * 30 + [1.6])[-1]


def test_nanlab_survives_a_nan():
    flags = replay(Nanlab(), wobble(30) + [NAN] + wobble(30) + [100.0])
    assert not any(flags[:-1]) and flags[-1]


# --- the table's arithmetic on a corpus with known answers ----------------------------
class Above(Detector):
    name, summary, source = "above", "loss > 4", "test"

    def observe(self, loss, grad_norm):
        return loss > 4.0


def make(label, losses, incident=None, first_bad=None, kind="spike"):
    losses = np.array(losses, dtype=float)
    return Run(label, kind, losses, np.ones_like(losses), incident, True, first_bad)


def test_score_counts_true_and_false_alarms_misses_and_lead():
    runs = [make("clean", [1, 1, 1, 1, 5, 1, 1, 1, 1, 1], kind="clean"),  # 1 false alarm
            make("spike", [1, 1, 1, 1, 1, 5, 5, 1, 1, 1], (4, 8)),  # detected, 2 true
            make("missed", [1, 1, 1, 2, 2, 1], (3, 5)),  # missed
            make("to nan", [1, 1, 1, 5, 5, NAN, NAN], (2, 5), first_bad=5),  # lead 2
            make("instant", [1, 1, NAN], (2, 2), first_bad=2)]  # cannot be detected
    s = score(Above, runs)
    assert (s.detected, s.detectable) == (2, 3)
    assert (s.true_alarms, s.false_alarms) == (4, 1)
    healthy = 10 + 6 + 4 + 2 + 2  # clean; outside each incident; before a run died
    assert s.healthy_steps == healthy
    assert s.false_per_1000 == pytest.approx(1000 / healthy)
    assert s.precision == pytest.approx(0.8) and s.leads == [2] and s.median_lead == 2


def test_best_is_the_highest_recall_under_the_false_alarm_bar():
    runs = [make("clean", [1, 1, 1, 1, 5, 1, 1, 1, 1, 1] * 10, kind="clean"),
            make("spike", [1, 1, 1, 3, 3, 1], (2, 5))]

    class Low(Above):
        name = "low"

        def observe(self, loss, grad_norm):
            return loss > 2.0

    scores = [score(Above, runs), score(Low, runs)]
    assert scores[1].recall == 1.0 and scores[0].recall == 0.0
    assert best(scores, max_false=100.0).rule == "low"
    assert best(scores, max_false=1.0) is None  # both raise 10 per 1,000


# --- the command ----------------------------------------------------------------------
def test_cli_quick_json(capsys):
    assert main(["detectors", "--quick", "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["corpus"]["runs"] == 5 and out["corpus"]["incidents"] == 3
    rows = {r["rule"]: r for r in out["rules"]}
    assert set(rows) == set(RULES)
    assert rows["nanlab"]["recall"] == 1.0
    assert rows["nanlab"]["false_alarms_per_1000_healthy_steps"] == 0.0
    assert rows["olmo_core"]["false_alarms"] > rows["olmo_core_finite"]["false_alarms"]
    assert out["best"] in RULES and out["seconds"]["corpus"] > 0


def test_cli_bad_flag_is_one_line(capsys):
    assert main(["detectors", "--size", "huge"]) == 2
    assert capsys.readouterr().err.count("\n") == 1
