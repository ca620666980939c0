"""The course's claims map: every technical claim of the source article, and where a lab tests it.

The course grew out of an interview-prep article on NaN losses. Each of its claims is
either **reproduced** by an experiment a learner runs, or **corrected** by one (the claim is
wrong or incomplete, and the lab shows what really happens). The ids follow the article's
sections: C causes, B boundaries, M method, V verifying a fix, I interview practice, and W
the article's weak points (things it gets wrong or leaves out).

This list is the project's own (so a clone does not depend on the brief it came from);
``docs/claims.md`` is generated from it, and the tests fail when a claim is covered by no
lab or names a section heading that no longer exists.

>>> get("C5").title
'fp16 overflows where fp32 does not'

``python -m nanlab.course.claims`` rewrites docs/claims.md; ``--check`` fails if it is stale.
"""

from __future__ import annotations

import sys
from dataclasses import dataclass
from pathlib import Path

from nanlab.errors import NanlabError

GROUPS = {
    "C": "Failure causes",
    "B": "Boundaries: inf vs NaN, spike vs NaN, silent vs loud",
    "M": "Method: locate, monitor, guard",
    "V": "Checking the fix",
    "I": "Interview practice",
    "W": "Where the article is wrong or incomplete",
}


@dataclass(frozen=True)
class Claim:
    """One claim: its id, a short title, what the article says, the verdict, where it is tested.

    >>> [lab for lab, _ in get("M6").where]
    ['03_learning_rate', '04_mixed_precision']
    """

    id: str
    title: str
    says: str
    verdict: str  # "reproduced", "corrected" or "extended"
    where: tuple[tuple[str, str], ...]  # (lab name, exact markdown heading)
    found: str = ""  # what the labs measured (CPU, one thread, seed 0)


