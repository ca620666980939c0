"""NaN under torch.compile but not eagerly, or the reverse (issue 31): inductor fuses fp16
ops and keeps the values between them in fp32, eager rounds each to fp16. Measured on
torch 2.13 CPU inductor: the mechanism both ways, in a function and in a training step,
the cure (emulate_precision_casts), and PyTorch's CompilerBisector naming it through
nanlab.debug.compile_bisect. Each compile is of a few ops on tiny tensors (seconds)."""

import pytest
import torch
import torch.nn.functional as F

from nanlab.debug.compile_bisect import (
    TinyNormNet,
    bisect_compile,
    compare_eager_compiled,
    guarded_reciprocal,
    one_pass_norm,
)
from nanlab.errors import NanlabError


def _cpp_compiler() -> str | None:
    """Inductor's own search for a C++ compiler (torch/_inductor/cpp_builder.py)."""
    try:
        from torch._inductor.cpp_builder import get_cpp_compiler
        return get_cpp_compiler()
    except Exception:
        return None


needs_inductor = pytest.mark.skipif(_cpp_compiler() is None,
                                    reason="inductor on a CPU needs a C++ compiler (g++ or "
                                           "clang++); none was found")

NEAR_300 = torch.tensor([[300.0, 290.0, 310.0, 305.0]], dtype=torch.float16)
TINY = torch.full((1, 4), 1e-4, dtype=torch.float16)  # x * x = 1e-8 < fp16's ~6e-8


@pytest.fixture(autouse=True)
def _fresh_dynamo():
    torch._dynamo.reset()
    yield
    torch._dynamo.reset()


# -- the mechanism eagerly: fp16 rounding between ops -----------------------------------
def test_eager_fp16_rounds_between_ops_to_inf_and_to_zero():
    square = NEAR_300 * NEAR_300
    assert square.isinf().all()  # 90,000 > 65,504: inf, and E[x^2] - E[x]^2 = inf - inf
    assert one_pass_norm(NEAR_300).isnan().all()
    assert one_pass_norm(NEAR_300.float()).isfinite().all()
    assert (TINY * TINY).eq(0).all()  # 1e-8 underflows fp16: the guard sees 0
    assert guarded_reciprocal(TINY).tolist() == [[0.0]]
    assert guarded_reciprocal(TINY.float()).item() > 65504  # the exact answer overflows fp16


# -- compiled: the fused kernel keeps fp32 between the ops --------------------------------
@needs_inductor
def test_compiled_one_pass_norm_is_finite_where_eager_is_nan_and_emulation_restores_eager():
    diff = compare_eager_compiled(one_pass_norm, NEAR_300)
    assert (diff.eager_bad, diff.compiled_bad, diff.mismatched) == (4, 0, 4) and not diff.agree
    reference = one_pass_norm(NEAR_300.float())  # fp32 end to end
    assert torch.allclose(diff.compiled.float(), reference, atol=5e-3)  # one fp16 rounding
    emulated = compare_eager_compiled(one_pass_norm, NEAR_300,
                                      options={"emulate_precision_casts": True})
    assert emulated.compiled_bad == 4 and emulated.agree  # NaN like eager


@needs_inductor
def test_compiled_guard_passes_a_sum_eager_rounds_to_zero_and_overflows():
    diff = compare_eager_compiled(guarded_reciprocal, TINY)  # the direction users report
    assert (diff.eager_bad, diff.compiled_bad) == (0, 1)
    assert diff.eager.tolist() == [[0.0]] and diff.compiled.isinf().all()
    assert compare_eager_compiled(guarded_reciprocal, TINY,
                                  options={"emulate_precision_casts": True}).agree


def _train_step(compiled: bool) -> tuple[float, bool]:
    torch.manual_seed(0)
    model = TinyNormNet().half()
    x, y = (300 + 10 * torch.randn(32, 8)).half(), torch.randint(0, 4, (32,))
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    loss = F.cross_entropy((torch.compile(model) if compiled else model)(x).float(), y)
    loss.backward()
    opt.step()
    return loss.item(), all(bool(p.isfinite().all()) for p in model.parameters())


@needs_inductor
def test_a_training_step_is_nan_eagerly_and_finite_compiled():
    eager_loss, eager_ok = _train_step(compiled=False)
    assert eager_loss != eager_loss and not eager_ok  # NaN loss, NaN weights after the step
    compiled_loss, compiled_ok = _train_step(compiled=True)
    assert 0.5 < compiled_loss < 3.0 and compiled_ok  # ~ln 4 = 1.39 at init


# -- PyTorch's CompilerBisector, through bisect_compile ----------------------------------
@needs_inductor
def test_the_bisector_names_inductor_and_its_precision_casts():
    found = bisect_compile(one_pass_norm, NEAR_300)
    assert (found.backend, found.subsystem) == ("inductor", "inductor_emulate_precision_casts")
    line = str(found)
    assert "\n" not in line and "emulate_precision_casts = True" in line
    assert found.comparison is not None and found.comparison.eager_bad == 4
    from torch._inductor.compiler_bisector import CompilerBisector
    assert CompilerBisector.get_backend() is None  # later torch.compile calls are plain again


# -- bad input: one line ----------------------------------------------------------------
def test_bad_input_is_one_line():
    with pytest.raises(NanlabError, match="fn must be a callable") as err:
        bisect_compile(42, NEAR_300)
    assert "\n" not in str(err.value)


@needs_inductor
def test_nothing_to_bisect_and_a_non_tensor_output_are_one_line():
    with pytest.raises(NanlabError, match="nothing to bisect: compiled and eager agree") as err:
        bisect_compile(one_pass_norm, NEAR_300.float())
    assert "\n" not in str(err.value)
    with pytest.raises(NanlabError, match="must return a floating-point tensor"):
        compare_eager_compiled(lambda x: x.shape[0], NEAR_300)
    with pytest.raises(NanlabError, match="fails eagerly, before any compiling"):
        compare_eager_compiled(one_pass_norm, "not a tensor")
