"""The wording of a STAR story: what it says about each root cause, kept apart from the logic."""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

_SOP_SHORT = {
    "data": "data (数据检查)",
    "amp": "AMP off (关闭混合精度)",
    "lr": "LR / 10 (降低学习率)",
    "grad_norms": "grad norms (梯度范数)",
    "init_eps": "init / eps (初始化 / eps)",
}
_VERDICT_WORDS = {"cause": "the cause", "ruled out": "ruled out", "skipped": "not needed"}


@dataclass(frozen=True)
class _Words:
    """How a story talks about one root cause."""

    name: str  # the root cause, as a noun phrase
    mechanism: str  # how it made the failure, one sentence
    why_fix: str  # why the fix is the cure and not a workaround
    prevention: str  # what keeps it from coming back
    on_error: str = ""  # the mechanism when the run crashed instead (if it can)


_CAUSE_WORDS: dict[str, _Words] = {
    "dirty_data": _Words(
        "dirty data (脏数据) in one batch",
        "one bad batch (a non-finite input, an illegal label, a fully masked target or a "
        "zero std) poisons the loss at the step it arrives, and a single optimizer step then "
        "writes NaN into the weights, so every later step is NaN too",
        "it removes the cause at the source: the bad batch is caught before the model sees "
        "it, so the learning rate and the precision stay as they were",
        "data assertions (数据校验) right after the loader: torch.isfinite on float inputs, "
        "labels in range, at least one unmasked target, std.clamp_min(eps) when "
        "normalising; a bad batch is logged and skipped, not trained on",
        "one bad batch carried a label outside the class range; PyTorch's cross-entropy "
        "checks the range and raises (a device-side assert on CUDA), so this kind of dirty "
        "data is loud, not a silent NaN",
    ),
    "learning_rate": _Words(
        "a learning rate too high for this model (学习率过大)",
        "the oversized updates grow the weights until activations or attention scores "
        "overflow; in fp16 that shows up as inf and then NaN, in fp32 as a loss that climbs "
        "instead of falling",
        "the data and the precision were ruled out first, and a tenth of the LR trains "
        "cleanly on the same seed: the step size is the cause, not a side effect",
        "warmup (学习率预热) plus cosine decay, a short LR range test before a long run, "
        "gradient clipping (梯度裁剪) at max_norm 1.0 as a safety net, and a spike detector "
        "on the loss and the grad norm",
    ),
    "no_warmup": _Words(
        "a high learning rate with no warmup (缺少学习率预热)",
        "the first Adam steps were full size while the second-moment estimate was still "
        "noise, which threw the fresh weights far off",
        "warmup keeps the peak LR and only ramps up to it, so the noisy first steps stay "
        "small; lowering the LR for the whole run would have cost speed for nothing",
        "warmup (学习率预热) plus cosine decay as the default schedule, gradient clipping "
        "(梯度裁剪) at 1.0, and a spike detector on the first hundred steps",
    ),
    "lr_jump": _Words(
        "a learning-rate schedule glitch (学习率调度错误)",
        "the recorded LR jumped for a few steps; the burst of oversized updates knocked the "
        "model off its solution",
        "fixing the schedule removes the burst at its source; the model, the data and the "
        "precision need no change",
        "log and plot the LR every step, unit-test the scheduler (warmup, decay, resume), "
        "and alert on an LR change larger than the schedule allows",
    ),
    "fp16_overflow": _Words(
        "FP16 overflow under mixed precision (混合精度 / FP16 溢出)",
        "a value passed fp16's maximum of 65504 and became inf, and inf - inf or inf / inf "
        "then gave NaN; in fp32 and bf16 (max about 3.4e38) the same values fit",
        "bf16 has fp32's exponent range, so the value that overflowed now fits, and it needs "
        "no loss scaling",
        "bf16 where the hardware has it; otherwise torch.amp.GradScaler (损失缩放), "
        "numerically stable ops (log_softmax, a max-subtracted softmax) and fp32 for the ops "
        "that overflow; plot activation abs-max against 65504",
    ),
    "fp16_cast_overflow": _Words(
        "a value past FP16's range at a cast to FP16 (FP16 转换溢出)",
        "the value was finite in fp32 (a raw amount, a position id, an unscaled feature) and "
        "became inf at the cast to fp16, whose largest finite value is 65504; the first "
        "matmul then turned inf into NaN",
        "bf16 has fp32's exponent range (max about 3.4e38), so the same value survives the "
        "cast; the arithmetic was never the problem, the range was",
        "scale or log-transform raw inputs before the model, keep such inputs and "
        "positional encodings in fp32, and assert the largest input against the dtype's "
        "range",
    ),
    "softmax_overflow": _Words(
        "a naive softmax overflowing in FP16 (softmax 溢出)",
        "exp(x) of a score above about 11.1 overflows fp16 to inf, and inf / inf is NaN",
        "the stable softmax subtracts the row max before exp, so every exp is at most 1: the "
        "same function, computed so it cannot overflow, and fp16 keeps its speed",
        "F.softmax or scaled_dot_product_attention instead of a hand-written softmax, "
        "QK-LayerNorm or z-loss for large models, and a dashboard of the largest attention "
        "logit",
    ),
    "position_overflow": _Words(
        "position ids overflowing FP16 in the sinusoidal encoding (位置编码溢出)",
        "an absolute position past 65504 does not fit in fp16: it became inf, and sin(inf) "
        "is NaN",
        "in bf16 (or fp32) the position fits and the encoding is finite again",
        "compute positional encodings in fp32, reset positions per window, and assert the "
        "largest position id against the dtype's range",
    ),
    "adam_eps_fp16": _Words(
        "Adam's eps underflowing to 0 in pure FP16 (eps 下溢)",
        "eps = 1e-8 is below fp16's smallest subnormal (about 6e-8) and rounds to 0, so the "
        "update m / (sqrt(v) + eps) divided by zero and wrote inf or NaN into the weights",
        "fp16 autocast with a GradScaler keeps fp32 master weights and optimizer state, "
        "where 1e-8 is representable",
        "keep optimizer state and master weights in fp32 (autocast, not model.half()), and "
        "choose eps in the dtype of the optimizer state",
    ),
    "bad_init": _Words(
        "a bad initialisation (初始化不当)",
        "weights far too large for their fan-in, in a stack without LayerNorm, multiplied "
        "the activations layer after layer until they overflowed",
        "a scaled init (normal(0, 0.02), the GPT-2 recipe) with pre-LN residual blocks keeps "
        "every layer's output near unit scale; a lower LR cannot help a forward pass that "
        "overflows before the first update",
        "a standard init (normal 0.02, Xavier or He), pre-LN blocks, and a check of the "
        "activation std per layer at step 0, before the run is launched",
    ),
    "deep_explosion": _Words(
        "gradient explosion in a deep stack without LayerNorm (梯度爆炸)",
        "without norms every block adds to a residual stream that grows with each update, "
        "and the gradients grew by orders of magnitude until the loss blew up",
        "pre-LN blocks rescale the stream at every layer, so the gradients stay bounded; "
        "clipping alone would only hide the growth",
        "pre-LN blocks, gradient clipping (梯度裁剪) at 1.0 as a safety net, and per-layer "
        "grad-norm dashboards on a log scale with an alert on a jump of an order of "
        "magnitude",
    ),
    "tiny_eps": _Words(
        "a LayerNorm eps of (almost) zero (eps 过小)",
        "a row with zero variance (a padding token's all-zero embedding) made "
        "(x - mean) / sqrt(var + eps) = 0 / 0 = NaN, and attention spread it to the real "
        "positions",
        "eps = 1e-5 keeps the denominator above zero, so a constant row normalises to 0 "
        "instead of NaN, and nothing else about the model changes",
        "keep norm eps at 1e-5 (representable in the compute dtype), review config diffs "
        "for eps changes, and test that padded batches give a finite loss",
    ),
    "optimizer_state": _Words(
        "a resume that did not restore the optimizer's state (断点续训状态丢失)",
        "the job restarted from a checkpoint but the resume code loaded only part of the "
        "state, so the optimizer or the LR schedule started from scratch on a trained model "
        "and its first updates threw the weights off",
        "loading the optimizer and the scheduler with the weights makes the resumed run "
        "continue exactly where it stopped; the model, the data and the LR were never wrong",
        "save and load model, optimizer, scheduler, scaler and RNG together, assert after a "
        "resume that Adam's step count and the schedule's step equal the global step, and "
        "test that a resumed run reproduces an uninterrupted one",
    ),
    "resume_fresh_optimizer": _Words(
        "a resume with a fresh optimizer (续训时未加载优化器状态)",
        "after the restart AdamW started from m = v = 0 at step 0, and bias correction made "
        "its first update about lr * sign(grad) on every weight, whatever the gradient's "
        "size, so the trained weights were knocked off their solution",
        "loading optimizer.state_dict() restores m, v and the step count, so the resumed "
        "updates are the same size as before the restart; clipping could not have helped, "
        "since Adam's first update does not depend on the gradient's norm",
        "checkpoint the optimizer with the model, check after every resume that Adam's "
        "state exists and its step equals the global step, or re-warm the LR when a fresh "
        "optimizer is unavoidable (a changed parameter set)",
    ),
    "resume_reset_schedule": _Words(
        "a resume that restarted the LR schedule (续训时学习率调度被重置)",
        "the scheduler's state was not loaded, so the LR warmed up again to its peak on a "
        "model the cosine decay had nearly converged, and the full-size updates threw it off",
        "loading scheduler.state_dict() puts the schedule back at the global step, so the "
        "LR continues its decay instead of climbing to the peak again",
        "checkpoint the scheduler (or compute the LR from the global step), log the LR "
        "every step, and alert when it jumps at a resume",
    ),
    "adam_unfreeze_spike": _Words(
        "a layer unfrozen under Adam with b2 = 0.999 (解冻后 Adam 二阶矩滞后)",
        "the layer had been frozen by zeroing its gradients, so Adam stepped it with "
        "m = v = 0 while its step count ran on; after unfreezing, the bias correction no "
        "longer made up for the empty v, v_hat lagged far behind g^2, and the first "
        "updates were about lr * sign(grad) on every weight of the layer",
        "b2 = 0.95 lets the second moment follow the returning gradients within about 20 "
        "steps, which halves the first updates after unfreezing; the LR, the data and the "
        "model were fine",
        "freeze with requires_grad_(False) and a fresh optimizer group (or warm the LR up "
        "again) when unfreezing, use b2 = 0.95 for long runs, and watch per-layer update "
        "ratios, not only the loss",
    ),
    "llm_data": _Words(
        "bad tokens in the LLM data (LLM数据问题)",
        "the token stream itself was wrong, an id outside the model's vocabulary or a shard "
        "of junk sequences, so the loss failed where those batches arrived",
        "it removes the bad tokens before the model sees them, so the model, the LR and the "
        "precision stay as they were",
        "check every batch's ids against the embedding's num_embeddings, filter repetitive "
        "documents before training, and log the per-sample loss of any spiking batch",
    ),
    "oov_token": _Words(
        "a token id outside the vocabulary (词表越界的token id)",
        "the tokenizer had grown a special token the model's embedding was never resized "
        "for, and the lookup of that id stopped the run",
        "validating the ids against the embedding's size catches the batch before the "
        "lookup; the real repair is resize_token_embeddings after add_special_tokens",
        "assert max(input_ids) < num_embeddings in the loader, and resize the embedding "
        "whenever the tokenizer changes",
        on_error="nn.Embedding checked the id, found it past its last row and raised 'index "
                 "out of range in self' (a device-side assert on CUDA)",
    ),
    "oov_token_masked": _Words(
        "an out-of-vocabulary id hidden by vocabulary-parallel masking (张量并行下的词表越界)",
        "with the vocabulary split over ranks, every rank masked the id it did not own: it "
        "embedded as a zero vector and its target got a finite loss of log Z - max, so the "
        "run did not crash, the sequences lost a token and the loss spiked",
        "validating the ids against the global vocabulary catches what the masking hides; "
        "nothing in the model or the optimizer was wrong",
        "check ids against the global vocabulary size before the model (the parallel "
        "layers will not), and test the data path on one rank, where the lookup is loud",
    ),
    "repeated_token_shard": _Words(
        "a shard of repeated-token junk (重复token的脏分片)",
        "a broken dedup or a corrupted shard fed sequences that are one token repeated; the "
        "trained model predicted with confidence and paid a large loss on every junk "
        "position, and fitting the junk set the clean sequences back for a while",
        "the per-sample loss put the spike on those sequences alone, and a repetition filter "
        "drops them; a smaller LR or clipping only makes the same bad batches hurt less",
        "run a repetition filter (Gopher's top n-gram fractions) before tokenising, log the "
        "per-sample loss of any spiking batch, and keep the shard id in every batch's record",
    ),
    "masked_attention": _Words(
        "an attention row with no key left to attend to (注意力掩码把整行都遮住了)",
        "the padding mask hid every key of some query rows, the softmax over a row of -inf "
        "was -inf - (-inf) = NaN, and the NaN reached the rest through 0 * NaN",
        "it gives those rows a finite softmax or removes them, so the model, the LR and the "
        "precision stay as they were",
        "mask with torch.finfo(dtype).min, not -inf, check that every mask row keeps a key, "
        "and drop empty examples in the loader",
    ),
    "left_padding_inf_mask": _Words(
        "left padding meeting a -inf attention mask (左填充 + -inf 掩码)",
        "the batches were padded on the left, so under the causal mask the first positions "
        "of a padded row were queries whose only keys were padding; filled with -inf, their "
        "softmax was -inf - (-inf) = NaN, and the next layer spread it to the real tokens "
        "through 0 * NaN (attention weight 0 times a NaN value)",
        "the data was legal: a finite fill, torch.finfo(dtype).min as Hugging Face masks, "
        "leaves a query with only padded keys finite, and its targets are ignored anyway",
        "fill masks with torch.finfo(dtype).min, pad on the right for training, and test "
        "the attention with a fully masked row before a run",
    ),
    "empty_sequence": _Words(
        "an empty example in the batch (批次里有一条空样本)",
        "one example had no token at all, so its key-padding mask hid every key of the row; "
        "the softmax over a row of -inf was 0 / 0 = NaN and the backward pass carried it "
        "into every weight",
        "skipping the batch (or dropping the empty example) removes the cause at the source; "
        "the attention code only has to handle data that has something in it",
        "filter empty examples in the loader, assert that every mask row keeps at least one "
        "key, and log the batch when the check fires",
    ),
    "backward_nan": _Words(
        "a gradient that was NaN while the forward pass was finite (前向有限、反向 NaN)",
        "a guarded op's derivative was evaluated where it is infinite: the branch "
        "torch.where did not select (a log or a square root at 0) still ran in the backward "
        "pass, and 0 * inf = NaN reached every weight while the loss stayed finite",
        "guarding the op's input as well as its output (the double where) keeps the "
        "unselected branch away from its singular point, so the gradient is finite and "
        "nothing else about the run had to change",
        "write torch.where(x > 0, log(torch.where(x > 0, x, 1)), 0), use F.normalize or "
        "torch.linalg.vector_norm rather than a hand-written sqrt of a sum of squares, and "
        "run a step under torch.autograd.detect_anomaly when a NaN grad norm meets a finite "
        "loss",
    ),
    "where_log_grad": _Words(
        "a single torch.where guarding a log in an attention-entropy term (单层 where 保护的 log)",
        "the entropy term computed -sum(p * where(p > 0, log p, 0)) over attention rows that "
        "the causal mask fills with exact zeros; the forward pass and the loss were finite, "
        "but log's backward divided the 0 it was given by p = 0, and 0 / 0 = NaN reached "
        "every weight at the first step with the term",
        "the double where, log(torch.where(p > 0, p, 1)), gives the unselected branch a "
        "harmless input, so the gradient is finite; clipping or a smaller LR acts on a "
        "gradient that is already NaN",
        "use the double where for p * log p (torch.special.xlogy and entr do not help: "
        "their gradient at p = 0 is NaN and -inf), and test every new loss term with exact "
        "zeros in its input under torch.autograd.detect_anomaly",
    ),
    "moe_router": _Words(
        "an MoE router whose logits outgrew its precision (MoE 路由器 logits 超出精度范围)",
        "nothing bounded the router logits, which grew as routing sharpened; the router ran "
        "in fp16 under autocast, and once a logit passed 11.09 its exp was inf in fp16 and "
        "the routing softmax made inf / inf = NaN",
        "the router in float32 (selective precision) gives exp the range it needs, and the "
        "router z-loss keeps the logits small; the experts can stay in 16-bit",
        "keep the router in float32 under any autocast, add a router z-loss (1e-3), and log "
        "each router's largest logit and tokens per expert next to the loss",
    ),
    "router_low_precision": _Words(
        "an fp16 router with a hand-written softmax and no z-loss (fp16 路由器、无 z-loss)",
        "the MoE router was a plain Linear under fp16 autocast, its softmax exp(x) / sum "
        "exp(x) ran in fp16, and with no z-loss its largest logit grew past log(65504) = "
        "11.09; exp overflowed and inf / inf = NaN at about step 36",
        "computing the router in float32 (selective precision) or adding the z-loss each "
        "cured it, measured; clipping the gradient did not, since the logits still grew",
        "keep the router in float32 (Megatron-LM --moe-router-dtype fp32), use a softmax "
        "that subtracts the max, add a router z-loss, and alert on the router's logit max",
    ),
    "low_precision_scaling": _Words(
        "an FP8 scale that was infinite or stale (FP8 缩放因子失效)",
        "each FP8 cast multiplies its tensor by fp8_max / amax; an amax of 0 with no floor "
        "made that scale inf and 0 * inf = NaN, or a delayed scale from an earlier step's "
        "amax sent a grown tensor past e5m2's max, where the cast gives inf",
        "the fix repairs the scale itself (a floor under the amax, or the amax of the tensor "
        "now), so the same data, model and LR train in FP8 as they did in bf16",
        "use the framework's amax floor (torchao's EPS, activation_value_lb), prefer current "
        "scaling or a long amax history with a margin, saturate the casts, and log each "
        "layer's amax and scale next to the loss",
    ),
    "fp8_amax_zero": _Words(
        "rowwise FP8 scaling with no floor under the amax (amax 为 0 时无下限)",
        "the loss masks the first target of every sequence, so the LM head's gradient had "
        "rows of exact zeros; their amax was 0, the scale 57344 / 0 = inf and 0 * inf = NaN "
        "in the backward pass at step 0, while the loss was finite",
        "clamping the amax at 1e-12 (torchao's EPS) gives a zero row a finite scale, so it "
        "stays 0; a smaller LR or clipping acts on a gradient that is already NaN",
        "keep a lower bound on every amax (activation_value_lb=1e-12 in torchao's rowwise "
        "config), and test the FP8 layer on a batch with a zero row before training",
    ),
    "fp8_stale_amax": _Words(
        "delayed FP8 scaling from a one-step amax history (延迟缩放的 amax 过时)",
        "the scale of each step came from the previous step's amax (history length 1, "
        "Megatron-LM's old default); the gradients grew between steps 0 and 1 past e5m2's "
        "max under that stale scale, PyTorch's cast gave inf, and inf - inf = NaN",
        "current scaling takes each tensor's own amax, so nothing is past the format's max; "
        "a margin of 1 only moved the NaN from step 1 to step 20",
        "prefer current scaling, or a long history with the max algorithm plus a margin, "
        "and saturate every cast (clamp to the max first) so an outlier is clipped, not inf",
    ),
    "grad_accum": _Words(
        "a gradient accumulation loop that did not add up to the whole batch (梯度累积错误)",
        "the loop cut each step's batch into micro-batches but combined them wrongly, so "
        "the optimizer step was not the step of the whole batch",
        "the fix makes the accumulated step equal to one pass over the whole batch; the "
        "model, the data and the LR were never wrong",
        "test that accum_steps = 4 gives the same gradient as one pass over the whole batch "
        "(padded batches included), and log the unmasked-token count of every micro-batch",
    ),
    "accum_mean_of_means": _Words(
        "gradient accumulation that averaged the micro-batches' mean losses (梯度累积归一化错误)",
        "each micro-batch's loss was a mean over its own targets and the step averaged "
        "those means, so a micro-batch with one unmasked target gave that token the weight "
        "of a whole micro-batch; for 20 steps the updates fitted one token each and threw "
        "the model off",
        "weighting each micro-batch by its share of the step's unmasked targets (sum over "
        "all tokens / their total count) makes the step the gradient of the whole batch, as "
        "Hugging Face's Trainer fix of October 2024 (num_items_in_batch) does",
        "normalise by the step's token count (num_items_in_batch), compare a run with "
        "accumulation against one without on the same data, and watch the smallest "
        "micro-batch token count",
    ),
    "accum_masked_micro_batch": _Words(
        "a fully masked micro-batch inside gradient accumulation (微批次目标全被掩码)",
        "one micro-batch had no unmasked target, its mean loss was 0 / 0 = NaN, and "
        "averaging it with the other micro-batches made the whole step's loss NaN, while a "
        "check of the step's whole batch passed it",
        "token-count normalisation across the step lets a micro-batch without targets add "
        "exactly 0, so the other micro-batches train as usual; reweighting the NaN mean by "
        "its count of 0 would not help, since NaN * 0 is NaN",
        "check every micro-batch, not only the batch, for at least one unmasked target, and "
        "normalise by the step's token count",
    ),
    "scaler_update_micro_batch": _Words(
        "GradScaler.update() inside the micro-batch loop (梯度缩放器更新位置错误)",
        "the loop updated the GradScaler after every micro-batch instead of once per "
        "optimizer step, so update() ran before anything had checked the gradients for "
        "inf",
        "moving unscale_, step and update after the last micro-batch keeps the gradients "
        "scaled by one constant factor while they add up, as PyTorch's AMP examples "
        "prescribe for gradient accumulation",
        "one unscale_ / step / update per optimizer step, a unit test of the accumulation "
        "loop under fp16, and no per-micro-batch clipping (clip once, after unscale_)",
        "PyTorch stopped the run at once with its own assertion, 'No inf checks were "
        "recorded prior to update.': update() found no overflow check since the last one",
    ),
    "hardware": _Words(
        "silent data corruption on the device (静默数据损坏, a transient hardware fault)",
        "one bit of one matmul output flipped once on the device: a high exponent bit made "
        "one activation about 1e38, the next norm or softmax overflowed, and that single "
        "step's loss and gradients were NaN (or spiked); the batch was clean, and an exact "
        "replay of the step from the same weights, batch and RNG was clean too",
        "re-running a failed step from the same state tells a one-off fault from one that "
        "reproduces: the clean rerun's update is applied, so the run continues exactly as it "
        "would have without the fault; cutting the LR, turning AMP off or filtering the data "
        "treats causes that were never there",
        "a guard that reruns a failed step before it acts (transient or persistent, decided "
        "on every rank), a log of which device and step each transient came from, and "
        "taking a device that keeps producing them out of the pool",
    ),
    "myth": _Words(
        "vanishing gradients (梯度消失), a stall rather than a NaN",
        "dead ReLUs or a deep sigmoid chain pass almost no gradient back, so the early "
        "layers stop learning; nothing overflows, so the loss stalls instead of turning NaN",
        "a sane init and modern blocks (GELU, residuals, LayerNorm) give the gradient a path "
        "back to every layer",
        "per-layer grad norms and the fraction of dead units on the dashboard, not only the "
        "loss; residual pre-LN blocks and a standard init",
    ),
    "unknown": _Words(
        "an instability the SOP could not pin on one cause (根因未定)",
        "none of the controlled replays singled out one cause",
        "it has not been proven",
        "a guard around the optimizer step and more per-layer logging, to catch it next time",
    ),
}

_ALWAYS_PREVENT = (
    "for every cause: an isfinite check on the loss and the grad norm every step, a guard "
    "around the optimizer step (stop / skip / roll back to the last checkpoint, bounded "
    "retries), a running z-score spike detector, and checkpoints every k steps"
)


def _words_for(diagnosis: Any, family: str | None) -> tuple[str, _Words]:
    """The wording key and words for the cause found (detail first, then the family)."""
    for key in (getattr(diagnosis, "detail", None), getattr(diagnosis, "cause", None), family):
        if key in _CAUSE_WORDS:
            return key, _CAUSE_WORDS[key]
    return "unknown", _CAUSE_WORDS["unknown"]


def _num(x: Any, digits: int = 3) -> str:
    """A loss or norm for prose: 3 significant digits; 'NaN' and 'inf' spelled out."""
    if x is None:
        return "n/a"
    if isinstance(x, float) and math.isnan(x):
        return "NaN"
    if isinstance(x, float) and math.isinf(x):
        return "inf" if x > 0 else "-inf"
    return f"{x:.{digits}g}"