# What the labs measured, one line per claim (CPU, one torch thread, seed 0).
FOUND = {
    "C1": "deep_explosion (6 blocks, no LayerNorm, AdamW at a constant 0.015, beta2 "
          "0.99): every layer's grad norm climbs by 11 or more powers of ten (Lab 05 "
          "checks more than 6) over about a hundred steps until the global norm is inf "
          "(step 111 here; Lab 05 checks 50-250, the step varies with the CPU); AdamW's "
          "exp_avg_sq overflows with it or a few steps later, never before, freezing its "
          "entries while the weights stay finite; the loss itself turns NaN tens of steps "
          "later.",
    "C2": "A 10x LR for one step spikes the loss one step later and it recovers within "
          "20-80 steps; AdamW at 0.1 stalls finite far above the clean loss, its grad norm "
          "below the clean run's; at LR 0.02 with no warmup the loss falls only from 3.47 "
          "to 1.2-1.9 in 200 steps with beta2 0.95 or 0.99, against 0.03-0.08 with 20 "
          "warmup steps, on seeds 0 and 1: warmup is the knob, not beta2.",
    "C3": "One NaN feature at step 40: NaN loss at 40, every weight NaN after its update; a "
          "zero std gives 0 / 0; an illegal label crashes loudly (IndexError) on one "
          "device (Megatron-LM's vocab-parallel loss would mask it silently).",
    "C4": "Dead ReLU and sigmoid chains stall (loss stays near 3.5) and make no NaN "
          "(untested: SwiGLU or squared ReLU, which can amplify outliers); "
          "positions past 65504 become inf in pure fp16 (NaN at step 0); in pure bf16 "
          "positions from 70000 on all round to 70144: no NaN, no position either.",
    "C5": "fp16_overflow (a hand-written loss on the fp16 logits, autocast off for it, with "
          "a GradScaler): at step 87 a sum of exponentials passes 65504 and the loss is "
          "inf, NaN follows in backward; the same run in fp32 or bf16 trains normally; "
          "the sum runs in fp16 on CUDA too (tests/test_cuda_parity.py).",
    "C6": "The naive softmax overflows at a logit of 11.1 in fp16 and 88.7 in fp32; the "
          "softmax_overflow run is NaN at step 26; the stable softmax and QK-norm cure it, "
          "z-loss does not.",
    "C7": "eps 0 on a zero row: 0 / 0 = NaN at step 0, located in the embedding LayerNorm; "
          "eps 1e-5 and 1e-12 both cure it in fp32.",
    "B1": "locate on softmax_overflow: aten.exp makes +inf, aten.div makes the NaN one op "
          "later; fp16_overflow: the first inf is a sum in the loss, the NaN comes in "
          "backward.",
    "B2": "lr_jump's spike heals by itself; after a NaN update every weight is non-finite "
          "and only a checkpoint brings the run back.",
    "B3": "A run with a NaN batch trains on for its remaining steps without an exception; "
          "an impossible allocation raises RuntimeError at once; Guard('stop') stops at "
          "the first NaN.",
    "M1": "Guard('recover') with NaN batches at steps 30 and 60: roll back, skip the batch, "
          "and the final loss equals the clean run's.",
    "M2": "diagnose names the cause and proves the fix by replay on the built-in faults "
          "and on two foreign models (bench/bench_diagnose.py counts them).",
    "M3": "Per-step and per-layer rows cost +0.73 % step time at record_every=10; "
          "TensorBoard export of the same record.",
    "M4": "locate replays from the nearest checkpoint bit for bit and names the first "
          "module, pass, op and tensor.",
    "M5": "validate_data cures all four dirty-data faults; LR / 10, AMP off and clipping "
          "cure none of them.",
    "M6": "Clipping at 1.0 tames one outlier gradient: SGD's 100x update is cut below 2x; "
          "AdamW's outlier update is larger than usual (more with beta2 0.999) and shrinks "
          "the next hundred, clipped it is ordinary; clipping every step does not cure "
          "AdamW at 0.1. The GradScaler cures underflow (without it over a quarter of "
          "the fp16 run's own logit gradient is 0), not an LR-driven overflow.",
    "M7": "Without LayerNorm, He init starts at loss 1.3e4 (grad norm 4e6) and 0.02 normal "
          "at grad norm 0.04; with LayerNorm all three train.",
    "M8": "A forward-hook recorder shows bad_init's activations growing block by block "
          "until an attention score overflows in the last blocks at step 0.",
    "M9": "Guard('stop') ends the run at the first non-finite step for about 1 % step time.",
    "M10": "Rollback + batch skip + LR / 10 only when the failure comes back (PaLM's "
           "recipe plus the article's); on a one-step LR glitch it does worse than "
           "leaving the spike alone, at each of seeds 0-2.",
    "M11": "At each optimizer's best LR of a 3-LR sweep, AdamW ends lowest, then NAdam, "
           "then SGD, on each of seeds 0-2 (40 steps); a careless fine-tune (LR 0.01, no "
           "warmup) moves a pretrained start as far as a random one (more than its own "
           "size); the pretrained run still ends lower, on each of seeds 1-3.",
    "M12": "The manifest holds config, seed, fault, fixes, versions, git commit, device "
           "and the optimizer class really used.",
    "M13": "Megatron-LM and DeepSpeed all-reduce the found-inf flag; without that, a "
           "decision on one rank's loss lets replicas drift (9e-4 at once) silently.",
    "V1": "Same seed, same machine, same thread count: bit-identical losses; resume from "
          "a weights_only checkpoint continues exactly.",
    "V2": "Each fix is compared with the clean run at the same step; dirty data fixed by "
          "validation ends within 10 % of the clean loss.",
    "V3": "Every NaN, skip, rollback and stop is an event in the record; diagnose's report "
          "names the cause, what it ruled out and the replay that proved the fix.",
    "V4": "Not a test of recovery: after rollbacks at steps 30 and 50 the loss is not below "
          "0.1 within 30 steps though it matches the clean run; from step 120 it is.",
    "I1": "Answer frameworks with a template; the rubric checks name, locate, diagnose, "
          "prevent.",
    "I2": "Three levels (new graduate, experienced, senior), each with its template and "
          "typical mistake.",
    "I3": "A bank of questions (Lab 10 prints its size), each with a rubric (English and "
          "Chinese synonyms), wrong answers that must score low, and 1-3 follow-ups chosen "
          "from what the answer missed.",
    "I4": "star_story() writes Situation, Task, Action, Result from the learner's own run: "
          "step of the NaN, grad-norm jump, what was ruled out, loss against the clean run.",
    "W1": "Every lab and the question bank use torch.amp.autocast(device_type=...) and "
          "torch.amp.GradScaler.",
    "W2": "Dead ReLU: exact-zero gradients, a flat loss, no NaN; sigmoid chain: block 0's "
          "gradient millions of times smaller than block 7's, no overflow. Dead or "
          "saturating activations only: unbounded, multiplicative ones are not tested "
          "(Fishman et al. 2024 traced a 7B model's FP8 divergence after about 200B "
          "tokens to SwiGLU; its BF16 baseline trained normally).",
    "W3": "AMP off turned high_lr's NaN into a finite divergence (loss above 2.5, clean "
          "0.02); LR / 10 kept in fp16 cures it: the LR was the cause.",
    "W4": "bf16 without a scaler cures fp16_overflow; for position_overflow it works "
          "because autocast computes the encoding in fp32.",
    "W5": "A 6-sigma running z-score flags lr_jump's spike and never a clean run; QK-norm "
          "cures the attention overflow; Adam's eps 1e-8 is 0 in fp16 (NaN after one "
          "update). An LR sweep as in Wortsman et al. 2023 (one seed): QK-norm lowers the "
          "LR sensitivity (0.82 against 1.13) and keeps the max attention logit at LR 0.3 "
          "below 1e3 where the baseline's passes 1e4 on seeds 0-2 (Lab 11 checks 1e3); no "
          "warmup raises it; z-loss 1e-4 has no effect in 150 steps. QK-norm's lower "
          "final loss at LR 0.3 holds on seeds 0-2.",
    "W6": "A toy run (AdamW 1e-2, b2 0.99, constant LR, no injected fault) spikes "
          "between steps 200 and 300 (the step varies with the CPU); the batches around it "
          "spike from the last checkpoint at least 15 steps before (rise above 10x) and "
          "not from the state 100 steps earlier (below 2x), as in PaLM, yet the near "
          "state spikes on unseen batches too: here the state alone suffices. "
          "Guard('recover') skips data, the spike comes back, the LR cut ends it; from "
          "the earlier state, LR x 0.5 or clipping at 1.0 or 0.3 each remove it (OPT); "
          "fp16 at LR 0.2 turns non-finite where bf16 stays finite; the embedding "
          "LayerNorm (BLOOM) shrinks the spike to a bump below 20x and QK-norm (OLMo 2) "
          "removes it (one seed).",
    "W7": "A resume that builds a fresh AdamW moves 99.8% of the weights by the LR "
          "(within 1%) on its first step, against a median of 0.12 lr with the state "
          "loaded: the loss spikes 11x one step after the restart. A resume that resets "
          "the schedule spikes 7x about 20 steps later, at the peak LR. A layer frozen by "
          "a gradient mask for 100 steps moves 0.98 lr at b2 = 0.999 (the formula: 0.98), "
          "0.45 lr at 0.95; the loss 6.5x against 2.2x. diagnose names all three and "
          "proves the cure; the guard passes over a state whose exp_avg_sq is inf.",
    "W8": "A token id equal to num_embeddings crashes plain PyTorch (IndexError at step "
          "40); masked as Megatron-LM's vocab-parallel layers mask it, the same ids give no "
          "error and a finite spike (5.1x at step 151). A shard of repeated-token junk "
          "spikes 6.3x; per-sample loss puts 90% of batch 150's loss on its 8 junk "
          "sequences of 32. diagnose names both and proves validate_data and "
          "quality_filter; validate_data alone leaves the junk spike (6.3x).",
    "W9": "Averaging the micro-batches' mean losses gives the one target of a 1-target "
          "micro-batch 186x its share (1/(k n_i) against 1/N): the loss spikes 6.5x, the "
          "token-weighted loss stays at 0.9x. An all-masked micro-batch makes the loss NaN "
          "at step 40 (0 / 0), which validate_data does not prevent; scaler.update() per "
          "micro-batch stops at step 0 with PyTorch's assertion. diagnose names the "
          "all-masked micro-batch and proves token_weighted.",
    "W10": "Flipping fp32's highest exponent bit (bit 30) turns 0.5 into 1.7e38 and 1.0 "
           "into inf; flipped in one matmul output at step 40 it makes the loss NaN. The "
           "replay from the checkpoint reproduces the steps before bit for bit and step 40 "
           "clean: diagnose calls it transient (hardware, bit_flip), and guard_rerun gives "
           "the clean run's losses bit for bit; validate_data does not cure it.",
}


