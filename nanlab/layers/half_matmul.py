"""fp16 matrix products on a CPU, computed the way a GPU computes them, and fast.

Most CPUs have no fp16 matrix unit (no AVX512-FP16 or AMX-FP16): PyTorch's CPU kernel for
an fp16 matmul then runs 20-80x slower than the fp32 one (``bench/bench_half_matmul.py``),
and fp16 steps would take most of a lab's minute. On a GPU, PyTorch's fp16 GEMM takes
fp16 inputs, accumulates in fp32 and writes fp16 (cublasGemmEx with compute type
CUDA_R_32F in aten/src/ATen/cuda/CUDABlas.cpp, pytorch/pytorch issue #123157; only
split-K partial sums may be reduced in less, the ``allow_fp16_reduced_precision_reduction``
flag of "CUDA semantics"), and so does the CPU's own slow kernel. So does this: the fp16
inputs widen to fp32 exactly, one fp32 product, one rounding to fp16. A result past
65504 is inf, as in the native kernel; every other op (exp, softmax, the loss, the
GradScaler) runs in fp16 untouched.

The Trainer turns it on for its forward and backward passes when it trains in fp16 on a
CPU; ``nanlab.debug``'s op tracer applies the same rule, so a replay under the tracer
gives the run's numbers bit for bit.
"""

from __future__ import annotations

import contextlib

import torch
from torch.utils._python_dispatch import TorchDispatchMode, _get_current_dispatch_mode

aten = torch.ops.aten
MATMULS = frozenset({aten.mm.default, aten.addmm.default, aten.bmm.default,
                     aten.baddbmm.default})


def applies(func, args) -> bool:
    """Is this an fp16 matmul on the CPU (the slow kernel)?

    >>> h = torch.ones(2, 2, dtype=torch.float16)
    >>> applies(aten.mm.default, (h, h)), applies(aten.mm.default, (h.float(), h.float()))
    (True, False)
    """
    if func not in MATMULS:
        return False
    tensors = [a for a in args if isinstance(a, torch.Tensor)]
    return bool(tensors) and all(t.dtype == torch.float16 and t.device.type == "cpu"
                                 for t in tensors)


def matmul_in_fp32(func, *args, **kwargs):
    """``func`` on the fp16 ``args`` widened to fp32, the result rounded to fp16 once.

    >>> a = torch.full((1, 2), 200.0, dtype=torch.float16)
    >>> matmul_in_fp32(aten.mm.default, a, a.T)  # 80000 > 65504: inf, as in fp16
    tensor([[inf]], dtype=torch.float16)
    """
    wide = [a.float() if isinstance(a, torch.Tensor) else a for a in args]
    return func(*wide, **kwargs).to(torch.float16)


def run_op(func, *args, **kwargs):
    """Run one aten op under the rule: an fp16 CPU matmul widened, any other op as is.
    The Trainer's mode and ``nanlab.debug``'s tracer both call this, so they agree.

    >>> h = torch.full((1, 2), 200.0, dtype=torch.float16)
    >>> run_op(aten.mm.default, h, h.T), run_op(aten.add.Tensor, h, h)
    (tensor([[inf]], dtype=torch.float16), tensor([[400., 400.]], dtype=torch.float16))
    """
    if applies(func, args):
        return matmul_in_fp32(func, *args, **kwargs)
    return func(*args, **kwargs)


class HalfMatmulInFp32(TorchDispatchMode):
    """Runs every op through :func:`run_op`: fp16 CPU matmuls widened, the rest as is.

    >>> x = torch.full((1, 2), 200.0, dtype=torch.float16)
    >>> with HalfMatmulInFp32():
    ...     y = x @ x.T
    >>> y  # 80000: past fp16's 65504
    tensor([[inf]], dtype=torch.float16)
    """

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        return run_op(func, *args, **(kwargs or {}))


def half_matmul(device: torch.device, precision: str):
    """The context a training step runs in: :class:`HalfMatmulInFp32` for fp16 on a CPU,
    unless another dispatch mode is already active (nanlab's tracer, which applies the
    same rule itself, or one of the user's); otherwise nothing.

    >>> type(half_matmul(torch.device("cpu"), "fp16")).__name__
    'HalfMatmulInFp32'
    >>> type(half_matmul(torch.device("cpu"), "bf16")).__name__
    'nullcontext'
    """
    if device.type != "cpu" or precision not in ("fp16", "fp16-pure") \
            or _get_current_dispatch_mode() is not None:
        return contextlib.nullcontext()
    return HalfMatmulInFp32()
