"""When a run is non-finite under ``torch.compile`` and not eagerly (or the reverse): where
the two part, and which compiler stage made the difference.

Eager PyTorch rounds every fp16/bf16 op's result to the low dtype before the next op
reads it. Inductor fuses a chain of pointwise ops and reductions into one kernel and keeps
the values between them in fp32, dropping those round trips (torch/_inductor/config.py,
the comment above ``emulate_precision_casts``). fp32's range and precision are wider, so
a value that overflows fp16 between two ops (x * x past 65504) is inf eagerly and finite
compiled, and one that underflows fp16 (x * x below 6e-8) is 0 eagerly and tiny compiled.
Either can decide finite against non-finite:

- :func:`one_pass_norm` (E[x^2] - E[x]^2, a hand-written norm): with fp16 activations past
  sqrt(65504) = 256 both terms are inf eagerly and inf - inf = NaN; compiled, it is the
  right, finite answer. Eager is the NaN run here (the reverse of what users report).
- :func:`guarded_reciprocal` (1 / n behind ``where(n > 0, ...)``): eagerly n rounds to 0
  in fp16 and the guard returns 0; compiled, n is a tiny fp32 number that passes the
  guard and 1 / n overflows fp16 when stored: compiled inf, eager finite, the direction
  of pytorch/pytorch#114109 and huggingface/pytorch-image-models#2616.

:func:`compare_eager_compiled` measures where the outputs differ; :func:`bisect_compile`
runs PyTorch's own ``CompilerBisector`` (torch/_inductor/compiler_bisector.py: eager ->
aot_eager -> aot_eager_decomp_partition -> inductor, then the inductor subsystems one by
one) and names the first backend and subsystem that disagrees with eager. For both
functions above it names ``inductor_emulate_precision_casts``: setting
``torch._inductor.config.emulate_precision_casts = True`` keeps eager's round trips, and
the compiled output matches eager again.

>>> from nanlab.debug.compile_bisect import compare_eager_compiled, one_pass_norm
>>> x = torch.tensor([[300.0, 290.0, 310.0, 305.0]], dtype=torch.float16)
>>> print(compare_eager_compiled(one_pass_norm, x))  # doctest: +SKIP
eager is non-finite (4 of 4 values), compiled is finite; ...
"""

from __future__ import annotations

import contextlib
import io
import math
from collections.abc import Callable
from dataclasses import dataclass, field

import torch

from nanlab.errors import NanlabError

__all__ = ["Bisection", "Comparison", "TinyNormNet", "bisect_compile", "compare_eager_compiled",
           "guarded_reciprocal", "one_pass_norm"]


def one_pass_norm(x: torch.Tensor, eps: float = 1e-5) -> torch.Tensor:
    """A hand-written LayerNorm (no affine) with the one-pass variance E[x^2] - E[x]^2.

    In fp16 eager, a row whose values pass 256 squares to inf in both terms, and
    inf - inf = NaN; in fp32 (or compiled, see the module docstring) it is finite.

    >>> x = torch.tensor([[300.0, 290.0, 310.0, 305.0]])
    >>> bool(one_pass_norm(x).isfinite().all()), bool(one_pass_norm(x.half()).isnan().all())
    (True, True)
    """
    mean = x.mean(-1, keepdim=True)
    var = (x * x).mean(-1, keepdim=True) - mean * mean
    return (x - mean) / torch.sqrt(var + eps)


def guarded_reciprocal(x: torch.Tensor) -> torch.Tensor:
    """1 / sum(x^2) over the last dim, with a guard that returns 0 where the sum is 0.

    The guard tests the sum in whatever precision the sum was kept: in fp16 eager a sum
    below fp16's smallest subnormal (~6e-8) is 0 and the guard catches it; fused in fp32
    it is not 0, and 1 / sum overflows fp16 when the result is stored.

    >>> x = torch.full((1, 4), 1e-4)
    >>> guarded_reciprocal(x.half()).tolist(), guarded_reciprocal(x).item() > 65504
    ([[0.0]], True)
    """
    n = (x * x).sum(-1, keepdim=True)
    return torch.where(n > 0, 1.0 / n, torch.zeros_like(n))


class TinyNormNet(torch.nn.Module):
    """Raw features -> :func:`one_pass_norm` -> Linear -> ReLU -> Linear (4 classes): the
    smallest model whose fp16 training step is NaN eagerly and finite compiled, for
    features near 300 (tests/test_compile_nan.py, bench/bench_compile_nan.py).

    >>> net = TinyNormNet()
    >>> net(torch.full((2, 8), 300.0) + torch.arange(8.0)).shape
    torch.Size([2, 4])
    """

    def __init__(self):
        super().__init__()
        self.lin1, self.lin2 = torch.nn.Linear(8, 16), torch.nn.Linear(16, 4)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.lin2(torch.relu(self.lin1(one_pass_norm(x))))


