"""Walking nested batches: tuples, lists, dicts and dataclasses of tensors, as users pass them.

One walker (:func:`tensor_paths`) finds every tensor and the path to it; the rest is
built on it: names for reports (:func:`named_tensors`), reading and replacing one
tensor (:func:`tensor_at`, :func:`replace_tensor`, how a fault corrupts a batch it did
not make), every tensor mapped (:func:`map_tensors`), a batch made plain or frozen.

>>> batch = (torch.ones(2), torch.zeros(2).long())
>>> [name for name, _ in named_tensors(batch)]
['[0]', '[1]']
>>> replace_tensor(batch, "[0]", torch.zeros(2))[0]
tensor([0., 0.])
"""

from __future__ import annotations

import dataclasses
import io
from collections.abc import Callable, Iterator
from dataclasses import fields, is_dataclass
from typing import Any

import torch

from nanlab.errors import NanlabError
from nanlab.runs.checkpoint import safe_load

TensorPath = tuple  # the keys from a batch down to one tensor: ("features",), (0,), ("x", 1)


def tensor_paths(obj: Any, path: TensorPath = ()) -> Iterator[tuple[TensorPath, torch.Tensor]]:
    """(path, tensor) for every tensor in a nested batch, depth first, in order.

    The one walker: a path is the keys from the batch down to the tensor (a dict key, a
    list or tuple index, a dataclass field name), so :func:`replace_tensor` can put a
    new tensor back where it was found, whatever the batch is made of.

    >>> [p for p, _ in tensor_paths({"x": torch.ones(1), "y": [torch.ones(1)]})]
    [('x',), ('y', 0)]
    """
    children = _children(obj)
    if children is None:
        if isinstance(obj, torch.Tensor):
            yield path, obj
        return
    for key, child in children:
        yield from tensor_paths(child, (*path, key))


def named_tensors(obj: Any, prefix: str = "") -> Iterator[tuple[str, torch.Tensor]]:
    """(name, tensor) for every tensor in a nested batch or argument, e.g. ``input[0]``:
    :func:`tensor_paths` with each path written as a name, for reports.

    >>> [n for n, _ in named_tensors({"x": torch.ones(1), "y": [torch.ones(1)]}, "")]
    ['x', 'y[0]']
    """
    for path, t in tensor_paths(obj):
        yield _name(path, prefix, obj), t


def tensor_at(batch: Any, where: TensorPath | str) -> Any:
    """What sits at ``where`` in a batch: a path of keys, or a name as
    :func:`named_tensors` writes it (``"features"``, ``"[0]"``, ``"x[1]"``).

    >>> tensor_at((torch.zeros(2), {"y": torch.ones(1)}), (1, "y"))
    tensor([1.])
    >>> tensor_at((torch.zeros(2), {"y": torch.ones(1)}), "[1][y]")
    tensor([1.])
    """
    obj = batch
    for key in _path(batch, where):
        obj = _child(obj, key)
    return obj


def replace_tensor(batch: Any, where: TensorPath | str, value: Any) -> Any:
    """A copy of ``batch`` with ``value`` at ``where`` (a path or a name, as in
    :func:`tensor_at`); the batch itself is not changed.

    Tuples stay tuples (named tuples keep their type), lists lists, dicts dicts and
    dataclasses the same dataclass; only the containers on the path are rebuilt, every
    other value is the same object. The empty path replaces the batch itself.

    >>> batch = {"x": torch.zeros(2), "y": [torch.zeros(1), torch.ones(1)]}
    >>> new = replace_tensor(batch, ("y", 1), torch.full((1,), 7.0))
    >>> new["y"][1], batch["y"][1], new["x"] is batch["x"]
    (tensor([7.]), tensor([1.]), True)
    >>> replace_tensor(torch.zeros(1), (), torch.ones(1))
    tensor([1.])
    """
    path = _path(batch, where)
    if not path:
        return value
    key, rest = path[0], path[1:]
    return _rebuilt(batch, {key: replace_tensor(_child(batch, key), rest, value)})


def map_tensors(batch: Any, fn: Callable[[torch.Tensor], Any]) -> Any:
    """The batch rebuilt with ``fn(tensor)`` in place of every tensor (moving a batch to
    a device, casting its floats), containers kept as :func:`replace_tensor` keeps them.

    >>> map_tensors({"x": torch.ones(2), "n": 3}, lambda t: t * 2)
    {'x': tensor([2., 2.]), 'n': 3}
    """
    children = _children(batch)
    if children is None:
        return fn(batch) if isinstance(batch, torch.Tensor) else batch
    return _rebuilt(batch, {k: map_tensors(v, fn) for k, v in children})


