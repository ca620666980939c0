"""Everything that decides a run, in one dataclass, with the reason beside each knob.

The trainer (:mod:`nanlab.train`) reads it; the manifest of every run stores it, so a
run folder can be rebuilt and replayed exactly (``TrainConfig.from_dict``).
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field

from nanlab.errors import NanlabError, check_choice, check_range
from nanlab.toy.model import GPTConfig

PRECISIONS = ("fp32", "fp16", "bf16", "fp16-pure")
# Fault switches that older manifests hold, with their off value: each fault now acts
# through a lever on the built run (nanlab.faults), recorded as the manifest's "fault".
RETIRED = {"loss_impl": "torch", "accum_norm": "tokens", "scaler_update": "step",
           "freeze": "", "freeze_until": 0, "restart_at": 0, "restart_warmup": 0}
RETIRED_MODEL = {"softmax": "stable", "pos_offset": 0, "mlp_bias_init": 0.0,
                 "init_scale": 1.0, "norm_impl": "torch"}


def _without_retired(d: dict, retired: dict, prefix: str) -> dict:
    for name, off in retired.items():
        if name in d and d[name] != off:
            raise NanlabError(
                f"this manifest sets {prefix}{name}={d[name]!r}, a fault switch of an older "
                "nanlab; faults are now levers recorded under the manifest's \"fault\": "
                "rerun the fault with this version (nanlab run --fault NAME)")
    return {k: v for k, v in d.items() if k not in retired}
RESUMABLE = ("optimizer", "scheduler")  # state a resume can forget (TrainConfig.resume_skips)


@dataclass
class TrainConfig:
    """Everything that decides a run. Defaults give the clean baseline.

    >>> config = TrainConfig(steps=100, lr=5e-2, warmup_steps=0, precision="fp16")
    >>> config.replace(lr=5e-3, model={"n_layer": 4}).model.n_layer   # a changed copy
    4
    >>> TrainConfig(precision="fp8")
    Traceback (most recent call last):
    ...
    nanlab.errors.NanlabError: precision='fp8' is not allowed; choose one of ...
    """

    steps: int = 200
    seed: int = 0
    device: str = "auto"  # "auto" picks CUDA when present, else the CPU
    # fp32; fp16 = fp16 autocast (+ GradScaler); bf16 = bf16 autocast (fp32's range,
    # no scaler needed); fp16-pure = the whole model and optimizer state in fp16.
    precision: str = "fp32"
    grad_scaler: bool | None = None  # None: on for fp16 autocast, off otherwise
    optimizer: str = "adamw"  # "adamw" | "sgd" (with momentum)
    lr: float = 5e-3
    # Warmup: the LR ramps up linearly over the first steps, while Adam's second-moment
    # estimate is still noisy and a full-size update can throw the weights off.
    warmup_steps: int = 20
    schedule: str = "cosine"  # "cosine" decays to min_lr_ratio * lr; "constant" does not
    decay_steps: int | None = None  # cosine length; None = steps
    min_lr_ratio: float = 0.1
    weight_decay: float = 0.0
    beta1: float = 0.9
    beta2: float = 0.95
    adam_eps: float = 1e-8  # below fp16's smallest subnormal (~6e-8): rounds to 0 in fp16
    momentum: float = 0.9  # SGD only
    # Clip the global grad norm to this value; 0 turns clipping off (the default, so
    # the course can show what clipping does and does not cure).
    grad_clip: float = 0.0
    batch_size: int = 32
    # Fraction of sequences that are short and padded with model.pad_id (which must be
    # the last token id, model.vocab_size - 1); 0 = no padding.
    pad_prob: float = 0.0
    z_loss: float = 0.0  # weight of the z-loss, z * log(Z)^2 (PaLM used 1e-4); 0 = off
    checkpoint_every: int = 50  # 0 = no checkpoints
    # Checkpoints kept: 0 = all; k = the newest k, plus the newest one whose weights and
    # optimizer state are all finite, kept beyond k (CheckpointStore.rotate) so a run that
    # trains on NaN for k checkpoints cannot rotate its last good state away. Hugging
    # Face's save_total_limit bounds checkpoints the same way (src/transformers/trainer.py,
    # _rotate_checkpoints / _sorted_checkpoints: the best model's checkpoint is kept beyond
    # it, PR #11748), Lightning's ModelCheckpoint(save_top_k=k) by the best k of a metric.
    keep_checkpoints: int = 0
    # What a job restart (a preemption, Trainer.restart) loads from its checkpoint: the
    # weights, the step, the data position and the RNG always; ``resume_skips`` names the
    # state the resume code forgets, which then starts fresh as a new process builds it:
    # "optimizer" (a new AdamW: m = v = 0, step 0) and / or "scheduler" (the LR schedule
    # from step 0: warmup again, then the peak). What a resume loads is a real setting of
    # large-run frameworks (Megatron-LM's --no-load-optim, "Do not load optimizer when
    # loading checkpoint", in megatron/training/arguments.py, _add_checkpointing_args).
    resume_skips: tuple = ()
    # Gradient accumulation: each step's batch is cut into this many micro-batches, each
    # forward and backward on its own, one optimizer step on the summed gradients
    # (nanlab.train.accum). 1 = one pass over the whole batch.
    accum_steps: int = 1
    record_every: int = 10  # per-layer statistics every this many steps; 0 = never
    out_dir: str | None = None  # None keeps everything in memory
    progress: bool = True
    model: GPTConfig = field(default_factory=GPTConfig)

    def __post_init__(self) -> None:
        if isinstance(self.model, dict):
            self.model = GPTConfig(**self.model)
        if not isinstance(self.model, GPTConfig):
            raise NanlabError(f"model={self.model!r} is not allowed; give a GPTConfig or a dict "
                              "of its fields")
        if self.grad_scaler not in (None, True, False):
            raise NanlabError(f"grad_scaler={self.grad_scaler!r} is not allowed; choose None "
                              "(on for fp16 autocast), True or False")
        check_range("seed", self.seed, 0, 2**63 - 1, integer=True)  # torch.manual_seed's range
        for name, low in (("steps", 1), ("warmup_steps", 0), ("batch_size", 2),
                          ("checkpoint_every", 0), ("keep_checkpoints", 0), ("record_every", 0),
                          ("accum_steps", 1)):
            check_range(name, getattr(self, name), low, integer=True)
        if self.decay_steps is not None:
            check_range("decay_steps", self.decay_steps, 1, integer=True)
        for name, high in (("lr", 1e6), ("min_lr_ratio", 1.0), ("weight_decay", 10.0),
                           ("beta1", 1.0), ("beta2", 1.0), ("adam_eps", 1.0), ("momentum", 1.0),
                           ("grad_clip", None), ("pad_prob", 1.0), ("z_loss", 1.0)):
            check_range(name, getattr(self, name), 0.0, high)
        for name, allowed in (("precision", PRECISIONS), ("optimizer", ["adamw", "sgd"]),
                              ("schedule", ["cosine", "constant"])):
            check_choice(name, getattr(self, name), allowed)
        if isinstance(self.resume_skips, str):
            self.resume_skips = (self.resume_skips,)
        if not isinstance(self.resume_skips, (tuple, list)):
            raise NanlabError(f"resume_skips={self.resume_skips!r} is not allowed; give a "
                              f"tuple of {', '.join(map(repr, RESUMABLE))}")
        self.resume_skips = tuple(self.resume_skips)  # a manifest's JSON list comes back
        for part in self.resume_skips:
            check_choice("resume_skips", part, RESUMABLE)
        if self.pad_prob and self.model.pad_id != self.model.vocab_size - 1:
            raise NanlabError(
                f"pad_prob={self.pad_prob} needs model.pad_id = model.vocab_size - 1 = "
                f"{self.model.vocab_size - 1}; got pad_id={self.model.pad_id}")
        if not isinstance(self.device, str) or not (
            self.device in ("auto", "cpu", "cuda") or self.device.startswith("cuda:")
        ):
            raise NanlabError(f"device={self.device!r} is not allowed; "
                              "choose 'auto', 'cpu', 'cuda' or 'cuda:N'")
        if self.precision == "fp16-pure" and self.grad_scaler:
            raise NanlabError("grad_scaler=True is not allowed with precision='fp16-pure': "
                              "GradScaler cannot unscale fp16 gradients; use precision='fp16'")

    def to_dict(self) -> dict:
        return dataclasses.asdict(self)

    @classmethod
    def from_dict(cls, d: dict) -> TrainConfig:
        """The config a manifest holds. A run folder written before a fault's switch left
        the config (it is now a lever, recorded under the manifest's "fault") still loads
        when the switch was off; one that was on is refused in a line.

        >>> TrainConfig.from_dict({"steps": 5, "loss_impl": "torch"}).steps
        5
        >>> TrainConfig.from_dict({"loss_impl": "naive"})
        Traceback (most recent call last):
        ...
        nanlab.errors.NanlabError: this manifest sets loss_impl='naive', a fault switch ...
        """
        d = _without_retired(d, RETIRED, "")
        if isinstance(d.get("model"), dict):
            d = {**d, "model": _without_retired(d["model"], RETIRED_MODEL, "model.")}
        known = {f.name for f in dataclasses.fields(cls)}
        unknown = sorted(set(d) - known)
        if unknown:
            raise NanlabError(f"unknown TrainConfig field(s) {unknown}; allowed: {sorted(known)}")
        return cls(**d)

    def replace(self, **changes) -> TrainConfig:
        """A copy with some fields changed; ``model=`` may be a dict of GPTConfig changes."""
        model = changes.pop("model", None)
        if isinstance(model, dict):
            changes["model"] = dataclasses.replace(self.model, **model)
        elif model is not None:
            changes["model"] = model
        return dataclasses.replace(self, **changes)