# ---------------------------------------------------------------------------------------
# Comparing the eager output with the compiled one
# ---------------------------------------------------------------------------------------
def _tensors(out) -> list[torch.Tensor]:
    """The floating-point tensors of an output: a tensor, or a tuple/list/dict of them."""
    if isinstance(out, torch.Tensor):
        return [out] if out.is_floating_point() else []
    if isinstance(out, dict):
        out = list(out.values())
    if isinstance(out, (tuple, list)):
        return [t for item in out for t in _tensors(item)]
    return []


@dataclass
class Comparison:
    r"""Where an eager output and its compiled twin differ.

    ``eager_bad`` / ``compiled_bad``: how many values are NaN or inf in each (of
    ``total``); ``mismatched``: how many values are finite in one and not in the other;
    ``max_abs_diff``: the largest difference where both are finite (nan if none is);
    ``agree``: the same values are finite, and those agree within the tolerances;
    ``eager`` / ``compiled``: the two outputs themselves (left out of the repr).

    >>> c = Comparison(total=4, eager_bad=4, compiled_bad=0, mismatched=4,
    ...                max_abs_diff=float("nan"), agree=False)
    >>> print(*str(c).split("; "), sep="\n")
    eager is non-finite (4 of 4 values), compiled is finite
    values finite in one and not the other: 4
    no value finite in both
    """

    total: int
    eager_bad: int
    compiled_bad: int
    mismatched: int
    max_abs_diff: float
    agree: bool
    eager: object = field(default=None, repr=False)
    compiled: object = field(default=None, repr=False)

    def __str__(self) -> str:
        def state(bad: int) -> str:
            return f"non-finite ({bad} of {self.total} values)" if bad else "finite"
        diff = ("no value finite in both" if math.isnan(self.max_abs_diff)
                else f"max abs diff where both are finite: {self.max_abs_diff:.3g}")
        agree = "; they agree" if self.agree else ""
        return (f"eager is {state(self.eager_bad)}, compiled is {state(self.compiled_bad)}; "
                f"values finite in one and not the other: {self.mismatched}; {diff}{agree}")


def _compare(eager, compiled, atol: float, rtol: float) -> Comparison:
    left, right = _tensors(eager), _tensors(compiled)
    if not left or len(left) != len(right):
        raise NanlabError(f"the function must return a floating-point tensor (or a tuple of "
                          f"them) both eagerly and compiled; got {type(eager).__name__} "
                          f"eagerly and {type(compiled).__name__} compiled")
    total = eager_bad = compiled_bad = mismatched = 0
    worst, close = float("nan"), True
    for e, c in zip(left, right, strict=True):
        e, c = e.detach().float(), c.detach().float()
        fe, fc = e.isfinite(), c.isfinite()
        total += e.numel()
        eager_bad += int((~fe).sum())
        compiled_bad += int((~fc).sum())
        mismatched += int((fe != fc).sum())
        both = fe & fc
        if both.any():
            gap = (e[both] - c[both]).abs()
            worst = max(gap.max().item(), 0.0 if math.isnan(worst) else worst)
            close &= bool((gap <= atol + rtol * e[both].abs()).all())
    return Comparison(total, eager_bad, compiled_bad, mismatched, worst,
                      agree=mismatched == 0 and close, eager=eager, compiled=compiled)


def _check_fn(fn) -> None:
    if not callable(fn):
        raise NanlabError(f"fn must be a callable (a function or a module); got "
                          f"{type(fn).__name__} {fn!r:.60}")


def _eager_call(fn: Callable, args: tuple):
    """fn(*args) as written; an error of fn's own is one line, not a compiler question."""
    try:
        return fn(*args)
    except Exception as err:
        first = (str(err).strip().splitlines() or [""])[0]
        raise NanlabError(f"fn(*args) fails eagerly, before any compiling ({type(err).__name__}: "
                          f"{first[:200]}); pass the arguments fn takes") from err


def _compiled_call(fn: Callable, args: tuple, options: dict | None = None):
    """fn compiled afresh (no graph cached by an earlier call or config) and called."""
    torch._dynamo.reset()
    try:
        return torch.compile(fn, options=options)(*args)
    except Exception as err:  # a compiler failure is not a numerical difference
        first = (str(err).strip().splitlines() or [""])[0]
        raise NanlabError(f"torch.compile could not compile or run fn "
                          f"({type(err).__name__}: {first[:200]}); inductor on a CPU needs a "
                          "C++ compiler (gcc or clang) on the PATH") from err
    finally:
        torch._dynamo.reset()


