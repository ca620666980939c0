"""FP8 training on a CPU, in fake quant: scale, cast to a real float8 dtype, cast back.

An FP8 matmul multiplies each tensor by a scale so that its largest magnitude (its amax)
lands on the format's largest value, casts it to 8 bits and multiplies the product by
the inverse scales. Here each operand goes through PyTorch's own ``torch.float8_e4m3fn``
or ``torch.float8_e5m2`` dtype for the rounding and comes straight back, and the matmul
runs in the input's dtype: the values are those of an FP8 GEMM, on any CPU.

The scale is ``fp8_max / amax`` (torchao's ``amax_to_scale`` in
torchao/float8/float8_utils.py, whose amax is clamped at ``EPS = 1e-12`` first). Two
recipes choose the amax (Transformer Engine's ``transformer_engine.common.recipe``):
``"delayed"`` (``DelayedScaling``: the max of the amaxes of the last ``history_len`` steps,
the scale used before this step's amax is known; ``margin`` m divides the scale by 2^m)
and ``"current"`` (``Float8CurrentScaling``: the amax of this tensor now). As in TE's
HYBRID format the forward operands are e4m3 (max 448) and the backward's gradient e5m2
(max 57344). ``rowwise``: one scale per row (per token; per output channel for the
weight), as torchao's rowwise recipe.

What the casts do past the format's max (torch 2.13 CPU, measured in
tests/test_fp8_scaling.py): e4m3fn saturates (500 -> 448, inf -> 448), e5m2 does not
(1e5 -> inf); NaN stays NaN. An amax of 0 with no floor makes the scale inf, and
0 * inf = NaN.
"""

from __future__ import annotations

import torch
import torch.nn as nn
import torch.nn.functional as F

from nanlab.errors import NanlabError, check_choice, check_range

FORMATS = {"e4m3": torch.float8_e4m3fn, "e5m2": torch.float8_e5m2}
EPS = 1e-12  # torchao.float8.float8_utils.EPS: the floor under the amax
RECIPES = ("delayed", "current")


def fp8_max(fmt: str) -> float:
    """The largest finite value of an FP8 format.

    >>> fp8_max("e4m3"), fp8_max("e5m2")
    (448.0, 57344.0)
    """
    check_choice("fp8 format", fmt, FORMATS)
    return float(torch.finfo(FORMATS[fmt]).max)


def amax_of(x: torch.Tensor, rowwise: bool) -> torch.Tensor:
    """The largest magnitude of ``x`` (fp32): one value, or one per row (last dim reduced).

    >>> amax_of(torch.tensor([[1.0, -3.0], [0.0, 0.0]]), rowwise=True).flatten().tolist()
    [3.0, 0.0]
    """
    a = x.detach().abs().float()
    return a.amax(-1, keepdim=True) if rowwise else a.amax()


def amax_to_scale(amax: torch.Tensor, fmt: str, floor: float | None = EPS,
                  margin: int = 0) -> torch.Tensor:
    """``fp8_max / amax`` (divided by 2^margin); ``floor`` None: no clamp, and an amax of 0
    gives an infinite scale.

    >>> amax_to_scale(torch.tensor(2.0), "e4m3").item()
    224.0
    >>> amax_to_scale(torch.tensor(0.0), "e4m3", floor=None).item()
    inf
    """
    if floor is not None:
        amax = amax.clamp(min=floor)
    return fp8_max(fmt) / 2.0 ** margin / amax


