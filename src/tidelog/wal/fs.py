"""The file system the write-ahead log sees: a small protocol, and the real one over `os`.

Rules of this file:
- Every byte the log writes or reads goes through `FileSystem`, so the simulator can swap in
  a disk that loses unsynced bytes, tears writes and flips bits (`wal/faultyfs.py`).
- The protocol is path-based: a path names a file, the implementation keeps any handles.
- Nothing is durable until `fdatasync`/`fsync` of the file, and a created, renamed or removed
  name is durable only after `fsync_dir` of its directory (POSIX, as ext4 and xfs behave).
- An OSError from a write or a sync names the file (`filename`): a full or failing disk is
  reported with the path it failed on.
"""

from __future__ import annotations

import contextlib
import os
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

    def close(self) -> None:
        """Release every handle; the file system stays usable (handles reopen on demand)."""
        ...


OPEN_FILES_MAX = 256


class OsFileSystem:
    """The real file system. Keeps one descriptor per path open, at most OPEN_FILES_MAX."""

    def __init__(self) -> None:
        self._fds: dict[str, int] = {}

    def _fd(self, path: str) -> int:
        fd = self._fds.get(path)
        if fd is None:
            if len(self._fds) >= OPEN_FILES_MAX:
                self.close()
            fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o644)
            self._fds[path] = fd
        return fd

    def _forget(self, path: str) -> None:
        fd = self._fds.pop(path, None)
        if fd is not None:
            os.close(fd)

    def exists(self, path: str) -> bool:
        return os.path.exists(path)

    def size(self, path: str) -> int:
        fd = self._fds.get(path)
        return os.fstat(fd).st_size if fd is not None else os.stat(path).st_size

    def listdir(self, directory: str) -> list[str]:
        return sorted(os.listdir(directory))

    def makedirs(self, directory: str) -> None:
        os.makedirs(directory, exist_ok=True)

    def append(self, path: str, data: bytes) -> None:
        with naming(path):
            fd = self._fd(path)
            position = os.lseek(fd, 0, os.SEEK_END)
            self._write_all(fd, position, data)

    def pwrite(self, path: str, position: int, data: bytes) -> None:
        with naming(path):
            self._write_all(self._fd(path), position, data)

    @staticmethod
    def _write_all(fd: int, position: int, data: bytes) -> None:
        view = memoryview(data)
        while view:
            written = os.pwrite(fd, view, position)
            assert written > 0
            view = view[written:]
            position += written

    def pread(self, path: str, position: int, size_bytes: int) -> bytes:
        return os.pread(self._fd(path), size_bytes, position)

    def truncate(self, path: str, size_bytes: int) -> None:
        with naming(path):
            os.ftruncate(self._fd(path), size_bytes)

    def fsync(self, path: str) -> None:
        with naming(path):
            os.fsync(self._fd(path))

    def fdatasync(self, path: str) -> None:
        with naming(path):
            os.fdatasync(self._fd(path))

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

    def close(self) -> None:
        for path in list(self._fds):
            self._forget(path)


@contextlib.contextmanager
def naming(path: str) -> Iterator[None]:
    """Re-raise an OSError that names no file as one that names `path`."""
    try:
        yield
    except OSError as error:
        if error.filename is not None:
            raise
        raise OSError(error.errno, error.strerror, path) from error
