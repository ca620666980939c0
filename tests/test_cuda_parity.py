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


import pytest
import shared_runs
import torch
from torch.overrides import TorchFunctionMode
from torch.utils._pytree import tree_map

from nanlab import faults
from nanlab.analysis.judge import judge
from nanlab.debug.locate import locate
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


def failed_run(name: str) -> faults.FaultRun:
    """test_locate's run of the fault (trained once per session, tests/shared_runs.py)."""
    run = shared_runs.failed_run(name)
    assert run.first_bad_step < 150, name
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


def _replay_bad_step(run: faults.FaultRun, probe: TorchFunctionMode) -> None:
    """Replay the bad step's forward and loss under ``probe`` (the GradScaler skipped its
    update, so the weights are still those of that step)."""
    trainer = run.trainer
    row = run.record.steps[run.first_bad_step]
    batch = to_device(trainer.batches(row["batch"]), trainer.device, trainer.input_dtype)
    with torch.no_grad(), trainer.autocast(), probe:
        trainer.loss_fn(trainer.model, batch)


def _first_nonfinite_call(run: faults.FaultRun):
    """The first call of the bad step's replay that made inf/NaN."""
    probe = _Calls(run.trainer.device.type)
    _replay_bad_step(run, probe)
    return next((c for c in probe.calls if c[-1]), None)


# cross_entropy reaches a TorchFunctionMode whole; CUDA autocast runs its log_softmax in fp32
_ALIASES = {"cross_entropy": "log_softmax"}


class _CudaAutocast(TorchFunctionMode):
    """CUDA's fp16 autocast policy in place of the CPU's: where CPU autocast is on, a
    listed fp16 op gets fp16 inputs, a listed fp32 op fp32 inputs, any other op runs in
    the dtype of its inputs (autocast leaves it alone on every device), each with CPU
    autocast off; where the model turned autocast off itself, nothing changes. Records
    the first call whose output holds +inf or NaN, with its dtype."""

    def __init__(self, device_type: str):
        super().__init__()
        self.device_type, self.first = device_type, None

    def __torch_function__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        if torch.is_autocast_enabled(self.device_type):
            name = getattr(func, "__name__", str(func))
            name = _ALIASES.get(name, name)
            dtype = (torch.float16 if name in CUDA_FP16_OPS
                     else torch.float32 if name in CUDA_FP32_OPS else None)
            if dtype is not None:
                def cast(a):
                    floating = isinstance(a, torch.Tensor) and a.is_floating_point()
                    return a.to(dtype) if floating else a
                args, kwargs = tree_map(cast, (args, kwargs))
            with torch.autocast(self.device_type, enabled=False):
                out = func(*args, **kwargs)
        else:
            out = func(*args, **kwargs)
        if self.first is None and isinstance(out, torch.Tensor) and out.is_floating_point() \
                and out.numel() and bool((out == torch.inf).any() or out.isnan().any()):
            self.first = (getattr(func, "__name__", str(func)), out.dtype)
        return out


def _under_cuda_autocast(run: faults.FaultRun):
    """The bad step under CUDA's autocast policy: the first (op, dtype) that made +inf or
    NaN, or None if the step stays finite there."""
    probe = _CudaAutocast(run.trainer.device.type)
    _replay_bad_step(run, probe)
    return probe.first


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


def test_cudas_policy_on_the_cpu_widens_exp_and_keeps_a_matmul_in_fp16():
    """The emulator itself: exp(12) overflows fp16 under CPU autocast, not under CUDA's
    policy (exp runs in fp32); a product past 65504 overflows under both."""
    x, big = torch.full((2, 2), 6.0), torch.full((2, 2), 200.0)
    with torch.amp.autocast(device_type="cpu", dtype=torch.float16):
        assert torch.isinf(torch.exp(x @ torch.eye(2) * 2)).all()  # CPU: fp16 exp
        probe = _CudaAutocast("cpu")
        with probe:
            y = torch.exp(x @ torch.eye(2) * 2)
        assert y.dtype == torch.float32 and torch.isfinite(y).all() and probe.first is None
        with probe:
            z = big @ big
        assert probe.first == ("matmul", torch.float16) and torch.isinf(z).all()


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
    # otherwise the op ran outside autocast, on fp16 inputs: its dtype follows its inputs
    # on every device; or inside autocast, an op that CUDA autocast leaves alone too (a
    # subtraction of two fp16 scores, say): then CUDA's policy must overflow it as well
    call = _first_nonfinite_call(run)
    if call is not None and not call[1]:
        func, _, in_dtypes, out_dtype, _ = call
        assert in_dtypes == {torch.float16} and out_dtype == torch.float16, call
        assert op in func or func in op, (op, func)  # the same op, seen from Python
        return
    assert op not in CUDA_FP32_OPS, (f"{name}: {op} made the first inf inside autocast; "
                                     f"CUDA autocast would run it in fp32")
    first = _under_cuda_autocast(run)
    assert first is not None and first[1] == torch.float16, (name, op, first)


@pytest.mark.parametrize("name", [n for n in PRECISION_FAULTS
                                  if faults.fault_config(n).precision == "fp16"])
def test_the_bad_step_overflows_in_fp16_under_cudas_autocast_policy(name):
    """Whichever op a CPU kernel path makes overflow first, the same weights and batch
    under CUDA's autocast op lists make a non-finite value too, in an fp16 tensor."""
    first = _under_cuda_autocast(failed_run(name))
    assert first is not None and first[1] == torch.float16, (name, first)


@pytest.mark.parametrize("name", PRECISION_FAULTS)
def test_the_declared_cure_cures_it(name):
    fault = faults.get_fault(name)
    cured = shared_runs.shared_run(name, fixes=[fault.cure])  # test_faults reads fp16_overflow's
    assert cured.record.first_nonfinite_step is None, name
    assert judge(cured).healthy, judge(cured)