def _c(cid: str, title: str, says: str, verdict: str, *where: tuple[str, str]) -> Claim:
    return Claim(cid, title, says, verdict, tuple(where), FOUND.get(cid, ""))


L00, L01, L02, L03, L04 = "00_start_here", "01_numbers", "02_dirty_data", "03_learning_rate", \
    "04_mixed_precision"
L05, L06, L07, L08, L09, L10 = "05_init_depth", "06_norms_softmax", "07_sop_mystery", \
    "08_guard_recovery", "09_data_parallel", "10_interview"
L11, L12, L13, L14 = "11_lr_sensitivity", "12_incidents", "13_optimizer_state", \
    "14_large_run_faults"

CLAIMS: tuple[Claim, ...] = (
    _c("C1", "Gradient explosion ends in NaN",
       "Depth, a large init or a high LR make the gradient norm jump; weights diverge; NaN.",
       "reproduced",
       (L05, "## 1. A deep stack without LayerNorm: 梯度爆炸 (gradient explosion)"),
       (L05, "### 1a. The per-layer grad-norm history")),
    _c("C2", "A high LR or short warmup spikes, then NaN",
       "Too high a learning rate, or too little warmup, gives a spike and then NaN, early.",
       "reproduced",
       (L03, "## 1. Three faces of a learning rate that is too high"),
       (L03, "## 3. Warmup and cosine decay")),
    _c("C3", "Dirty data: NaN/inf inputs, illegal labels, std 0",
       "A NaN or inf in the input, a label out of range, or a division by a zero std.",
       "reproduced",
       (L02, "## 1. The failure"),
       (L02, "## 3. The other kinds of dirty data")),
    _c("C4", "Structure: activations, norm init, position overflow",
       "Activation choice, LayerNorm init and positional encodings can produce NaN.",
       "corrected",
       (L05, "## 5. Two myths: a dead ReLU and a sigmoid chain (激活函数)"),
       (L06, "## 6. Positions past 65504 (`position_overflow`)"),
       (L06, "## 7. LayerNorm init: an honest note")),
    _c("C5", "fp16 overflows where fp32 does not",
       "Values past fp16's maximum (about 6.5e4) become inf, then NaN; fp32 is fine.",
       "reproduced",
       (L01, "## 1. Three float formats"),
       (L04, "## 2. One run, four precisions")),
    _c("C6", "Softmax and cross-entropy exponentials overflow",
       "exp in a hand-written softmax or loss overflows.",
       "reproduced",
       (L01, "## 5. `exp` overflows early"),
       (L06, "## 3. Softmax by hand: naive against stable"),
       (L06, "## 4. The `softmax_overflow` fault: inf first, then NaN")),
    _c("C7", "A LayerNorm eps that is too small",
       "A zero-variance row through LayerNorm with eps 0 or a tiny eps gives NaN.",
       "reproduced",
       (L06, "## 1. LayerNorm's eps: a row with no variance"),
       (L06, "## 2. The `tiny_eps` fault: padding meets eps = 0")),
    _c("B1", "inf comes first, then NaN",
       "A value overflows to inf, and inf - inf or 0 * inf makes the NaN.",
       "reproduced",
       (L01, "## 4. `inf` and `NaN` are different"),
       (L04, "### Where exactly: `locate`, and inf before NaN"),
       (L06, "## 4. The `softmax_overflow` fault: inf first, then NaN")),
    _c("B2", "A spike can recover; a NaN cannot",
       "After a NaN update every weight is garbage: restore a checkpoint.",
       "reproduced",
       (L03, "### 1a. A spike that recovers (`lr_jump`)"),
       (L08, "## 2. A spike heals, a NaN does not")),
    _c("B3", "NaN is silent, OOM is loud",
       "Out of memory stops the run with an error; NaN trains on, so monitor it.",
       "reproduced",
       (L01, "## 7. NaN is silent, out-of-memory is loud"),
       (L08, "## 1. What a silent NaN costs"),
       (L09, "## 1. A NaN on one rank reaches every rank")),
    _c("M1", "Roll back first, then locate",
       "Keep the logs, restore the last good checkpoint, restart with the LR / 10.",
       "reproduced",
       (L08, "## 5. Recover: roll back, skip the data, cut the LR")),
    _c("M2", "Check easy to hard: data, AMP, LR, gradients, init",
       "The order of the standard procedure.",
       "reproduced",
       (L02, "## 2. The investigation: SOP step 1, the data"),
       (L07, "## 1. The SOP by hand, on one NaN"),
       (L07, "## 3. Mystery runs")),
    _c("M3", "Log loss, per-layer statistics and grad norms",
       "Per-step loss, per-layer parameter mean and variance, per-layer gradient norms.",
       "reproduced",
       (L00, "### Per-layer rows"),
       (L00, "## 4. Three plots you will read in every lab"),
       (L00, "### TensorBoard")),
    _c("M4", "Replay the first bad step",
       "Find the first NaN step and replay its input and model state.",
       "reproduced",
       (L04, "### Where exactly: `locate`, and inf before NaN"),
       (L07, "### 1c. Replay that step exactly")),
    _c("M5", "Assert on inputs, guard std = 0",
       "Check batches with isnan and protect normalisation against a zero std.",
       "reproduced",
       (L02, "## 4. The fix: validate every batch")),
    _c("M6", "Gradient clipping and loss scaling",
       "clip_grad_norm_ with max_norm 1.0, and AMP loss scaling.",
       "corrected",
       (L03, "## 4. Gradient clipping: what it cures, what it does not"),
       (L04, "## 3. The GradScaler: what it cures, what it cannot")),
    _c("M7", "Init schemes, no sigmoid chains, LayerNorm eps",
       "Xavier, He or a small normal init; avoid sigmoid chains; mind LayerNorm's eps.",
       "reproduced",
       (L05, "## 4. Xavier, He or a small normal? (初始化方案)"),
       (L05, "### 5b. A deep sigmoid chain (`sigmoid_chain`)"),
       (L06, "## 1. LayerNorm's eps: a row with no variance")),
    _c("M8", "Record activations with hooks",
       "Forward hooks keep the activations around the failure for a post-mortem.",
       "reproduced",
       (L05, "## 2. A bad init: NaN at step 0, and an activation recorder")),
    _c("M9", "A NaN stop-loss",
       "Stop the run at the first NaN instead of burning compute.",
       "reproduced",
       (L08, "## 3. Stop-loss (止损): stop at the first NaN, keep the evidence")),
    _c("M10", "Automatic recovery",
       "Snapshot the bad state, reload the last good checkpoint, lower the LR, go on.",
       "extended",
       (L08, "## 4. Skip: drop the bad update"),
       (L08, "## 5. Recover: roll back, skip the data, cut the LR"),
       (L12, "### When the recipe hurts: a spike the model heals from")),
    _c("M11", "Pretrained beats random init; optimizer choice",
       "Pretrained weights are more stable than a random init; AdamW vs SGD vs NAdam.",
       "corrected",
       (L05, "## 6. Optimizers and pretrained weights")),
    _c("M12", "Record config, data version and commit",
       "Every run keeps its configuration, data version and code commit.",
       "reproduced",
       (L00, "### The manifest"),
       (L07, "### 1a. Read the manifest first")),
    _c("M13", "Megatron-LM and DeepSpeed recover by themselves",
       "Large frameworks detect overflow and skip or recover automatically.",
       "reproduced",
       (L08, "## 9. How the big systems do it"),
       (L09, "## 4. How Megatron-LM and DeepSpeed do it")),
    _c("V1", "Same seed, normal curve",
       "Re-run the fix with the same seed; the curve must look normal again.",
       "reproduced",
       (L00, "## 5. Determinism (可复现): the same seed, the same numbers"),
       (L02, "## 5. The proof"),
       (L08, "## 6. Same seed, same numbers")),
    _c("V2", "Same step, same loss as the clean run",
       "Compare the loss at the same step between the clean and the fixed run.",
       "reproduced",
       (L02, "## 5. The proof"),
       (L08, "## 5. Recover: roll back, skip the data, cut the LR"),
       (L09, "## 1. A NaN on one rank reaches every rank")),
    _c("V3", "Every NaN logged, the cause named",
       "Each NaN event is in the log; the root cause is named and can be reproduced.",
       "reproduced",
       (L07, "## 2. The same with `diagnose`")),
    _c("V4", "Loss below 0.1 within 30 steps of a restart",
       "After a restart the loss is back under 0.1 within 30 steps.",
       "corrected",
       (L08, "## 7. Loss below 0.1 within 30 steps of a restart?")),
    _c("I1", "A structured answer",
       "Name it, locate it, then the concrete diagnosis and the prevention.",
       "reproduced",
       (L10, "## 1. The shape of a good answer")),
    _c("I2", "Depth by seniority",
       "New graduates, experienced engineers and seniors answer at different depth.",
       "reproduced",
       (L10, "## 2. Three levels, three answers")),
    _c("I3", "Follow-up questions",
       "Interviewers follow up: how did you confirm it, how do you handle fp16 underflow.",
       "reproduced",
       (L10, "## 3. The question bank and the rubric"),
       (L10, "## 5. A mock interview")),
    _c("I4", "A quantified STAR story",
       "Tell a real incident as Situation, Task, Action, Result, with numbers.",
       "reproduced",
       (L10, "## 6. Your own incident, told as STAR")),
    _c("W1", "torch.cuda.amp is deprecated",
       "Use torch.amp.autocast(device_type=...) and torch.amp.GradScaler.",
       "corrected",
       (L04, "## 6. The modern API in ten lines")),
    _c("W2", "Dead ReLU and sigmoid chains do not make NaN",
       "A dead ReLU stalls learning and a sigmoid chain vanishes; neither overflows.",
       "corrected",
       (L05, "## 5. Two myths: a dead ReLU and a sigmoid chain (激活函数)")),
    _c("W3", "AMP off removing the NaN is a hint, not proof",
       "Turning AMP off changes more than the precision; a control replay decides.",
       "corrected",
       (L03, "## 2. The SOP on the NaN: AMP off is a hint, not proof"),
       (L07, "### 1e. SOP steps 2 and 3: AMP off is a hint, not proof")),
    _c("W4", "bf16 needs no loss scaler",
       "bf16 has fp32's range, so fp16's overflow goes away without a GradScaler.",
       "extended",
       (L04, "## 4. bf16: fp32's range, 8 bits of precision")),
    _c("W5", "What large runs do that the article lacks",
       "Skipping batches around a spike, z-loss, QK-norm, a z-score spike detector, "
       "Adam's eps underflowing in pure fp16, LR-sensitivity sweeps on small proxies.",
       "extended",
       (L04, "## 5. Adam's eps in pure fp16"),
       (L06, "## 5. Three fixes, measured: stable softmax, QK-LayerNorm, z-loss"),
       (L08, "## 8. Acting before the NaN: a loss-spike detector"),
       (L08, "## 5. Recover: roll back, skip the data, cut the LR"),
       (L11, "## 7. LR sensitivity per recipe, beside the paper")),
    _c("W6", "What the famous incidents did",
       "Four large runs published their failures and fixes: PaLM rolled back and skipped "
       "batches, OPT-175B restarted at a lower LR and clipped tighter, BLOOM moved to bf16 "
       "with an embedding LayerNorm, OLMo 2 changed init, norms, z-loss and AdamW.",
       "extended",
       (L12, "## 1. PaLM 540B: the same batches from an earlier state"),
       (L12, "## 2. PaLM's recipe: roll back, skip the batches"),
       (L12, "## 3. OPT-175B: an earlier checkpoint, a lower LR, tighter clipping"),
       (L12, "## 4. BLOOM: fp16, bf16 and the embedding LayerNorm"),
       (L12, "## 5. OLMo 2: eight changes for stability")),
    _c("W7", "A resume must restore more than the weights",
       "Restarts that lose Adam's state or the LR schedule, a layer unfrozen under Adam's "
       "b2 = 0.999, and a checkpoint whose optimizer state is non-finite: finite spikes "
       "the article does not cover.",
       "extended",
       (L13, "## 1. A restart that forgets Adam's state"),
       (L13, "## 2. A restart that forgets the LR schedule"),
       (L13, "## 3. A layer that wakes up under b2 = 0.999"),
       (L13, "## 4. `diagnose` names the cause and proves the cure"),
       (L13, "## 5. Never roll back to a poisoned optimizer state"),
       (L13, "## 6. Exercise: a resume that is bit-exact")),
    _c("W8", "Bad tokens: an id past the vocabulary, a junk shard",
       "A token id outside the embedding and a shard of repeated-token garbage: faults in "
       "the token stream that the article does not cover; no float check sees them.",
       "extended",
       (L14, "## 1. A token id past the vocabulary: loud, then silent"),
       (L14, "## 2. A junk shard, found by per-sample loss")),
    _c("W9", "Gradient accumulation must weigh every target by 1/N",
       "Averaging micro-batch means, an all-masked micro-batch and GradScaler.update() per "
       "micro-batch: accumulation bugs the article does not cover.",
       "extended",
       (L14, "## 3. Gradient accumulation: the mean of means"),
       (L14, "## 4. An all-masked micro-batch, and a scaler updated too often"),
       (L14, "## 6. Exercise: token-weighted accumulation")),
    _c("W10", "Silent data corruption: one flipped bit, told apart by a rerun",
       "A device that returns one wrong number once: a NaN whose cause is neither the data, "
       "the LR nor the precision; the article does not cover it.",
       "extended",
       (L14, "## 5. One flipped bit")),
)


