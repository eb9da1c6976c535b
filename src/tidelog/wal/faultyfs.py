"""A deterministic in-memory file system that fails the way disks fail.

Rules of this file:
- Each file is an inode with its current bytes and its synced bytes; `fsync`/`fdatasync`
  make the current bytes the synced ones.
- Names live in directories; a create, rename or unlink is durable only after `fsync_dir`.
  `sync_all` (syncfs) makes every file's bytes and every name durable.
- `crash()` is a power cut: every name and byte not yet synced is lost. With `tear=True` a
  file that was only appended to since its last sync keeps a random prefix of those appends,
  torn at any byte, as a disk that wrote part of the page cache back would.
- `crash_at_call` makes the k-th mutating call raise `SimulatedCrash` before it happens, so a
  test can cut the power at every write point of a workload.
- `flip_bit` corrupts the medium: the current and the synced bytes both change.
- `fill_up` makes appends and pwrites write a random prefix of their data (a short write)
  and raise OSError(ENOSPC): the next one only, or each one until `free_space`.
  `fail_next_sync(code)` makes the next fsync, fdatasync, fsync_dir or sync_all raise
  OSError(code) (EIO, ENOSPC) and sync nothing: as Linux may, it keeps showing the unsynced
  bytes, which a crash still loses (the caller must never retry as if they were durable:
  fsyncgate).
  `crash()` and `heal()` disarm both.
Everything random comes from the injected `random.Random`: one seed decides a run.
"""

from __future__ import annotations

import errno
import posixpath
import random


class SimulatedCrash(Exception):
    """Raised by the call at which the test planned a crash; the caller then calls crash()."""


class _Inode:
    __slots__ = ("data", "synced")

    def __init__(self) -> None:
        self.data = bytearray()
        self.synced = b""