def fake_quant(x: torch.Tensor, scale: torch.Tensor, fmt: str,
               saturate: bool = False) -> torch.Tensor:
    """``x`` scaled, cast to the FP8 dtype, cast back and unscaled, in ``x``'s dtype.
    ``saturate``: clamp to the format's max first, as torchao's ``to_fp8_saturated``
    (torchao/float8/float8_utils.py) does; otherwise the cast is PyTorch's own. The
    gradient passes straight through, as the backward of Transformer Engine's cast
    (``_ToFloat8Func`` in transformer_engine/pytorch/float8_tensor.py) passes it: autograd's
    own backward of ``.to(float8)`` would round the gradient itself to FP8, unscaled.

    >>> fake_quant(torch.tensor([0.3, 1.0]), torch.tensor(448.0), "e4m3").tolist()
    [0.2857142984867096, 1.0]
    >>> fake_quant(torch.tensor([2.0]), torch.tensor(57344.0), "e5m2").tolist()  # past max
    [inf]
    >>> fake_quant(torch.tensor([2.0]), torch.tensor(57344.0), "e5m2", saturate=True).tolist()
    [1.0]
    """
    return _Quant.apply(x, scale, fmt, saturate)


class _Quant(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x, scale, fmt, saturate):
        wide = x.float() * scale
        if saturate:
            wide = wide.clamp(-fp8_max(fmt), fp8_max(fmt))
        return (wide.to(FORMATS[fmt]).float() / scale).to(x.dtype)

    @staticmethod
    def backward(ctx, g):
        return g, None, None, None


class AmaxScaler(nn.Module):
    """The scale of one operand of one layer (input, weight or gradient), and what its casts
    saw (``stats``: amaxes of 0, infinite scales, the peak of |x| * scale / fp8_max, values
    a cast turned into inf). The delayed recipe keeps its amax history in a buffer, so a
    checkpoint holds it (as Transformer Engine's extra state does) and a replay from it
    scales as the run did.

    >>> s = AmaxScaler("e5m2", "delayed", history_len=2)
    >>> [s.cast(torch.full((2,), v)).tolist() for v in (1.0, 4.0)]  # 4.0 meets the scale of 1.0
    [[1.0, 1.0], [inf, inf]]
    >>> s.stats["overflow"], s.stats["peak"]
    (2, 4.0)
    """

    def __init__(self, fmt: str, recipe: str = "current", rowwise: bool = False,
                 history_len: int = 16, margin: int = 0, floor: float | None = EPS,
                 saturate: bool = False):
        super().__init__()
        check_choice("fp8 recipe", recipe, RECIPES)
        check_range("fp8 history_len", history_len, 1, 100_000, integer=True)
        if rowwise and recipe == "delayed":
            raise NanlabError("fp8: rowwise=True needs recipe='current' (a row's amax has no "
                              "history: the rows change with every batch); got 'delayed'")
        self.fmt, self.recipe, self.rowwise = fmt, recipe, rowwise
        self.margin, self.floor, self.saturate = margin, floor, saturate
        self.register_buffer("history", torch.zeros(history_len))  # newest first
        self.register_buffer("seen", torch.zeros((), dtype=torch.long))
        self.stats = self.fresh_stats()

    @staticmethod
    def fresh_stats() -> dict:
        return {"zero_amax": 0, "inf_scale": 0, "peak": 0.0, "overflow": 0}

    def scale(self, x: torch.Tensor) -> torch.Tensor:
        """The scale for ``x`` under the recipe; updates the history and the stats."""
        now = amax_of(x, self.rowwise)
        if self.recipe == "delayed" and int(self.seen) > 0:
            amax = self.history[:int(self.seen)].max()  # TE's "max" over the window
        else:  # current scaling, or a delayed one's first step (no history yet)
            amax = now
        if self.recipe == "delayed":
            self.history.copy_(torch.cat([now.reshape(1), self.history[:-1]]))
            self.seen.fill_(min(int(self.seen) + 1, len(self.history)))
        s = amax_to_scale(amax, self.fmt, self.floor, self.margin)
        st = self.stats
        st["zero_amax"] += int((amax == 0).sum())
        st["inf_scale"] += int(torch.isinf(s).sum())
        ratio = (now * s / fp8_max(self.fmt))[torch.isfinite(s.expand_as(now))]
        if ratio.numel() and bool(torch.isfinite(ratio).all()):
            st["peak"] = max(st["peak"], float(ratio.max()))
        return s

    def cast(self, x: torch.Tensor) -> torch.Tensor:
        out = fake_quant(x, self.scale(x), self.fmt, self.saturate)
        self.stats["overflow"] += int(torch.isinf(out).sum()) - int(torch.isinf(x).sum())
        return out


