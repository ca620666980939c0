"""CUDA parity without a GPU: every precision fault overflows where the value is fp16 on
CUDA too, and its declared cure cures it.

CPU and CUDA autocast follow different op lists. On CUDA, fp16 autocast runs only the
matmul-like ops in fp16 and runs ``exp``, ``sum``, ``softmax``, ``layer_norm``, the
losses... in fp32; CPU autocast runs those in fp16 (they are not on its fp32 list). An
overflow found on the CPU in an fp16 ``exp`` inside autocast would not happen on a GPU.
So, for each fault whose run is fp16 (autocast or pure), the aten op that made the first
non-finite value (``nanlab.debug.locate``) must be one of:

- an op CUDA autocast also runs in fp16 (``CUDA_FP16_OPS``), or
- any op of a pure-fp16 run (``model.half()``: no autocast, the dtype follows the
  tensors on every device), or
- an op that ran with autocast disabled, on fp16 inputs: then too its dtype follows its
  inputs on every device. This is checked at the Python level with a TorchFunctionMode,
  where ``torch.is_autocast_enabled`` still tells the truth.
"""

import functools

import pytest
import torch
from torch.overrides import TorchFunctionMode

from nanlab import faults
from nanlab.debug.locate import locate
from nanlab.judge import judge
from nanlab.train import to_device

# The CUDA autocast op lists. Source: PyTorch documentation, "Automatic Mixed Precision
# package - torch.amp", section "CUDA Ops that can autocast to float16" / "CUDA Ops that
# can autocast to float32"; in code, aten/src/ATen/autocast_mode.h of pytorch/pytorch
# (the AT_FORALL_LOWER_PRECISION_FP, AT_FORALL_FP32 and AT_FORALL_FP32_SET_OPT_DTYPE
# lists, which aten/src/ATen/autocast_mode.cpp registers for AutocastCUDA).
CUDA_FP16_OPS = frozenset({
    "_convolution", "conv1d", "conv2d", "conv3d", "conv_tbc", "conv_transpose1d",
    "conv_transpose2d", "conv_transpose3d", "convolution", "prelu", "addmm", "addmv",
    "addr", "matmul", "einsum", "mm", "mv", "linalg_vecdot", "linear", "addbmm",
    "baddbmm", "bmm", "chain_matmul", "linalg_multi_dot", "_thnn_fused_lstm_cell",
    "_thnn_fused_gru_cell", "lstm_cell", "gru_cell", "rnn_tanh_cell", "rnn_relu_cell",
    "_scaled_dot_product_flash_attention", "scaled_dot_product_attention",
})
CUDA_FP32_OPS = frozenset({
    "acos", "asin", "cosh", "erfinv", "exp", "expm1", "log", "log10", "log2", "log1p",
    "reciprocal", "rsqrt", "sinh", "tan", "pow", "softplus", "layer_norm",
    "native_layer_norm", "group_norm", "frobenius_norm", "nuclear_norm",
    "cosine_similarity", "poisson_nll_loss", "cosine_embedding_loss", "nll_loss",
    "nll_loss2d", "hinge_embedding_loss", "kl_div", "l1_loss", "smooth_l1_loss",
    "huber_loss", "mse_loss", "margin_ranking_loss", "multilabel_margin_loss",
    "soft_margin_loss", "triplet_margin_loss", "multi_margin_loss",
    "binary_cross_entropy_with_logits", "dist", "pdist", "cdist", "renorm", "logsumexp",
    # fp32_set_opt_dtype: also run in fp32 (and cross_entropy is log_softmax + nll_loss)
    "prod", "softmax", "log_softmax", "cumprod", "cumsum", "linalg_vector_norm",
    "linalg_matrix_norm", "sum",
})

PRECISION_FAULTS = sorted(name for name in faults.FAULTS
                          if faults.fault_config(name).precision in ("fp16", "fp16-pure")
                          and faults.get_fault(name).signature == "nonfinite")  # not a crash


def _stop_at_first_nonfinite(trainer, info):
    if not info.row["finite"]:  # the GradScaler's skipped steps too
        trainer.request_stop("the first non-finite step")


@functools.cache
def failed_run(name: str) -> faults.FaultRun:
    run = faults.run_fault(name, steps=300, checkpoint_every=10, stop_when_poisoned=True,
                           callbacks=[("on_step_end", _stop_at_first_nonfinite)])
    assert run.first_bad_step is not None and run.first_bad_step < 150, name
    return run


