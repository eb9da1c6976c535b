"""The file system the write-ahead log sees: a small protocol, and the real one over `os`.

Rules of this file:
- Every byte the log writes or reads goes through `FileSystem`, so the simulator can swap in
  a disk that loses unsynced bytes, tears writes and flips bits (`wal/faultyfs.py`).
- The protocol is path-based: a path names a file, the implementation keeps any handles.
- Nothing is durable until `fdatasync`/`fsync` of the file, and a created, renamed or removed
  name is durable only after `fsync_dir` of its directory (POSIX, as ext4 and xfs behave),
  or until `sync_all` of the file system holding them: one flush for every file and name
  (syncfs(2); the node's group commit, wal/group_sync.py).
- `sync_all` reports a failed write-back of any file of that file system, even one done
  before the call: the real one syncs through a descriptor of the file system opened when
  a log first names its directory (`device`), before that log writes anything, so Linux
  reports it every error since (errseq), whoever else saw it.
- An OSError from a write or a sync names the file (`filename`): a full or failing disk is
  reported with the path it failed on.
"""

from __future__ import annotations

import contextlib
import ctypes
import itertools
import os
import resource
import threading
from collections import OrderedDict
from collections.abc import Iterator
from typing import Protocol


class FileSystem(Protocol):
    """The file operations the log needs, and nothing more."""

    def exists(self, path: str) -> bool: ...

    def size(self, path: str) -> int: ...

    def listdir(self, directory: str) -> list[str]: ...

    def makedirs(self, directory: str) -> None: ...

    def append(self, path: str, data: bytes) -> None:
        """Write `data` at the end of `path`, creating the file if it is missing."""
        ...

    def pwrite(self, path: str, position: int, data: bytes) -> None: ...

    def pread(self, path: str, position: int, size_bytes: int) -> bytes:
        """Up to `size_bytes` bytes from `position`; fewer only at the end of the file."""
        ...

    def truncate(self, path: str, size_bytes: int) -> None: ...

    def fsync(self, path: str) -> None: ...

    def fdatasync(self, path: str) -> None: ...

    def rename(self, source: str, target: str) -> None:
        """Atomically replace `target` with `source`."""
        ...

    def unlink(self, path: str) -> None: ...

    def fsync_dir(self, directory: str) -> None: ...

    def device(self, directory: str) -> int:
        """Which file system holds `directory` (logs on the same one may `sync_all` once)."""
        ...

    def sync_all(self, directory: str) -> None:
        """Make every write, and every created, renamed or removed name, on the file system
        holding `directory` durable (syncfs)."""
        ...

    def close(self) -> None:
        """Release every handle; the file system stays usable (handles reopen on demand)."""
        ...


OPEN_FILES_SHARE = 2
"""The files of the logs may hold 1/OPEN_FILES_SHARE of the process's descriptors (its soft
RLIMIT_NOFILE); sockets and the rest keep the others."""
OPEN_FILES_MIN = 64