class _CastGrad(torch.autograd.Function):
    """Identity forward; the backward casts the incoming gradient through FP8."""

    @staticmethod
    def forward(ctx, y, scaler):
        ctx.scaler = scaler
        return y.view_as(y)

    @staticmethod
    def backward(ctx, g):
        return ctx.scaler.cast(g), None


class FakeFp8Linear(nn.Linear):
    """An ``nn.Linear`` whose input and weight (e4m3) and output gradient (e5m2) go through
    FP8 with their own scales. It shares the original layer's parameters, so an optimizer
    made before the swap still trains it, and its state dict keeps the same weight names.

    >>> torch.manual_seed(0) is not None
    True
    >>> lin = nn.Linear(8, 4)
    >>> fp8 = FakeFp8Linear.from_linear(lin, recipe="current")
    >>> x = torch.randn(3, 8)
    >>> bool((fp8(x) - lin(x)).abs().max() < 0.05), fp8.weight is lin.weight
    (True, True)
    """

    @classmethod
    def from_linear(cls, linear: nn.Linear, recipe: str = "current", rowwise: bool = False,
                    history_len: int = 16, margin: int = 0, floor: float | None = EPS,
                    saturate: bool = False) -> FakeFp8Linear:
        new = cls.__new__(cls)
        nn.Module.__init__(new)
        new.in_features, new.out_features = linear.in_features, linear.out_features
        new.weight, new.bias = linear.weight, linear.bias
        kw = {"recipe": recipe, "history_len": history_len, "margin": margin, "floor": floor,
              "saturate": saturate}
        new.x_scaler = AmaxScaler("e4m3", rowwise=rowwise, **kw)
        new.w_scaler = AmaxScaler("e4m3", rowwise=rowwise, **kw)
        new.g_scaler = AmaxScaler("e5m2", rowwise=rowwise, **kw)
        return new

    def scalers(self) -> dict[str, AmaxScaler]:
        return {"input": self.x_scaler, "weight": self.w_scaler, "grad": self.g_scaler}

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        y = F.linear(self.x_scaler.cast(x), self.w_scaler.cast(self.weight), self.bias)
        return _CastGrad.apply(y, self.g_scaler) if y.requires_grad else y


def swap_linears(model: nn.Module, **settings) -> list[str]:
    """Replace every ``nn.Linear`` of ``model`` by a :class:`FakeFp8Linear` (settings:
    ``from_linear``'s), as torchao's ``convert_to_float8_training`` swaps its layers. The
    output projection of ``nn.MultiheadAttention`` stays: that module reads its weight
    without calling it. Returns the swapped layers' names.

    >>> net = nn.Sequential(nn.Linear(2, 3), nn.ReLU(), nn.Linear(3, 1))
    >>> swap_linears(net)
    ['0', '2']
    """
    done = []
    for name, parent in list(model.named_modules()):
        if isinstance(parent, nn.MultiheadAttention):
            continue
        for child_name, child in list(parent.named_children()):
            if isinstance(child, nn.Linear) and not isinstance(child, FakeFp8Linear):
                setattr(parent, child_name, FakeFp8Linear.from_linear(child, **settings))
                done.append(f"{name}.{child_name}" if name else child_name)
    return done


def fp8_layers(model: nn.Module) -> dict[str, FakeFp8Linear]:
    """{name: layer} of every :class:`FakeFp8Linear` in ``model``.

    >>> net = nn.Sequential(nn.Linear(2, 2))
    >>> _ = swap_linears(net)
    >>> list(fp8_layers(net))
    ['0']
    """
    return {n: m for n, m in model.named_modules() if isinstance(m, FakeFp8Linear)}


__all__ = ["EPS", "FORMATS", "AmaxScaler", "FakeFp8Linear", "amax_of", "amax_to_scale",
           "fake_quant", "fp8_layers", "fp8_max", "swap_linears"]
