"""One writer per run folder: a lock file holding the writer's pid and host.

Two processes writing one run folder mix two runs' rows and checkpoints (a second
``--resume`` rewrites the JSON Lines files the first still appends to, an ``--overwrite``
deletes them under it). So a trainer holds ``run.lock`` in its folder while it runs: the
file is created whole in one step (a hard link of a finished temporary file, which fails
if the lock exists, also on NFS), and holds ``{"pid", "host", "since"}`` so that a refusal
can say who writes there. A lock left by a process that died (a ``kill -9``, a lost node)
is stale when its host is this one and its pid is gone: the next writer takes it over. A
lock from another host cannot be checked from here and is never taken over.

>>> lock = RunLock("runs/locked").acquire()
>>> sorted(lock.holder())
['host', 'pid', 'since']
>>> RunLock("runs/locked").acquire()  # doctest: +ELLIPSIS
Traceback (most recent call last):
nanlab.errors.NanlabError: runs/locked: another nanlab run is writing this folder (pid ...
>>> lock.release()
"""

from __future__ import annotations

import json
import os
import socket
import tempfile
import time
from pathlib import Path

from nanlab.errors import NanlabError

LOCK_NAME = "run.lock"
_HELD: dict[Path, int] = {}  # the locks this process holds: path -> id of the holder


def _alive(pid: int) -> bool:
    """Whether a process of this host has that pid (another user's counts as alive)."""
    if os.name == "nt":
        return True  # os.kill would end the process there, not probe it: assume alive
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


class RunLock:
    """The lock of one run folder; ``acquire`` refuses a live writer in one line.

    >>> with RunLock("runs/mine"):
    ...     (Path("runs/mine") / "run.lock").exists()
    True
    >>> (Path("runs/mine") / "run.lock").exists()   # released on the way out
    False
    """

    def __init__(self, directory: str | Path):
        self.directory = Path(directory)
        self.path = self.directory / LOCK_NAME
        self.held = False

    def holder(self) -> dict | None:
        """What the lock file says (pid, host, since), or None: no lock, or not one of
        ours (unreadable, or cut short by a crash before it was complete)."""
        try:
            data = json.loads(self.path.read_text(encoding="utf-8"))
        except (OSError, ValueError):
            return None
        ok = isinstance(data, dict) and isinstance(data.get("pid"), int) \
            and isinstance(data.get("host"), str)
        return data if ok else None

    def _stale(self, holder: dict | None) -> bool:
        """A lock no live writer holds: unreadable, or this host's and its pid gone (or
        this process's own, left by a trainer that no longer holds it)."""
        if holder is None:
            return self.path.exists()
        if holder["host"] != socket.gethostname():
            return False  # another machine's process: it cannot be checked from here
        if holder["pid"] == os.getpid():
            return self.path.resolve() not in _HELD
        return not _alive(holder["pid"])

    def acquire(self) -> RunLock:
        """Take the lock, or raise NanlabError naming the live writer; a stale lock is
        taken over. Returns self."""
        if self.held:
            return self
        self.directory.mkdir(parents=True, exist_ok=True)
        for _ in range(5):  # a stale lock taken over by another writer too: look again
            if self._create():
                self.held = True
                _HELD[self.path.resolve()] = id(self)
                return self
            holder = self.holder()
            if not self._stale(holder):
                raise self._refusal(holder)
            self._remove_stale(holder)
        raise self._refusal(self.holder())

    def _create(self) -> bool:
        """Write the lock whole in one step: a temporary file, then a hard link to the
        lock's name (fails if it exists). False when another lock is there."""
        holder = {"pid": os.getpid(), "host": socket.gethostname(),
                  "since": time.strftime("%Y-%m-%dT%H:%M:%S%z")}
        try:
            fd, tmp = tempfile.mkstemp(dir=self.directory, prefix=f".{LOCK_NAME}.",
                                       suffix=".tmp")
        except OSError as e:
            raise NanlabError(f"{self.directory}: cannot be locked for writing "
                              f"({e.strerror or e}); allowed: a folder this user can write "
                              "in") from None
        try:
            with os.fdopen(fd, "w", encoding="utf-8") as f:
                f.write(json.dumps(holder) + "\n")
                f.flush()
                os.fsync(f.fileno())
            os.link(tmp, self.path)
            return True
        except (FileExistsError, FileNotFoundError):  # a lock is there (or was, just now)
            return False
        except OSError as e:
            raise NanlabError(f"{self.path}: cannot be written ({e.strerror or e}); allowed: "
                              "a folder this user can write in") from None
        finally:
            Path(tmp).unlink(missing_ok=True)

    def _remove_stale(self, seen: dict | None) -> None:
        """Move the stale lock aside and drop it, unless it changed since it was read (then
        another writer took it over first, and it is put back)."""
        aside = self.path.with_name(f".{LOCK_NAME}.stale.{os.getpid()}")
        try:
            os.rename(self.path, aside)
        except FileNotFoundError:
            return  # another writer removed it first
        moved = RunLock(self.directory)
        moved.path = aside
        if moved.holder() != seen:  # a fresh lock moved by mistake: give it back
            try:
                os.link(aside, self.path)
            except FileExistsError:
                pass
        aside.unlink(missing_ok=True)

    def _refusal(self, holder: dict | None) -> NanlabError:
        who = (f"pid {holder['pid']} on host {holder['host']!r}, since {holder.get('since')}"
               if holder else "its lock file cannot be read")
        return NanlabError(
            f"{self.directory}: another nanlab run is writing this folder ({who}; {self.path}); "
            "a second writer would mix two runs' records and checkpoints; allowed: wait for it "
            "to end or stop it, or choose another folder (if that process is gone, delete "
            f"{self.path})")

    def release(self) -> None:
        """Drop the lock (only ours: a lock file another writer made is left alone)."""
        if not self.held:
            return
        self.held = False
        _HELD.pop(self.path.resolve(), None)
        holder = self.holder()
        if holder and holder["pid"] == os.getpid() and holder["host"] == socket.gethostname():
            self.path.unlink(missing_ok=True)

    def __enter__(self) -> RunLock:
        return self.acquire()

    def __exit__(self, *exc) -> None:
        self.release()


__all__ = ["LOCK_NAME", "RunLock"]