def compare_eager_compiled(fn: Callable, *args, atol: float = 1e-3, rtol: float = 1e-2,
                           options: dict | None = None) -> Comparison:
    """Call ``fn(*args)`` eagerly and under ``torch.compile`` (inductor), and say where the
    outputs differ: which are non-finite, and by how much the finite values differ.

    ``options`` goes to ``torch.compile`` (inductor config keys), e.g.
    ``{"emulate_precision_casts": True}`` to keep eager's fp16/bf16 round trips.

    >>> x = torch.full((1, 4), 1e-4, dtype=torch.float16)
    >>> print(compare_eager_compiled(guarded_reciprocal, x))  # doctest: +SKIP
    eager is finite, compiled is non-finite (1 of 1 values); values finite in one and not ...
    >>> compare_eager_compiled("not a function")
    Traceback (most recent call last):
    ...
    nanlab.errors.NanlabError: fn must be a callable (a function or a module); got str ...
    """
    _check_fn(fn)
    with torch.no_grad():
        eager = _eager_call(fn, args)
        compiled = _compiled_call(fn, args, options)
    return _compare(eager, compiled, atol, rtol)


# ---------------------------------------------------------------------------------------
# Bisecting with PyTorch's own CompilerBisector
# ---------------------------------------------------------------------------------------
_REMEDY = {
    "inductor_emulate_precision_casts": "torch._inductor.config.emulate_precision_casts = "
                                        "True (keep eager's fp16/bf16 round trips), or do "
                                        "the op in fp32",
    "inductor_fallback_random": "torch._inductor.config.fallback_random = True (eager's "
                                "random numbers)",
}


@dataclass
class Bisection:
    r"""What ``CompilerBisector`` found: the first ``backend`` whose output disagrees with
    eager, the ``subsystem`` inside it whose disabling (or config change) makes it agree,
    and for a counted subsystem (passes, lowerings) the ``bisect_number`` of the
    application that did it and its ``debug_info``. ``comparison`` is what was bisected.

    >>> b = Bisection("inductor", "inductor_emulate_precision_casts", 0, None, None)
    >>> print(*str(b).split("; "), sep="\n")  # doctest: +ELLIPSIS
    first backend that differs from eager: inductor
    subsystem: inductor_emulate_precision_casts
    it agrees with: torch._inductor.config.emulate_precision_casts = True ...
    """

    backend: str
    subsystem: str | None
    bisect_number: int | None
    debug_info: str | None
    comparison: Comparison | None

    def __str__(self) -> str:
        line = f"first backend that differs from eager: {self.backend}"
        if self.subsystem is None:
            return line + "; no single subsystem inside it explains the difference"
        line += f"; subsystem: {self.subsystem}"
        if self.subsystem in _REMEDY:
            return line + f"; it agrees with: {_REMEDY[self.subsystem]}"
        if self.bisect_number is not None:
            line += f" (application {self.bisect_number}"
            line += f": {self.debug_info})" if self.debug_info else ")"
        return line


def bisect_compile(fn: Callable, *args, atol: float = 1e-3, rtol: float = 1e-2,
                   verbose: bool = False) -> Bisection:
    """Bisect where ``torch.compile(fn)(*args)`` first disagrees with ``fn(*args)``: finite
    against non-finite, or values beyond ``atol + rtol * |eager|``.

    The search is PyTorch's ``CompilerBisector.do_bisect``: each try compiles ``fn``
    afresh with the backend (and subsystem settings) under test and reports whether it
    agrees with eager. ``verbose`` shows the bisector's own progress lines.

    >>> x = torch.tensor([[300.0, 290.0, 310.0, 305.0]], dtype=torch.float16)
    >>> print(bisect_compile(one_pass_norm, x))  # doctest: +SKIP
    first backend that differs from eager: inductor; subsystem: inductor_emulate_precision_...
    >>> bisect_compile(one_pass_norm, x.float())  # doctest: +SKIP
    Traceback (most recent call last):
    ...
    nanlab.errors.NanlabError: nothing to bisect: compiled and eager agree (...)
    """
    _check_fn(fn)
    from torch._inductor.compiler_bisector import CompilerBisector

    first = compare_eager_compiled(fn, *args, atol=atol, rtol=rtol)
    if first.agree:
        raise NanlabError(f"nothing to bisect: compiled and eager agree ({first}); bisect "
                          "a call whose compiled output is non-finite or differs")
    eager = first.eager

    def agrees() -> bool:  # the bisector's test: True is good (no difference)
        with torch.no_grad():
            return _compare(eager, _compiled_call(fn, args), atol, rtol).agree

    log = contextlib.nullcontext() if verbose else contextlib.redirect_stdout(io.StringIO())
    with log:
        found = CompilerBisector.do_bisect(agrees)
    if found is None:
        raise NanlabError(f"CompilerBisector found no backend that disagrees with eager, "
                          f"though the first compiled call did ({first}): the difference "
                          "does not reproduce from one call to the next")
    return Bisection(found.backend, found.subsystem, found.bisect_number, found.debug_info,
                     first)
