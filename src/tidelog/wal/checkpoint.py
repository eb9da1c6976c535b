"""Checkpoint files: small text files replaced atomically, in Kafka's format.

Rules of this file:
- A checkpoint is written to `NAME.tmp`, fsync'd, renamed over `NAME`, then the directory is
  fsync'd: after a crash the file holds the old or the new content, never a mix. In a
  group commit (wal/group_sync.py) one sync of the file system stands for the fsyncs of
  the temporary files, and another for the directory's.
- Format (Kafka's leader-epoch-checkpoint and replication-offset-checkpoint): a version line
  `0`, a count line, then `count` lines of space-separated integers.
- A missing checkpoint means "never written"; a malformed one raises StorageError.
- `producer-snapshot-checkpoint` (tidelog's own, as Kafka's `.snapshot` files) holds the
  idempotent producers' snapshot at the log start (`tidelog.core.producers`), one row per
  producer: id, epoch, first and last sequence, base and next offset of its last batch
  below the log start. It is written before the log start it belongs to.
- `directory-id` (tidelog's own, as KIP-853's directory.id in meta.properties) holds one
  row: the id of this directory, made with it (`DiskStorage`); a copy on an empty disk has
  a new one, so it is a new member of the partition (core/membership.py).
- `repair-floor-checkpoint` (tidelog's own) holds no row, or one: the epoch and end offset
  (-1: unknown) of the log before damage was set aside (`tidelog.core.storage.RepairFloor`),
  and the offset where a repair in progress cuts the log (-1: none in progress).
- `voters-checkpoint` (tidelog's own, beside the leader-epoch checkpoint) holds the voter
  sets the log holds (`tidelog.core.membership.VoterSetRecords`), one row per voter of each:
  `offset node directory`, the rows of one set sharing its offset (where its VOTERS batch
  lies, or the offset before the log start for a set carried from below it), the sets in
  rising offset order. Like the leader-epoch checkpoint it may lag the log (voters_cache.py).
"""

from __future__ import annotations

import posixpath
import secrets

from tidelog.core.epochs import EpochEntry
from tidelog.core.membership import (
    BEFORE_THE_LOG,
    ReplicaKey,
    VoterSet,
    VoterSetEntry,
)
from tidelog.core.producers import ProducerEntry, SequencedBatch, entry_is_valid
from tidelog.core.storage import RepairFloor
from tidelog.errors import StorageError
from tidelog.types import DirectoryId, Epoch, NodeId, Offset
from tidelog.wal.fs import FileSystem

CHECKPOINT_VERSION = 0
CHECKPOINT_SIZE_MAX = 16 * 1024 * 1024
TEMP_SUFFIX = ".tmp"
NO_VOTE = -1

LEADER_EPOCH = "leader-epoch-checkpoint"
HWM = "hwm-checkpoint"
LOG_START_OFFSET = "log-start-offset-checkpoint"
RECOVERY_POINT = "recovery-point-offset-checkpoint"
VOTE_STATE = "vote-state"
REPAIR_FLOOR = "repair-floor-checkpoint"
PRODUCERS = "producer-snapshot-checkpoint"
DIRECTORY_ID = "directory-id"
VOTERS = "voters-checkpoint"
OFFSET_MAX = Offset((1 << 63) - 1)
UNKNOWN = -1


def write_checkpoints(fs: FileSystem, directory: str, files: dict[str, list[list[int]]]) -> None:
    """Replace each named checkpoint with its rows, then make the renames durable."""
    if not files:
        return
    commit_renames(fs, directory, stage_checkpoints(fs, directory, files))


Renames = list[tuple[str, str]]


def commit_renames(fs: FileSystem, directory: str, renames: Renames) -> None:
    """Make staged files durable on their own: fsync each, rename, fsync the directory."""
    for temp, _ in renames:
        fs.fsync(temp)
    publish_checkpoints(fs, renames)
    fs.fsync_dir(directory)


def stage_file(fs: FileSystem, directory: str, name: str, data: bytes) -> tuple[str, str]:
    """Write `data` to the temporary file of `name`, syncing nothing: (temporary, final)."""
    temp = posixpath.join(directory, name + TEMP_SUFFIX)
    if fs.exists(temp):
        fs.unlink(temp)
    fs.append(temp, data)
    return temp, posixpath.join(directory, name)


def stage_checkpoints(fs: FileSystem, directory: str, files: dict[str, list[list[int]]]) -> Renames:
    """Write each named checkpoint's rows to its temporary file, syncing nothing; the
    (temporary, final) paths. Rename them (`publish_checkpoints`) only once the temporary
    files are durable, and count them replaced once the renames are."""
    renames: Renames = []
    for name, rows in files.items():
        lines = [str(CHECKPOINT_VERSION), str(len(rows))]
        lines += [" ".join(str(value) for value in row) for row in rows]
        renames.append(stage_file(fs, directory, name, ("\n".join(lines) + "\n").encode()))
    return renames


def publish_checkpoints(fs: FileSystem, renames: Renames) -> None:
    for temp, target in renames:
        fs.rename(temp, target)


