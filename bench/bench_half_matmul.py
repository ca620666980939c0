"""What fp16 costs on this CPU: the native fp16 GEMM against nanlab's widened one.

Times one (1024 x 64) @ (64 x 256) product (the toy model's MLP) in fp32, bf16, native
fp16 and fp16 widened to fp32 and rounded once (``nanlab.layers.half_matmul``), then 20 fp16
training steps of the toy model with and without the widening. Also checks that the two
fp16 products agree within one fp16 rounding. Asserts nothing.

Run:  .venv/bin/python bench/bench_half_matmul.py
The last line is JSON, to quote.
"""

from __future__ import annotations

import json
import time

import torch
from torch.utils._python_dispatch import TorchDispatchMode

from nanlab.layers.half_matmul import matmul_in_fp32
from nanlab.train import TrainConfig, Trainer

REPEATS = 30


def per_call_ms(fn) -> float:
    fn()
    start = time.perf_counter()
    for _ in range(REPEATS):
        fn()
    return (time.perf_counter() - start) / REPEATS * 1e3


class _Native(TorchDispatchMode):
    """Any active mode makes the Trainer keep PyTorch's own fp16 kernels."""

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        return func(*args, **(kwargs or {}))


def steps_s(native: bool, steps: int = 20) -> float:
    trainer = Trainer(TrainConfig(precision="fp16", steps=steps, progress=False,
                                  checkpoint_every=0, record_every=0))
    start = time.perf_counter()
    if native:
        with _Native():
            trainer.run()
    else:
        trainer.run()
    return time.perf_counter() - start


def main() -> None:
    a, b = torch.randn(1024, 64), torch.randn(64, 256)
    ms = {str(dtype).split(".")[1]: round(per_call_ms(lambda d=dtype: a.to(d) @ b.to(d)), 3)
          for dtype in (torch.float32, torch.bfloat16, torch.float16)}
    ah, bh = a.half(), b.half()
    ms["float16 widened"] = round(per_call_ms(
        lambda: matmul_in_fp32(torch.ops.aten.mm.default, ah, bh)), 3)
    gap = (matmul_in_fp32(torch.ops.aten.mm.default, ah, bh).float()
           - (ah @ bh).float()).abs().max().item()
    for name, value in ms.items():
        print(f"{name:16} {value:8.3f} ms per product (casts included)")
    print(f"largest difference between the two fp16 products: {gap:g}")
    train = {"native": round(steps_s(True), 2), "widened": round(steps_s(False), 2)}
    print(f"20 fp16 training steps: native {train['native']} s, widened {train['widened']} s")
    print(json.dumps({"matmul_ms": ms, "max_abs_difference": gap, "fp16_20_steps_s": train,
                      "threads": torch.get_num_threads()}))


if __name__ == "__main__":
    main()
