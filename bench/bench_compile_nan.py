"""Eager against torch.compile (inductor, CPU) on fp16: the numbers of the compile guide.

1. The two functions of :mod:`nanlab.debug.compile_bisect` (a one-pass norm on fp16
   values near 300, a guarded reciprocal of a sum of fp16 squares near 1e-8): eager,
   compiled, and compiled with ``emulate_precision_casts``; then ``bisect_compile`` on each.
2. One training step (forward, cross-entropy, backward, SGD update) of a tiny fp16 model
   whose first layer is the one-pass norm on raw features near 300: the loss, whether every
   gradient and weight is finite, eager against compiled against compiled + emulate.
3. ``nan_asserts`` (TORCHINDUCTOR_NAN_ASSERTS=1) on the compiled guarded reciprocal.

Run:  OMP_NUM_THREADS=1 .venv/bin/python bench/bench_compile_nan.py
The last line is JSON, to quote. Asserts nothing.
"""

from __future__ import annotations

import json
import time

import torch
import torch.nn.functional as F

from nanlab.debug.compile_bisect import (
    TinyNormNet,
    bisect_compile,
    compare_eager_compiled,
    guarded_reciprocal,
    one_pass_norm,
)


def train_step(compiled: bool, options: dict | None = None) -> dict:
    """One SGD step of TinyNormNet in fp16 on features 300 + 10 * N(0, 1)."""
    torch.manual_seed(0)
    model = TinyNormNet().half()
    x = (300 + 10 * torch.randn(32, 8)).half()
    y = torch.randint(0, 4, (32,))
    torch._dynamo.reset()
    run = torch.compile(model, options=options) if compiled else model
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    start = time.perf_counter()
    loss = F.cross_entropy(run(x).float(), y)
    loss.backward()
    grads = all(bool(p.grad.isfinite().all()) for p in model.parameters())
    opt.step()
    weights = all(bool(p.isfinite().all()) for p in model.parameters())
    torch._dynamo.reset()
    return {"loss": loss.item(), "grads_finite": grads, "weights_finite": weights,
            "seconds": round(time.perf_counter() - start, 1)}


def main() -> None:
    norm_x = torch.tensor([[300.0, 290.0, 310.0, 305.0]], dtype=torch.float16)
    tiny_x = torch.full((1, 4), 1e-4, dtype=torch.float16)
    out = {"torch": torch.__version__}
    for name, fn, x in (("one_pass_norm", one_pass_norm, norm_x),
                        ("guarded_reciprocal", guarded_reciprocal, tiny_x)):
        with torch.no_grad():
            eager = fn(x)
            torch._dynamo.reset()
            compiled = torch.compile(fn)(x)
            torch._dynamo.reset()
            emulated = torch.compile(fn, options={"emulate_precision_casts": True})(x)
            torch._dynamo.reset()
        start = time.perf_counter()
        found = bisect_compile(fn, x)
        out[name] = {"eager": eager.tolist(), "compiled": compiled.tolist(),
                     "compiled_emulate_precision_casts": emulated.tolist(),
                     "fp32": fn(x.float()).tolist(),
                     "comparison": str(compare_eager_compiled(fn, x)),
                     "bisect": str(found),
                     "bisect_seconds": round(time.perf_counter() - start, 1)}
        print(name, json.dumps(out[name], indent=1))
    out["train_step"] = {"eager": train_step(False), "compiled": train_step(True),
                         "compiled_emulate_precision_casts":
                             train_step(True, {"emulate_precision_casts": True})}
    print("train_step", json.dumps(out["train_step"], indent=1))
    try:
        torch._dynamo.reset()
        with torch.no_grad():
            torch.compile(guarded_reciprocal, options={"nan_asserts": True})(tiny_x)
        out["nan_asserts"] = "no assertion"
    except Exception as err:
        out["nan_asserts"] = f"{type(err).__name__} {str(err)[:120]}".strip()
    torch._dynamo.reset()
    print(json.dumps(out))


if __name__ == "__main__":
    main()
