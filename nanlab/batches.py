"""Walking nested batches: tuples, lists, dicts and dataclasses of tensors, as users pass them."""

from __future__ import annotations

import dataclasses
import io
from collections.abc import Iterator
from dataclasses import fields, is_dataclass
from typing import Any

import torch

from nanlab.checkpoint import safe_load


def named_tensors(obj: Any, prefix: str) -> Iterator[tuple[str, torch.Tensor]]:
    """(name, tensor) for every tensor in a nested batch or argument, e.g. ``input[0]``.

    >>> [n for n, _ in named_tensors({"x": torch.ones(1), "y": [torch.ones(1)]}, "")]
    ['x', 'y[0]']
    """
    if isinstance(obj, torch.Tensor):
        yield prefix, obj
    elif isinstance(obj, (list, tuple)):
        for i, v in enumerate(obj):
            yield from named_tensors(v, f"{prefix}[{i}]")
    elif isinstance(obj, dict):
        for k, v in obj.items():
            yield from named_tensors(v, f"{prefix}[{k}]" if prefix else str(k))
    elif dataclasses.is_dataclass(obj) and not isinstance(obj, type):
        for f in dataclasses.fields(obj):
            name = f"{prefix}.{f.name}" if prefix else f.name
            yield from named_tensors(getattr(obj, f.name), name)


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