def open_files_limit() -> int:
    """How many files the logs of this process may hold open at once."""
    soft, _ = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft == resource.RLIM_INFINITY:
        soft = 1 << 20
    return max(OPEN_FILES_MIN, soft // OPEN_FILES_SHARE)


class _Handle:
    __slots__ = ("fd", "forgotten", "pins")

    def __init__(self, fd: int) -> None:
        self.fd = fd
        self.pins = 0  # calls using the descriptor now (in any thread)
        self.forgotten = False  # closed by the last of them


class OpenFiles:
    """The descriptors every log of a process holds open, within one budget: a node with
    thousands of partitions keeps the files used lately open, and closes the least
    recently used past `limit` (reopened on their next use).

    Rules:
    - A descriptor in use by a call (pinned: `pin` ... `unpin`, in any thread) is never
      closed under it: eviction passes it over, and a forgotten one (its file renamed or
      removed) is closed by its last user. A descriptor number is never reused while a
      call may still hold it.
    - Each file system (`owner`) has its own descriptor for a path, as if it had opened
      the file alone."""

    def __init__(self, limit: int | None = None) -> None:
        self._limit = limit  # None: `open_files_limit()` when first needed
        self._lock = threading.Lock()
        self._open: OrderedDict[tuple[int, str], _Handle] = OrderedDict()
        self._paths: dict[int, set[str]] = {}  # owner -> the paths it holds open
        self._owners = itertools.count()

    @property
    def limit(self) -> int:
        if self._limit is None:
            self._limit = open_files_limit()
        return self._limit

    def new_owner(self) -> int:
        return next(self._owners)

    def pin(self, owner: int, path: str) -> _Handle:
        """The open descriptor of `path` for `owner` (opened now if needed), pinned."""
        key = (owner, path)
        with self._lock:
            handle = self._open.get(key)
            if handle is None:
                self._evict(self.limit - 1)
                handle = _Handle(os.open(path, os.O_RDWR | os.O_CREAT, 0o644))
                self._open[key] = handle
                self._paths.setdefault(owner, set()).add(path)
            else:
                self._open.move_to_end(key)
            handle.pins += 1
            return handle

    def unpin(self, handle: _Handle) -> None:
        with self._lock:
            handle.pins -= 1
            if handle.forgotten and handle.pins == 0:
                os.close(handle.fd)

    def peek(self, owner: int, path: str) -> _Handle | None:
        """The pinned descriptor of `path` when `owner` holds it open, else None."""
        with self._lock:
            handle = self._open.get((owner, path))
            if handle is not None:
                handle.pins += 1
            return handle

    def forget(self, owner: int, path: str) -> None:
        """Close `owner`'s descriptor of `path` (now, or when its last user is done)."""
        with self._lock:
            self._drop((owner, path))

    def forget_all(self, owner: int) -> None:
        with self._lock:
            for path in list(self._paths.get(owner, ())):
                self._drop((owner, path))

    def held(self) -> int:
        """How many descriptors are open."""
        with self._lock:
            return len(self._open)

    def _drop(self, key: tuple[int, str]) -> None:
        handle = self._open.pop(key, None)
        if handle is None:
            return
        owner, path = key
        paths = self._paths[owner]
        paths.discard(path)
        if not paths:
            del self._paths[owner]
        if handle.pins:
            handle.forgotten = True
        else:
            os.close(handle.fd)

    def _evict(self, keep: int) -> None:
        """Close the least recently used descriptors not in use, down to `keep` open."""
        while len(self._open) > keep:
            victim = next((key for key, handle in self._open.items() if not handle.pins), None)
            if victim is None:
                return  # every one is in use: the budget is passed for a moment
            self._drop(victim)


OPEN_FILES = OpenFiles()
"""The process's budget of descriptors, shared by every `OsFileSystem` that is not given
its own."""


class OsFileSystem:
    """The real file system. Keeps a descriptor per path open, within the process's
    budget (`OpenFiles`): one used lately stays open, the others are opened again."""

    def __init__(self, files: OpenFiles | None = None) -> None:
        self._files = OPEN_FILES if files is None else files
        self._owner = self._files.new_owner()

    @contextlib.contextmanager
    def _fd(self, path: str) -> Iterator[int]:
        handle = self._files.pin(self._owner, path)
        try:
            yield handle.fd
        finally:
            self._files.unpin(handle)

    def _forget(self, path: str) -> None:
        self._files.forget(self._owner, path)

    def exists(self, path: str) -> bool:
        return os.path.exists(path)

    def size(self, path: str) -> int:
        handle = self._files.peek(self._owner, path)
        if handle is None:
            return os.stat(path).st_size
        try:
            return os.fstat(handle.fd).st_size
        finally:
            self._files.unpin(handle)

    def listdir(self, directory: str) -> list[str]:
        return sorted(os.listdir(directory))

    def makedirs(self, directory: str) -> None:
        os.makedirs(directory, exist_ok=True)

    def append(self, path: str, data: bytes) -> None:
        with naming(path), self._fd(path) as fd:
            position = os.lseek(fd, 0, os.SEEK_END)
            self._write_all(fd, position, data)

    def pwrite(self, path: str, position: int, data: bytes) -> None:
        with naming(path), self._fd(path) as fd:
            self._write_all(fd, position, data)

    @staticmethod
    def _write_all(fd: int, position: int, data: bytes) -> None:
        view = memoryview(data)
        while view:
            written = os.pwrite(fd, view, position)
            assert written > 0
            view = view[written:]
            position += written

    def pread(self, path: str, position: int, size_bytes: int) -> bytes:
        with self._fd(path) as fd:
            return os.pread(fd, size_bytes, position)

    def truncate(self, path: str, size_bytes: int) -> None:
        with naming(path), self._fd(path) as fd:
            os.ftruncate(fd, size_bytes)

    def fsync(self, path: str) -> None:
        with naming(path), self._fd(path) as fd:
            os.fsync(fd)

    def fdatasync(self, path: str) -> None:
        with naming(path), self._fd(path) as fd:
            os.fdatasync(fd)

    def rename(self, source: str, target: str) -> None:
        self._forget(source)
        self._forget(target)
        os.rename(source, target)

    def unlink(self, path: str) -> None:
        self._forget(path)
        os.unlink(path)

    def fsync_dir(self, directory: str) -> None:
        fd = os.open(directory, os.O_RDONLY | os.O_DIRECTORY)
        try:
            os.fsync(fd)
        finally:
            os.close(fd)

    def device(self, directory: str) -> int:
        return _DEVICES.watch(directory)

    def sync_all(self, directory: str) -> None:
        _DEVICES.sync(directory)

    def close(self) -> None:
        self._files.forget_all(self._owner)


class _Devices:
    """One descriptor per file system, opened the first time a log names a directory on
    it and kept for the life of the process: syncfs through it reports every write-back
    error of that file system since it was opened (the module's rules)."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._fds: dict[int, int] = {}  # st_dev -> a descriptor of a directory on it
        libc = ctypes.CDLL(None, use_errno=True)
        self._syncfs = getattr(libc, "syncfs", None)

    def watch(self, directory: str) -> int:
        device = os.stat(directory).st_dev
        with self._lock:
            if device not in self._fds:
                self._fds[device] = os.open(directory, os.O_RDONLY | os.O_DIRECTORY)
        return device

    def sync(self, directory: str) -> None:
        device = self.watch(directory)
        if self._syncfs is None:  # no syncfs in this C library: every file system
            os.sync()
            return
        if self._syncfs(self._fds[device]) != 0:
            code = ctypes.get_errno()
            raise OSError(code, os.strerror(code), directory)


_DEVICES = _Devices()


@contextlib.contextmanager
def naming(path: str) -> Iterator[None]:
    """Re-raise an OSError that names no file as one that names `path`."""
    try:
        yield
    except OSError as error:
        if error.filename is not None:
            raise
        raise OSError(error.errno, error.strerror, path) from error
