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

import errno
import os
import re
import stat
import tempfile
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import IO, Any

from nanlab.errors import StorageError


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
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        mode = _mode_for(path)
        fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    except OSError as e:
        raise storage_error(e, path) or e from None
    try:
        with os.fdopen(fd, "wb") as f:
            yield f
            f.flush()
            os.fsync(f.fileno())
        os.chmod(tmp, mode)
        os.replace(tmp, path)
    except BaseException as e:
        named = storage_error(e, path)  # read before the temp file frees its space
        Path(tmp).unlink(missing_ok=True)
        if named is not None:
            raise named from e
        raise


NO_SPACE = (errno.ENOSPC, errno.EDQUOT)
NO_PERMISSION = (errno.EACCES, errno.EPERM, errno.EROFS)
LOW_SPACE_BYTES = 1 << 20  # a failed write with less than this left is a full disk


def storage_error(e: BaseException, path: str | Path) -> StorageError | None:
    """What a failed write means, in one line, when it is the storage's fault: no space
    left (from the error number, or, for torch.save's C++ writer, which reports only
    "unexpected pos", from the space left on the disk), or no permission. None otherwise.

    >>> print(storage_error(OSError(errno.ENOSPC, "No space left on device"), "run/ckpt.pt"))
    run/ckpt.pt: no space left on device; free some space (or choose another --out), then resume
    >>> storage_error(ValueError("bad"), "run/ckpt.pt") is None
    True
    """
    if isinstance(e, StorageError):
        return e
    chain, seen = [], e
    while seen is not None and len(chain) < 10:
        chain.append(seen)
        seen = seen.__cause__ or seen.__context__
    numbers = {getattr(x, "errno", None) for x in chain if isinstance(x, OSError)}
    if numbers & set(NO_SPACE) or _disk_nearly_full(e, Path(path)):
        return StorageError("no space left on device", path,
                            "free some space (or choose another --out), then resume")
    if numbers & set(NO_PERMISSION):
        return StorageError("permission denied (or a read-only file system)", path,
                            "choose a folder this user can write in")
    return None


def _disk_nearly_full(e: BaseException, path: Path) -> bool:
    if not isinstance(e, (OSError, RuntimeError)):
        return False
    try:
        stats = os.statvfs(path.parent if path.parent.exists() else ".")
    except (OSError, AttributeError):  # AttributeError: no statvfs (Windows)
        return False
    return stats.f_bavail * stats.f_frsize < LOW_SPACE_BYTES


def open_append(path: str | Path, fresh: bool = False) -> IO[str]:
    """Open a file of a run folder for appending text, refusing what a run must never
    write through: a symbolic link (it could point out of the folder) or anything but a
    regular file (a FIFO would block the run, a device would swallow it). ``fresh``
    empties the file first (a new run's record).

    >>> f = open_append("scratch/steps.jsonl"); _ = f.write("{}\\n"); f.close()
    >>> _ = Path("scratch/fifo_or_link").unlink(missing_ok=True)
    >>> Path("scratch/fifo_or_link").symlink_to("../elsewhere.txt")
    >>> open_append("scratch/fifo_or_link")  # doctest: +ELLIPSIS
    Traceback (most recent call last):
    nanlab.errors.StorageError: scratch/fifo_or_link: is a symbolic link; ...
    """
    path = Path(path)
    flags = os.O_WRONLY | os.O_APPEND | os.O_CREAT | os.O_NONBLOCK | getattr(os, "O_NOFOLLOW", 0)
    flags |= os.O_TRUNC if fresh else 0
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        fd = os.open(path, flags, 0o666)
    except OSError as e:
        if e.errno == errno.ELOOP or path.is_symlink():
            raise _not_plain(path, "is a symbolic link") from None
        if e.errno == errno.ENXIO:  # a FIFO with no reader
            raise _not_plain(path, "is not a regular file (a FIFO)") from None
        raise storage_error(e, path) or e from None
    if not stat.S_ISREG(os.fstat(fd).st_mode):
        os.close(fd)
        raise _not_plain(path, "is not a regular file")
    os.set_blocking(fd, True)
    return os.fdopen(fd, "a", encoding="utf-8")


def read_capped(path: str | Path, limit: int) -> bytes:
    """The bytes of a regular file of at most ``limit`` bytes; a link, a FIFO, a device or
    a file past the cap is one StorageError line, never a hang or a read without end.

    >>> _ = atomic_write("scratch/m.json", "{}")
    >>> read_capped("scratch/m.json", 10)
    b'{}'
    >>> read_capped("scratch/m.json", 1)  # doctest: +ELLIPSIS
    Traceback (most recent call last):
    nanlab.errors.StorageError: scratch/m.json: is 2 bytes, over the cap of 1 bytes; ...
    """
    path = Path(path)
    if path.is_symlink():
        raise _not_plain(path, "is a symbolic link")
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | getattr(os, "O_NOFOLLOW", 0))
    except OSError as e:
        raise storage_error(e, path) or e from None
    info = os.fstat(fd)
    if not stat.S_ISREG(info.st_mode):  # a folder, a FIFO, a device: before any read
        os.close(fd)
        raise _not_plain(path, "is not a regular file")
    with os.fdopen(fd, "rb") as f:
        if info.st_size > limit:
            raise StorageError(f"is {info.st_size} bytes, over the cap of {limit} bytes", path,
                               "a nanlab run writes far less; is this the right folder?")
        return f.read(limit + 1)[:limit]


def _not_plain(path: Path, what: str) -> StorageError:
    return StorageError(what, path, "a run folder holds only the regular files nanlab "
                        "wrote; remove it, then run again")


TEMP_NAME = re.compile(r"\..+\.[a-z0-9_]{8}\.tmp")  # what _replacing names its temporary file


def remove_stray_temp_files(folder: str | Path) -> list[str]:
    """Remove the temporary files a killed write left in ``folder`` (a ``kill -9`` in the
    middle of a checkpoint leaves a full-size ``.ckpt_000050.pt.ab12cd34.tmp``); returns
    their names. Call it only while no other process writes there (a run holds its
    folder's lock, :mod:`nanlab.runs.runlock`): a live writer's temporary file looks the same.

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
