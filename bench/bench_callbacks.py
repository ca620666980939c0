"""What the guard callbacks cost per step on a healthy run, in each framework's own loop.

Prints numbers and asserts nothing. For ``transformers.Trainer`` and ``lightning.Trainer``,
each training the same GPT-2 built from a tiny config (nothing downloaded; one torch
thread, CPU):

(a) the median step time of the bare loop and of the loop with ``GuardCallback("skip")``
    and ``GuardCallback("recover")`` (no fault: the guard only watches; recover also keeps
    a snapshot every ``keep_every`` steps). Runs alternate bare / bare again / skip /
    recover, ``--rounds`` times, and the overhead is the ratio of medians over all rounds.
    "bare again" is the noise: two identical loops differ by that much on this machine now.
(b) the callback's own time per step, timed inside its hooks (the forward hook that reads
    the loss, the check before the optimizer step, the snapshot, the step end), as a share
    of the bare step: what the callback adds, free of the neighbours' noise.
    Floor: 3 %.

Times are this process's CPU seconds (``time.process_time``, one torch thread): on a
machine shared with other jobs, wall-clock step times swing by tens of percent, CPU
time hardly moves. (On a GPU the wall clock is what counts; this bench runs on the CPU.)

Run:  python bench/bench_callbacks.py  [--steps 200 --rounds 3 --keep-every 50]
The last line is JSON, to quote.
"""

from __future__ import annotations

import argparse
import functools
import json
import os
import statistics
import tempfile
import time
import warnings

import torch
from torch.utils.data import Dataset

VOCAB, LENGTH, BS = 64, 32, 8
CLOCK = time.process_time  # CPU seconds of this process: a busy neighbour does not count
HOOKS = {"hf": ("on_step_begin", "_read_output", "on_pre_optimizer_step", "on_step_end"),
         "lightning": ("on_train_batch_start", "on_before_backward",
                       "on_before_optimizer_step", "on_train_batch_end")}


class Sequences(Dataset):
    """Token ids counting up from a random start (the task of tests/test_guard_hf.py)."""

    def __init__(self, n: int):
        g = torch.Generator().manual_seed(0)
        start = torch.randint(0, VOCAB, (n, 1), generator=g)
        self.ids = (start + torch.randint(1, 4, (n, 1), generator=g)
                    * torch.arange(LENGTH)) % VOCAB

    def __len__(self):
        return len(self.ids)

    def __getitem__(self, i):
        return {"input_ids": self.ids[i], "labels": self.ids[i]}


def gpt2():
    from transformers import GPT2Config, GPT2LMHeadModel

    torch.manual_seed(0)
    return GPT2LMHeadModel(GPT2Config(vocab_size=VOCAB, n_positions=LENGTH, n_embd=64,
                                      n_layer=2, n_head=2, bos_token_id=0, eos_token_id=0))


def timed(fn, spent: list[float]):
    @functools.wraps(fn)
    def wrapper(*args, **kwargs):
        start = CLOCK()
        try:
            return fn(*args, **kwargs)
        finally:
            spent[0] += CLOCK() - start
    return wrapper


def guard(framework: str, mode: str | None, keep_every: int, spent: list[float]):
    """The callback under test with its hooks timed (None for the bare loop)."""
    if mode is None:
        return None
    if framework == "hf":
        from nanlab.guard.hf import GuardCallback
    else:
        from nanlab.guard.lightning import GuardCallback
    callback = GuardCallback(mode, keep_every=keep_every)
    for name in HOOKS[framework]:
        setattr(callback, name, timed(getattr(callback, name), spent))
    return callback


def hf_run(steps: int, callback, folder: str) -> list[float]:
    from transformers import Trainer, TrainerCallback, TrainingArguments
    from transformers.utils import logging

    logging.set_verbosity_error()
    stamps: list[float] = []

    class Clock(TrainerCallback):
        def on_step_begin(self, args, state, control, **kwargs):
            stamps.append(CLOCK())

    args = TrainingArguments(output_dir=folder, max_steps=steps, learning_rate=1e-3,
                             per_device_train_batch_size=BS, report_to=[], use_cpu=True,
                             save_strategy="no", logging_strategy="no", disable_tqdm=True,
                             seed=0, log_level="error")
    Trainer(model=gpt2(), args=args, train_dataset=Sequences(steps * BS),
            callbacks=[Clock()] + ([callback] if callback else [])).train()
    return [b - a for a, b in zip(stamps, stamps[1:], strict=False)]