class _Calls(TorchFunctionMode):
    """Every torch function / Tensor method call: (name, autocast on, input dtypes,
    whether its output holds +inf or NaN), at the Python level. (-inf is left out: the
    causal mask writes it on purpose.)"""

    def __init__(self, device_type: str):
        super().__init__()
        self.device_type, self.calls = device_type, []

    def __torch_function__(self, func, types, args=(), kwargs=None):
        out = func(*args, **(kwargs or {}))
        if isinstance(out, torch.Tensor) and out.is_floating_point() and out.numel():
            dtypes = {a.dtype for a in args if isinstance(a, torch.Tensor)}
            self.calls.append((getattr(func, "__name__", str(func)),
                               torch.is_autocast_enabled(self.device_type), dtypes,
                               out.dtype, bool((out == torch.inf).any() or out.isnan().any())))
        return out


def _first_nonfinite_call(run: faults.FaultRun):
    """Replay the bad step's forward and loss (the GradScaler skipped its update, so the
    weights are still those of that step) and return the first call that made inf/NaN."""
    trainer = run.trainer
    row = run.record.steps[run.first_bad_step]
    batch = to_device(trainer.batches(row["batch"]), trainer.device,
                             trainer.input_dtype)
    probe = _Calls(trainer.device.type)
    with torch.no_grad(), trainer.autocast(), probe:
        trainer.loss_fn(trainer.model, batch)
    return next((c for c in probe.calls if c[-1]), None)


def test_the_op_lists_are_disjoint_and_hold_the_ops_the_faults_meet():
    assert not CUDA_FP16_OPS & CUDA_FP32_OPS
    assert {"bmm", "matmul", "linear", "addmm", "baddbmm"} <= CUDA_FP16_OPS
    assert {"exp", "sum", "softmax", "log_softmax", "layer_norm", "nll_loss",
            "mse_loss", "pow"} <= CUDA_FP32_OPS


def test_cpu_autocast_runs_exp_and_sum_in_fp16_where_cuda_uses_fp32():
    """The CPU-only lesson of Lab 04: inside autocast, CPU runs exp and sum in fp16."""
    layer = torch.nn.Linear(4, 4)
    with torch.amp.autocast(device_type="cpu", dtype=torch.float16):
        y = layer(torch.randn(2, 4))
        assert y.dtype == torch.float16  # linear: fp16 on both devices
        assert torch.exp(y).dtype == torch.float16 and y.sum().dtype == torch.float16
    assert "exp" in CUDA_FP32_OPS and "sum" in CUDA_FP32_OPS  # fp32 on CUDA


@pytest.mark.parametrize("name", PRECISION_FAULTS)
def test_the_first_nonfinite_value_is_fp16_on_cuda_too(name):
    run = failed_run(name)
    loc = locate(run.trainer)
    assert loc.found and loc.reproduced, loc.mismatches
    assert loc.first_op is not None, loc.report()
    op = loc.first_op.op.removeprefix("aten.").split(".")[0].rstrip("_")
    precision = run.trainer.config.precision
    if precision == "fp16-pure":  # dtype-driven: every op fp16 on any device
        assert loc.first_op.dtype.removeprefix("torch.") == "float16", loc.first_op
        return
    assert precision == "fp16"
    if op in CUDA_FP16_OPS:  # a matmul output past 65504: fp16 on CUDA autocast too
        return
    # otherwise the op must have run outside autocast, on fp16 inputs
    assert op in CUDA_FP32_OPS or op in ("div", "mul", "add", "sub"), op
    call = _first_nonfinite_call(run)
    assert call is not None, name
    func, autocast_on, in_dtypes, out_dtype, _ = call
    assert not autocast_on, (f"{name}: {func} made the first inf inside autocast; CUDA "
                             f"autocast would run {op} in fp32 and never overflow")
    assert in_dtypes == {torch.float16} and out_dtype == torch.float16, call
    assert op in func or func in op, (op, func)  # the same op, seen from Python


@pytest.mark.parametrize("name", PRECISION_FAULTS)
def test_the_declared_cure_cures_it(name):
    fault = faults.get_fault(name)
    cured = faults.run_fault(name, fixes=[fault.cure], steps=200)
    assert cured.record.first_nonfinite_step is None, name
    assert judge(cured).healthy, judge(cured)
