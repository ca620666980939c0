"""The guard in a Hugging Face Trainer: a tiny GPT-2 (built from its config, nothing is
downloaded) reads a stream of token sequences as feature rows; one reading in batch 30
is NaN. Unguarded, AdamW writes NaN into every weight at step 31; GuardCallback rolls back
to step 30, skips the batches around the bad one, and the run trains on."""
import math

import torch
from torch.utils.data import IterableDataset
from transformers import GPT2Config, GPT2LMHeadModel, Trainer, TrainingArguments

from nanlab.guard.hf import GuardCallback

features_of = torch.randn(64, 32, generator=torch.Generator().manual_seed(0))  # per token


class Stream(IterableDataset):  # token ids counting upwards from a random start, in order
    def __iter__(self):
        for i in range(10**6):
            start = torch.randint(0, 64, (1,), generator=torch.Generator().manual_seed(i))
            ids = (start + torch.arange(16)) % 64
            rows = features_of[ids].clone()
            if i == 30 * 8 + 3:  # in batch 30, a glitch: one reading is NaN
                rows[3, 5] = float("nan")
            yield {"inputs_embeds": rows, "labels": ids}


torch.manual_seed(0)
model = GPT2LMHeadModel(GPT2Config(vocab_size=64, n_positions=16, n_embd=32, n_layer=2,
                                   n_head=2, bos_token_id=0, eos_token_id=0))
args = TrainingArguments(output_dir="runs/guard_hf", max_steps=60, learning_rate=3e-3,
                         per_device_train_batch_size=8, use_cpu=True, report_to=[],
                         save_strategy="no", logging_steps=20)
guard = GuardCallback("recover", keep_every=10)  # a snapshot in memory every 10 steps
trainer = Trainer(model=model, args=args, train_dataset=Stream(), callbacks=[guard])
result = trainer.train()

for entry in trainer.state.log_history:
    if "nanlab_guard" in entry:  # the guard's actions, in the Trainer's own log
        print(entry["step"], entry["nanlab_guard"], entry["reason"])
summary = guard.summary()
print(f"guard: {summary['incidents']} incident, {summary['rollbacks']} rollback; "
      f"training loss {result.training_loss:.2f}, finite: {math.isfinite(result.training_loss)}")