def lightning_run(steps: int, callback, folder: str) -> list[float]:
    import lightning as L
    from torch.utils.data import DataLoader

    stamps: list[float] = []

    class Clock(L.Callback):
        def on_train_batch_start(self, trainer, pl_module, batch, batch_idx):
            stamps.append(CLOCK())

    class LM(L.LightningModule):
        def __init__(self):
            super().__init__()
            self.model = gpt2()

        def training_step(self, batch, batch_idx):
            return self.model(**batch).loss

        def configure_optimizers(self):
            opt = torch.optim.AdamW(self.parameters(), lr=1e-3)
            decay = torch.optim.lr_scheduler.LambdaLR(opt, lambda k: 1 - k / steps)
            return {"optimizer": opt, "lr_scheduler": {"scheduler": decay, "interval": "step"}}

    trainer = L.Trainer(max_steps=steps, accelerator="cpu", devices=1, logger=False,
                        callbacks=[Clock()] + ([callback] if callback else []),
                        enable_checkpointing=False, enable_progress_bar=False,
                        enable_model_summary=False, default_root_dir=folder)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        trainer.fit(LM(), DataLoader(Sequences(steps * BS), batch_size=BS))
    return [b - a for a, b in zip(stamps, stamps[1:], strict=False)]


def measure(framework: str, steps: int, rounds: int, keep_every: int) -> dict:
    run = hf_run if framework == "hf" else lightning_run
    # "bare again" is the same bare loop run a second time: how far two identical runs
    # differ on this machine right now, the noise any overhead below it drowns in
    kinds = {"bare": None, "bare again": None, "skip": "skip", "recover": "recover"}
    times = {k: [] for k in kinds}
    own = {k: [] for k in kinds}
    warm = 5  # the first steps build caches
    for _ in range(rounds):
        for kind, mode in kinds.items():
            spent = [0.0]
            with tempfile.TemporaryDirectory() as folder:
                per_step = run(steps, guard(framework, mode, keep_every, spent), folder)
            times[kind] += per_step[warm:]
            own[kind].append(spent[0] / steps)
    bare = statistics.median(times["bare"])
    out = {"bare_ms": round(1e3 * bare, 3),
           "noise_pct": round(100 * (statistics.median(times["bare again"]) / bare - 1), 2)}
    for kind in ("skip", "recover"):
        step = statistics.median(times[kind])
        out[f"{kind}_ms"] = round(1e3 * step, 3)
        out[f"{kind}_overhead_pct"] = round(100 * (step / bare - 1), 2)
        out[f"{kind}_own_us"] = round(1e6 * statistics.median(own[kind]), 1)
        out[f"{kind}_own_pct"] = round(100 * statistics.median(own[kind]) / bare, 2)
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=200)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--keep-every", type=int, default=50)
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--only", choices=["hf", "lightning"])
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
    results = {}
    for framework in [args.only] if args.only else ["hf", "lightning"]:
        r = measure(framework, args.steps, args.rounds, args.keep_every)
        results[framework] = r
        print(f"{framework:9s} bare {r['bare_ms']:.2f} ms/step (again: "
              f"{r['noise_pct']:+.1f} %) | "
              + " | ".join(f"{k} {r[f'{k}_ms']:.2f} ms ({r[f'{k}_overhead_pct']:+.1f} %), "
                           f"own {r[f'{k}_own_us']:.0f} us = {r[f'{k}_own_pct']:.2f} %"
                           for k in ("skip", "recover")), flush=True)
    print(json.dumps({"steps": args.steps, "rounds": args.rounds,
                      "keep_every": args.keep_every, "threads": args.threads,
                      "floor_pct": 3.0, **results}))


if __name__ == "__main__":
    main()