def read_checkpoint(fs: FileSystem, path: str, *, width: int) -> list[list[int]] | None:
    """The rows of a checkpoint (each of `width` integers), or None if it does not exist."""
    if not fs.exists(path):
        return None
    text = fs.pread(path, 0, CHECKPOINT_SIZE_MAX).decode("ascii", errors="replace")
    lines = text.splitlines()
    try:
        version, count = int(lines[0]), int(lines[1])
        rows = [[int(value) for value in line.split()] for line in lines[2:]]
    except (IndexError, ValueError) as error:
        raise StorageError(f"malformed checkpoint {path}: {error}") from error
    if version != CHECKPOINT_VERSION:
        raise StorageError(f"checkpoint {path} has version {version}")
    if count != len(rows) or any(len(row) != width for row in rows):
        raise StorageError(f"checkpoint {path} is malformed: {count} rows announced")
    return rows


def read_offset(fs: FileSystem, directory: str, name: str) -> Offset | None:
    rows = read_checkpoint(fs, posixpath.join(directory, name), width=1)
    if not rows:
        return None
    return Offset(rows[0][0])


def offset_rows(offset: Offset) -> list[list[int]]:
    return [[offset]]


def read_epochs(fs: FileSystem, directory: str) -> list[EpochEntry]:
    rows = read_checkpoint(fs, posixpath.join(directory, LEADER_EPOCH), width=2) or []
    return [EpochEntry(Epoch(epoch), Offset(start)) for epoch, start in rows]


def epoch_rows(epochs: list[EpochEntry]) -> list[list[int]]:
    return [[entry.epoch, entry.start_offset] for entry in epochs]


def random_directory_id() -> DirectoryId:
    """A new directory's id: 63 random bits, never 0 (NO_DIRECTORY)."""
    return DirectoryId(secrets.randbelow((1 << 63) - 1) + 1)


def read_directory_id(fs: FileSystem, directory: str) -> DirectoryId | None:
    """The directory's id, None when it has none yet (a new directory)."""
    rows = read_checkpoint(fs, posixpath.join(directory, DIRECTORY_ID), width=1)
    if not rows:
        return None
    if rows[0][0] <= 0:
        raise StorageError(f"{posixpath.join(directory, DIRECTORY_ID)} holds {rows[0][0]}")
    return DirectoryId(rows[0][0])


def read_producers(fs: FileSystem, directory: str) -> tuple[ProducerEntry, ...]:
    """The producer snapshot at the log start; () when never written."""
    rows = read_checkpoint(fs, posixpath.join(directory, PRODUCERS), width=6) or []
    entries = []
    for producer_id, epoch, first, last, base, end in rows:
        entry = ProducerEntry(
            producer_id, epoch, SequencedBatch(first, last, Offset(base), Offset(end))
        )
        if not entry_is_valid(entry, below=OFFSET_MAX):
            raise StorageError(f"{directory}/{PRODUCERS}: impossible row {entry}")
        entries.append(entry)
    return tuple(entries)


def producer_rows(entries: tuple[ProducerEntry, ...]) -> list[list[int]]:
    return [[e.producer_id, e.epoch, *e.batch] for e in entries]


def read_repair_floor(fs: FileSystem, directory: str) -> tuple[RepairFloor | None, Offset | None]:
    """(repair floor, cut of a repair in progress); (None, None) when there is none."""
    rows = read_checkpoint(fs, posixpath.join(directory, REPAIR_FLOOR), width=3)
    if not rows:
        return None, None
    epoch, end, cut = rows[0]
    floor = RepairFloor(Epoch(epoch), None if end == UNKNOWN else Offset(end))
    return floor, None if cut == UNKNOWN else Offset(cut)


def repair_floor_rows(floor: RepairFloor | None, cut: Offset | None = None) -> list[list[int]]:
    if floor is None:
        return []
    end = UNKNOWN if floor.end_offset is None else floor.end_offset
    return [[floor.epoch, end, UNKNOWN if cut is None else cut]]


def read_voters(fs: FileSystem, directory: str) -> list[VoterSetEntry]:
    """The voter sets of the voters checkpoint; [] when never written. A row that cannot
    be a voter, or sets whose offsets do not rise, raise StorageError."""
    path = posixpath.join(directory, VOTERS)
    rows = read_checkpoint(fs, path, width=3) or []
    groups: list[tuple[int, list[ReplicaKey]]] = []
    for offset, node, directory_id in rows:
        if offset < BEFORE_THE_LOG or node < 0 or directory_id < 0:
            raise StorageError(f"{path}: impossible row {offset} {node} {directory_id}")
        key = ReplicaKey(NodeId(node), DirectoryId(directory_id))
        if groups and groups[-1][0] == offset:
            groups[-1][1].append(key)
        elif groups and groups[-1][0] > offset:
            raise StorageError(f"{path}: voter sets at offsets that do not rise")
        else:
            groups.append((offset, [key]))
    try:
        return [VoterSetEntry(Offset(offset), VoterSet.of(keys)) for offset, keys in groups]
    except ValueError as error:
        raise StorageError(f"{path}: {error}") from error


def voter_rows(entries: tuple[VoterSetEntry, ...]) -> list[list[int]]:
    return [[entry.offset, key.node, key.directory] for entry in entries for key in entry.voters]