# -- the containers a batch is made of ------------------------------------------------
def to_device(batch: Any, device: torch.device, float_dtype: torch.dtype | None = None) -> Any:
    """Move a batch (tensor, dataclass, dict, list or tuple of them) to ``device``.

    ``float_dtype`` also casts floating-point tensors (a pure-fp16 model needs fp16 inputs).

    >>> to_device({"x": torch.ones(2), "y": torch.zeros(2).long()}, torch.device("cpu"),
    ...           float_dtype=torch.float16)
    {'x': tensor([1., 1.], dtype=torch.float16), 'y': tensor([0, 0])}
    """
    def move(t: torch.Tensor) -> torch.Tensor:
        if float_dtype is not None and t.is_floating_point():
            return t.to(device, float_dtype)
        return t.to(device)
    return map_tensors(batch, move)


def _children(obj: Any) -> list[tuple[Any, Any]] | None:
    """(key, value) of a container; None for a leaf (a tensor or anything else)."""
    if isinstance(obj, (list, tuple)):
        return list(enumerate(obj))
    if isinstance(obj, dict):
        return list(obj.items())
    if dataclasses.is_dataclass(obj) and not isinstance(obj, type):
        return [(f.name, getattr(obj, f.name)) for f in dataclasses.fields(obj)]
    return None


def _child(obj: Any, key: Any) -> Any:
    if isinstance(obj, dict) or isinstance(key, int):
        return obj[key]
    return getattr(obj, key)


def _rebuilt(obj: Any, changes: dict) -> Any:
    """The same kind of container with the values at ``changes``' keys replaced."""
    if isinstance(obj, dict):
        return {**obj, **changes}
    if isinstance(obj, (list, tuple)):
        items = [changes.get(i, v) for i, v in enumerate(obj)]
        if isinstance(obj, list):
            return items
        return type(obj)(*items) if hasattr(obj, "_fields") else tuple(items)
    return dataclasses.replace(obj, **changes)


def _name(path: TensorPath, prefix: str, obj: Any) -> str:
    """A path as a name: ``x[1]``, ``[0]``, ``features.raw``."""
    name = prefix
    for key in path:
        if isinstance(obj, (list, tuple)):
            name = f"{name}[{key}]"
        elif isinstance(obj, dict):
            name = f"{name}[{key}]" if name else str(key)
        else:
            name = f"{name}.{key}" if name else str(key)
        obj = _child(obj, key)
    return name


def _path(batch: Any, where: TensorPath | str) -> TensorPath:
    if isinstance(where, tuple):
        return where
    for path, _ in tensor_paths(batch):
        if _name(path, "", batch) == where:
            return path
    names = [n for n, _ in named_tensors(batch)]
    raise NanlabError(f"no tensor named {where!r} in this {type(batch).__name__} batch; "
                      f"its tensors: {', '.join(map(repr, names)) or 'none'}")


def plain(batch: Any) -> Any:
    """A batch as tensors and plain Python (dataclasses become dicts), on the CPU, so that
    ``torch.load(weights_only=True)`` can read it back.

    >>> plain({"x": torch.ones(1), "n": 3})
    {'x': tensor([1.]), 'n': 3}
    """
    if isinstance(batch, torch.Tensor):
        return batch.detach().cpu()
    if is_dataclass(batch) and not isinstance(batch, type):
        return {"type": type(batch).__name__,
                **{f.name: plain(getattr(batch, f.name)) for f in fields(batch)}}
    if isinstance(batch, dict):
        return {k: plain(v) for k, v in batch.items()}
    if isinstance(batch, (list, tuple)):
        return [plain(v) for v in batch]
    return batch


def frozen(obj: Any) -> Any:
    """A deep copy made through ``torch.save`` and a ``weights_only`` load: what you keep
    is what a file would hold, and a later change to the live tensors cannot touch it.

    >>> live = {"w": torch.ones(2)}
    >>> kept = frozen(live)
    >>> _ = live["w"].add_(1)           # training goes on
    >>> kept["w"]
    tensor([1., 1.])
    """
    buf = io.BytesIO()
    torch.save(obj, buf)
    return safe_load(buf.getvalue())