class ClaimError(NanlabError):
    """An unknown claim id; the message lists the known ones.

    >>> get("Z1")  # doctest: +ELLIPSIS
    Traceback (most recent call last):
    nanlab.course.claims.ClaimError: unknown claim id 'Z1'; known ids: C1, ...
    """


def get(cid: str) -> Claim:
    """The claim with id ``cid`` (e.g. ``"C5"``).

    >>> get("V4").verdict
    'corrected'
    """
    for claim in CLAIMS:
        if claim.id == cid:
            return claim
    known = ", ".join(c.id for c in CLAIMS)
    raise ClaimError(f"unknown claim id {cid!r}; known ids: {known}")


def headings(notebook: str | Path) -> set[str]:
    """Every markdown heading line (``# ...`` to ``#### ...``) of a notebook.

    >>> "## Summary" in headings("solutions/03_learning_rate.ipynb")  # doctest: +SKIP
    True
    """
    import nbformat

    nb = nbformat.read(notebook, as_version=4)
    return {line.strip() for cell in nb.cells if cell.cell_type == "markdown"
            for line in cell.source.splitlines() if line.startswith("#")}


def problems(solutions_dir: str | Path = "solutions") -> list[str]:
    """Claims covered by no lab, and places that name a missing lab or heading; [] when fine.

    >>> problems("solutions")  # doctest: +SKIP
    []
    """
    found: dict[str, set[str]] = {}
    out = []
    for claim in CLAIMS:
        if not claim.where:
            out.append(f"{claim.id}: covered by no lab")
        if not claim.found:
            out.append(f"{claim.id}: no measured finding")
        for lab, heading in claim.where:
            path = Path(solutions_dir) / f"{lab}.ipynb"
            if lab not in found:
                found[lab] = headings(path) if path.exists() else set()
            if not path.exists():
                out.append(f"{claim.id}: {path} does not exist")
            elif heading not in found[lab]:
                out.append(f"{claim.id}: {path} has no heading {heading!r}")
    return out


