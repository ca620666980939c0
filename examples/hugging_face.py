"""A Hugging Face model: a tiny Llama built from its config (nothing is downloaded),
trained by nanlab's Trainer, broken by a batch whose labels are all masked, diagnosed,
then guarded."""
import torch
from transformers import LlamaConfig, LlamaForCausalLM

from nanlab import faults
from nanlab.debug import diagnose
from nanlab.guard import Guard
from nanlab.train import TrainConfig, Trainer


def batches(step):  # token ids that count upwards from a random start
    start = torch.randint(0, 48, (8, 1), generator=torch.Generator().manual_seed(step))
    ids = start + torch.arange(16)
    return {"input_ids": ids, "labels": ids.clone()}


def build(config):
    torch.manual_seed(config.seed)
    model = LlamaForCausalLM(LlamaConfig(vocab_size=64, hidden_size=32, intermediate_size=64,
                                         num_hidden_layers=2, num_attention_heads=2,
                                         max_position_embeddings=32))
    # at step 40 every label is -100 (all prompt, no target): the mean loss is 0 / 0
    injection = faults.inject("all_masked", batches=batches, labels="labels", at_step=40)
    return Trainer(config, model=model, batches=injection.batches,
                   loss_fn=lambda model, batch: model(**batch).loss)


config = TrainConfig(steps=100, lr=3e-3, checkpoint_every=10, progress=False)
trainer = build(config)
trainer.run()
print(diagnose(trainer, build=build).report())

guarded = build(config)  # the same fault again, this time survived by the guard
guard = Guard("recover").attach(guarded)
guarded.run()
summary = guard.summary()
print(f"guard: {summary['incidents']} incident, {summary['rollbacks']} rollback; "
      f"final loss {guarded.record.steps[-1]['loss']:.2f}")
