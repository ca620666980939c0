"""One atomic writer: a file is either the old one or the whole new one, never half of one.

Checkpoints, run manifests, the learner's progress file and the course's notebooks are
all written the same way: the data goes to a temporary file in the target's folder, is
flushed and ``fsync``-ed to the disk, and the temporary file is renamed over the final
name (``os.replace``, atomic on POSIX and Windows). A crash, a full disk or a Ctrl-C in
the middle leaves the old file (or none) and no temporary file behind. The new file
keeps the old one's permissions (a new one gets the usual ``0o666 & ~umask``), not the
``0o600`` that :func:`tempfile.mkstemp` gives.

>>> path = atomic_write("notes/status.txt", "step 40: NaN\\n")
>>> path.read_text()
'step 40: NaN\\n'
"""

from __future__ import annotations

import os
import re
import stat
import tempfile
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import IO, Any


def atomic_write(path: str | Path, data: bytes | str, *, encoding: str = "utf-8") -> Path:
    """Write ``data`` (bytes, or text encoded as ``encoding`` with its newlines kept as
    they are) to ``path`` atomically, making the folder if needed; returns the path.

    Use it for any file a reader may open while it is being written, or that must
    survive a crash whole: a manifest, a progress file, a notebook.

    >>> atomic_write("out/manifest.json", '{"seed": 0}\\n').read_text()
    '{"seed": 0}\\n'
    >>> atomic_write("out/raw.bin", b"\\x00\\x01").read_bytes()
    b'\\x00\\x01'
    """
    payload = data.encode(encoding) if isinstance(data, str) else bytes(data)
    return atomic_write_with(path, lambda f: f.write(payload))


def atomic_torch_save(obj: Any, path: str | Path) -> Path:
    """``torch.save(obj)`` to ``path`` atomically; returns the path.

    A crash in the middle of a save leaves the old checkpoint (or none), never half a
    file that ``torch.load`` chokes on at the worst moment: when you need to roll back.

    >>> import torch
    >>> p = atomic_torch_save({"w": torch.ones(2)}, "ckpt/ckpt_000000.pt")
    >>> torch.load(p, weights_only=True)["w"]
    tensor([1., 1.])
    """
    import torch

    return atomic_write_with(path, lambda f: torch.save(obj, f))


def atomic_write_with(path: str | Path, write: Callable[[IO[bytes]], Any]) -> Path:
    """Call ``write(f)`` on a binary file that becomes ``path`` atomically once it returns.

    For a writer that wants a file object (``torch.save``, ``json.dump`` through a
    wrapper, ``np.save``); :func:`atomic_write` and :func:`atomic_torch_save` use it.
    If ``write`` raises, ``path`` is untouched and the temporary file is removed.

    >>> import numpy as np
    >>> p = atomic_write_with("arr/x.npy", lambda f: np.save(f, np.arange(3)))
    >>> np.load(p)
    array([0, 1, 2])
    """
    path = Path(path)
    with _replacing(path) as f:
        write(f)
    return path


@contextmanager
def _replacing(path: Path) -> Iterator[IO[bytes]]:
    path.parent.mkdir(parents=True, exist_ok=True)
    mode = _mode_for(path)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
        with os.fdopen(fd, "wb") as f:
            yield f
            f.flush()
            os.fsync(f.fileno())
        os.chmod(tmp, mode)
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


TEMP_NAME = re.compile(r"\..+\.[a-z0-9_]{8}\.tmp")  # what _replacing names its temporary file


def remove_stray_temp_files(folder: str | Path) -> list[str]:
    """Remove the temporary files a killed write left in ``folder`` (a ``kill -9`` in the
    middle of a checkpoint leaves a full-size ``.ckpt_000050.pt.ab12cd34.tmp``); returns
    their names. Call it only while no other process writes there (a run holds its
    folder's lock, :mod:`nanlab.runlock`): a live writer's temporary file looks the same.

    >>> _ = Path("scratch").mkdir(exist_ok=True)
    >>> _ = Path("scratch/.ckpt_000050.pt.ab12cd34.tmp").write_bytes(b"half a checkpoint")
    >>> remove_stray_temp_files("scratch")
    ['.ckpt_000050.pt.ab12cd34.tmp']
    """
    removed = []
    try:
        entries = sorted(Path(folder).iterdir())
    except OSError:
        return removed
    for path in entries:
        if TEMP_NAME.fullmatch(path.name) and path.is_file() and not path.is_symlink():
            try:
                path.unlink()
            except OSError:
                continue
            removed.append(path.name)
    return removed


def _mode_for(path: Path) -> int:
    """The permissions the new file gets: the old file's, or 0o666 less the umask."""
    try:
        return stat.S_IMODE(path.stat().st_mode)
    except OSError:
        pass
    mask = os.umask(0o022)  # read the umask (there is no getter) and put it back
    os.umask(mask)
    return 0o666 & ~mask


__all__ = ["atomic_torch_save", "atomic_write", "atomic_write_with", "remove_stray_temp_files"]