def markdown() -> str:
    """The claims map as Markdown: one table per group, each claim with its labs and sections.

    >>> markdown().startswith("# Claims map")
    True
    """
    lines = [
        "# Claims map",
        "",
        "_Generated by `python -m nanlab.course.claims` from `nanlab/course/claims.py`; "
        "do not edit._",
        "",
        "Every technical claim of the article the course grew out of, and the lab section",
        "that tests it. **reproduced**: the lab's experiment shows it. **corrected**: the",
        "lab shows it is wrong or incomplete, and what really happens. **extended**: the lab",
        "adds what large training runs do today.",
    ]
    for prefix, group in GROUPS.items():
        lines += ["", f"## {group}", "", "| id | claim | verdict | measured | where |",
                  "|---|---|---|---|---|"]
        for claim in (c for c in CLAIMS if c.id.startswith(prefix)):
            where = "<br>".join(f"[{lab}](../solutions/{lab}.ipynb): {heading.lstrip('# ')}"
                                for lab, heading in claim.where)
            lines.append(f"| {claim.id} | **{claim.title}.** {claim.says} | {claim.verdict} "
                         f"| {claim.found} | {where} |")
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    """``python -m nanlab.course.claims [--check]``: write docs/claims.md, or fail if it is stale.

    >>> main(["--check"])  # doctest: +SKIP
    claims map: 36 claims, every one covered
    0
    """
    args = sys.argv[1:] if argv is None else argv
    target = Path("docs") / "claims.md"
    if "--check" in args:
        stale = not target.exists() or target.read_text(encoding="utf-8") != markdown()
        stale_line = f"{target} is stale: run python -m nanlab.course.claims"
        issues = problems() + ([stale_line] if stale else [])
        print("\n".join(issues) or f"claims map: {len(CLAIMS)} claims, every one covered")
        return 1 if issues else 0
    target.parent.mkdir(exist_ok=True)
    target.write_text(markdown(), encoding="utf-8")
    print(f"wrote {target}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