class FaultyFileSystem:
    """A FileSystem in memory that loses unsynced state on `crash()`."""

    def __init__(self, rng: random.Random, *, crash_at_call: int | None = None) -> None:
        self.rng = rng
        self.crash_at_call = crash_at_call
        self.calls = 0
        self._names: dict[str, _Inode] = {}
        self._durable_names: dict[str, _Inode] = {}
        self._dirs: set[str] = set()
        self._full = False
        self._stays_full = False
        self._sync_error: int | None = None

    # --- faults ---------------------------------------------------------------------
    def crash(self, *, tear: bool = False) -> None:
        """Lose every unsynced byte and name, as a power cut would."""
        self.crash_at_call = None
        self._full = self._stays_full = False
        self._sync_error = None
        self._names = dict(self._durable_names)
        for inode in self._names.values():
            kept = bytearray(inode.synced)
            extra = len(inode.data) - len(kept)
            if tear and extra > 0 and inode.data.startswith(inode.synced):
                cut = self.rng.randint(0, extra)
                kept += inode.data[len(kept) : len(kept) + cut]
            inode.data = kept
            inode.synced = bytes(kept)

    def flip_bit(self, path: str, position: int, bit: int = 0) -> None:
        """Corrupt one bit of the medium at byte `position` of `path`."""
        inode = self._inode(path)
        assert 0 <= bit < 8
        inode.data[position] ^= 1 << bit
        if position < len(inode.synced):
            synced = bytearray(inode.synced)
            synced[position] ^= 1 << bit
            inode.synced = bytes(synced)

    def fill_up(self, *, until_freed: bool = False) -> None:
        """The next append or pwrite (each one, `until_freed`) writes a random prefix of
        its data, then raises OSError(ENOSPC)."""
        self._full = True
        self._stays_full = until_freed

    def free_space(self) -> None:
        self._full = self._stays_full = False

    def heal(self) -> None:
        """The disk works again: a failure armed and not fired yet never fires."""
        self.free_space()
        self._sync_error = None

    def fail_next_sync(self, code: int = errno.EIO) -> None:
        """The next fsync, fdatasync or fsync_dir raises OSError(`code`), syncing nothing."""
        self._sync_error = code

    def _written(self, data: bytes) -> bytes:
        """What a write of `data` puts on the disk: all of it, or on a full disk a prefix."""
        return data[: self.rng.randint(0, len(data))] if self._full else data

    def _check_space(self, path: str) -> None:
        if self._full:
            self._full = self._stays_full
            raise OSError(errno.ENOSPC, "No space left on device (simulated)", path)

    def _check_sync(self, path: str) -> None:
        code, self._sync_error = self._sync_error, None
        if code is not None:
            raise OSError(code, f"fsync failed (simulated {errno.errorcode[code]})", path)

    def _count_call(self) -> None:
        self.calls += 1
        if self.crash_at_call is not None and self.calls >= self.crash_at_call:
            raise SimulatedCrash(f"planned crash at call {self.calls}")

    def _inode(self, path: str) -> _Inode:
        inode = self._names.get(path)
        if inode is None:
            raise FileNotFoundError(path)
        return inode

    # --- FileSystem -----------------------------------------------------------------
    def exists(self, path: str) -> bool:
        return path in self._names or path in self._dirs

    def size(self, path: str) -> int:
        return len(self._inode(path).data)

    def listdir(self, directory: str) -> list[str]:
        if directory not in self._dirs:
            raise FileNotFoundError(directory)
        return sorted(
            posixpath.basename(name) for name in self._names if posixpath.dirname(name) == directory
        )

    def makedirs(self, directory: str) -> None:
        # Directories themselves are durable at once: the log never removes its own.
        while directory and directory not in self._dirs:
            self._dirs.add(directory)
            directory = posixpath.dirname(directory)

    def append(self, path: str, data: bytes) -> None:
        self._count_call()
        inode = self._names.get(path)
        if inode is None:
            assert posixpath.dirname(path) in self._dirs, f"no directory for {path}"
            inode = self._names[path] = _Inode()
        inode.data += self._written(data)
        self._check_space(path)

    def pwrite(self, path: str, position: int, data: bytes) -> None:
        self._count_call()
        inode = self._inode(path)
        if position > len(inode.data):
            inode.data += bytes(position - len(inode.data))
        written = self._written(data)
        inode.data[position : position + len(written)] = written
        self._check_space(path)

    def pread(self, path: str, position: int, size_bytes: int) -> bytes:
        return bytes(self._inode(path).data[position : position + size_bytes])

    def truncate(self, path: str, size_bytes: int) -> None:
        self._count_call()
        inode = self._inode(path)
        if size_bytes > len(inode.data):
            inode.data += bytes(size_bytes - len(inode.data))
        del inode.data[size_bytes:]

    def fsync(self, path: str) -> None:
        self._count_call()
        self._check_sync(path)
        inode = self._inode(path)
        inode.synced = bytes(inode.data)

    def fdatasync(self, path: str) -> None:
        # A file's size is data fdatasync must flush, so in memory it equals fsync.
        self.fsync(path)

    def rename(self, source: str, target: str) -> None:
        self._count_call()
        self._names[target] = self._names.pop(source)

    def unlink(self, path: str) -> None:
        self._count_call()
        self._inode(path)
        del self._names[path]

    def fsync_dir(self, directory: str) -> None:
        self._count_call()
        self._check_sync(directory)
        for name in [n for n in self._durable_names if posixpath.dirname(n) == directory]:
            del self._durable_names[name]
        for name, inode in self._names.items():
            if posixpath.dirname(name) == directory:
                self._durable_names[name] = inode

    def device(self, directory: str) -> int:
        del directory
        return 0  # one file system: this one

    def sync_all(self, directory: str) -> None:
        """syncfs: every file's bytes and every name made durable."""
        self._count_call()
        self._check_sync(directory)
        for inode in self._names.values():
            inode.synced = bytes(inode.data)
        self._durable_names = dict(self._names)

    def close(self) -> None:
        """Nothing to release: handles do not exist in memory."""
