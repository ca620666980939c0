"""fp16 matmuls on a CPU, widened to fp32 and rounded once: the numbers of an fp16 GEMM
that accumulates in fp32 (the native kernel, a GPU's), only faster."""

from __future__ import annotations

import pytest
import torch
from torch.utils._python_dispatch import TorchDispatchMode

import nanlab.layers.half_matmul as half_matmul_module
from nanlab.layers.half_matmul import HalfMatmulInFp32, applies, half_matmul, matmul_in_fp32
from nanlab.train import TrainConfig, Trainer

aten = torch.ops.aten


def _half(*shape, seed=0):
    return torch.randn(*shape, generator=torch.Generator().manual_seed(seed)).half()


CASES = {
    "mm": (aten.mm.default, lambda: (_half(16, 8), _half(8, 12, seed=1))),
    "addmm": (aten.addmm.default, lambda: (_half(12, seed=2), _half(16, 8), _half(8, 12, seed=1))),
    "bmm": (aten.bmm.default, lambda: (_half(3, 16, 8), _half(3, 8, 12, seed=1))),
    "baddbmm": (aten.baddbmm.default,
                lambda: (_half(3, 16, 12, seed=2), _half(3, 16, 8), _half(3, 8, 12, seed=1))),
}


@pytest.mark.parametrize("name", CASES)
def test_the_widened_product_is_the_fp16_kernels_within_one_rounding(name):
    func, make = CASES[name]
    args = make()
    native, widened = func(*args), matmul_in_fp32(func, *args)
    assert widened.dtype == torch.float16 and widened.shape == native.shape
    exact = func(*[a.double() for a in args])
    # both are the exact product rounded to fp16 once (fp32 accumulation): within 1 ulp
    ulp = torch.finfo(torch.float16).eps * exact.abs().clamp(min=1e-3)
    assert ((widened.double() - exact).abs() <= ulp).all()
    assert ((native.double() - exact).abs() <= ulp).all()


def test_a_product_past_65504_is_inf_as_in_fp16():
    a = torch.full((2, 4), 200.0, dtype=torch.float16)  # 4 * 200 * 200 = 160000
    assert torch.isinf(matmul_in_fp32(aten.mm.default, a, a.T)).all()
    assert torch.isinf(a @ a.T).all()


def test_only_fp16_cpu_matmuls_are_rerouted(monkeypatch):
    h, f = torch.ones(2, 2, dtype=torch.float16), torch.ones(2, 2)
    assert applies(aten.mm.default, (h, h))
    assert not applies(aten.mm.default, (f, f))
    assert not applies(aten.mm.default, (h.bfloat16(), h.bfloat16()))
    assert not applies(aten.exp.default, (h,))  # exp, softmax, the loss: fp16 as they are
    widened = []
    real = half_matmul_module.matmul_in_fp32
    monkeypatch.setattr(half_matmul_module, "matmul_in_fp32",
                        lambda func, *a, **k: widened.append(func) or real(func, *a, **k))
    with HalfMatmulInFp32():  # exp, the fp32 and the bf16 products are left as they are
        torch.exp(h), f @ f, h.bfloat16() @ h.bfloat16(), h @ h
    assert widened == [aten.mm.default]


def test_the_trainer_steps_in_it_only_for_fp16_on_a_cpu_and_not_under_another_mode():
    cpu = torch.device("cpu")
    assert isinstance(half_matmul(cpu, "fp16"), HalfMatmulInFp32)
    assert isinstance(half_matmul(cpu, "fp16-pure"), HalfMatmulInFp32)
    assert not isinstance(half_matmul(cpu, "bf16"), HalfMatmulInFp32)
    assert not isinstance(half_matmul(torch.device("cuda"), "fp16"), HalfMatmulInFp32)

    class Count(TorchDispatchMode):  # a user's own mode sees the step's ops unchanged
        def __init__(self):
            super().__init__()
            self.mm = 0

        def __torch_dispatch__(self, func, types, args=(), kwargs=None):
            self.mm += func in (aten.mm.default, aten.addmm.default)
            return func(*args, **(kwargs or {}))

    trainer = Trainer(TrainConfig(precision="fp16", steps=2, progress=False))
    with Count() as count:
        assert not isinstance(half_matmul(cpu, "fp16"), HalfMatmulInFp32)
        trainer.train_step()
    assert count.mm > 0
    assert trainer.record.steps[-1]["finite"]
