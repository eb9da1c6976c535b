"""Damage set aside, never deleted: the files of `quarantine/`, and how far a damaged
log reached (its repair floor).

`DiskStorage` (log.py) decides when and checkpoints the floor and the cut first; this
moves the bytes and tells what a damaged log can still prove.

Rules of this file:
- The damaged bytes of a segment (from its first bad batch on) and every later segment
  move to `quarantine/<cut offset>/` in the partition directory (`-1`, `-2`, ... for a
  later repair at the same offset), durably; the damaged segment then ends at its good
  prefix.
- A floor found at a start tells only what recovery can prove: the checkpointed HWM, the
  last epoch the leader-epoch checkpoint records, and the batches whose framing still
  reads in order after the damage. Their end is unknown unless they read to the end of
  the last file and reach past every other bound.
"""

from __future__ import annotations

import posixpath

from tidelog.core.epochs import EpochHistory
from tidelog.core.storage import RepairFloor, later_floor
from tidelog.errors import CorruptBatch, StorageError
from tidelog.types import NO_EPOCH, Epoch, Offset
from tidelog.wal import checkpoint as ckpt
from tidelog.wal.fs import FileSystem
from tidelog.wal.segment import (
    INDEX_SUFFIX,
    LOG_SUFFIX,
    SCAN_CHUNK_BYTES,
    TIME_INDEX_SUFFIX,
    Segment,
    scan_batches,
    segment_name,
)
from tidelog.wal.segments import bases_on_disk

QUARANTINE_DIR = "quarantine"
QUARANTINE_NAMES_MAX = 1000
"""quarantine/<cut offset>, -1, -2, ...: one directory per repair of the same offset."""


def set_aside_files(fs: FileSystem, directory: str, segment: Segment) -> None:
    """Move the bytes of `segment` after its good prefix (`size_bytes`) and every later
    segment file to a new quarantine directory, durably; then cut `segment` there."""
    cut = segment.end_offset
    aside = _new_quarantine_dir(fs, directory, cut)
    _copy_tail(fs, segment, posixpath.join(aside, segment_name(cut) + LOG_SUFFIX))
    for base in bases_on_disk(fs, directory):
        if base > segment.base_offset:
            _move_segment(fs, directory, base, aside)
    fs.fsync_dir(aside)
    segment.truncate(segment.size_bytes, cut)
    fs.fsync(segment.log_path)
    fs.fsync_dir(directory)


def _new_quarantine_dir(fs: FileSystem, directory: str, cut: Offset) -> str:
    parent = posixpath.join(directory, QUARANTINE_DIR)
    for number in range(QUARANTINE_NAMES_MAX):
        name = segment_name(cut) + (f"-{number}" if number else "")
        path = posixpath.join(parent, name)
        if not fs.exists(path):
            fs.makedirs(path)
            fs.fsync_dir(parent)
            return path
    raise StorageError(f"{parent} holds {QUARANTINE_NAMES_MAX} repairs of offset {cut}")


def _copy_tail(fs: FileSystem, segment: Segment, target: str) -> None:
    """Copy the bytes of `segment` after its good prefix to `target`, durably."""
    position, end = segment.size_bytes, fs.size(segment.log_path)
    while position < end:
        size = min(SCAN_CHUNK_BYTES, end - position)
        chunk = fs.pread(segment.log_path, position, size)
        fs.append(target, chunk)
        position += len(chunk)
    if end > segment.size_bytes:
        fs.fsync(target)


def _move_segment(fs: FileSystem, directory: str, base: Offset, aside: str) -> None:
    for suffix in (LOG_SUFFIX, INDEX_SUFFIX, TIME_INDEX_SUFFIX):
        name = segment_name(base) + suffix
        source = posixpath.join(directory, name)
        if fs.exists(source):
            fs.rename(source, posixpath.join(aside, name))


def floor_found_by_recovery(
    fs: FileSystem,
    directory: str,
    damaged: Segment,
    *,
    hwm_checkpointed: Offset,
    voted_epoch: Epoch,
) -> RepairFloor:
    """How far the log reached, as recovery can tell after finding damage in `damaged`
    (see the module's rules); `voted_epoch` is the vote state's epoch, the latest any
    record may have."""
    checkpointed = ckpt.read_epochs(fs, directory)
    proven: list[RepairFloor] = []
    hwm = hwm_checkpointed
    if hwm > 0:
        proven.append(RepairFloor(EpochHistory(checkpointed).epoch_at(Offset(hwm - 1)), hwm))
    if checkpointed:
        last = checkpointed[-1]
        proven.append(RepairFloor(last.epoch, Offset(last.start_offset + 1)))
    walked, complete = _walk_past_damage(fs, directory, damaged, voted_epoch)
    best: RepairFloor | None = walked
    for floor in proven:
        best = later_floor(best, floor)
    if best is None:  # nothing tells: any later epoch holds what was committed
        return RepairFloor(voted_epoch, None)
    return best if complete and best == walked else RepairFloor(best.epoch, None)


def _walk_past_damage(
    fs: FileSystem, directory: str, damaged: Segment, voted_epoch: Epoch
) -> tuple[RepairFloor | None, bool]:
    """(epoch, end) of the last batch that reads in order from the good prefix of
    `damaged` through every later segment file (framing only: a bad CRC does not stop
    it), and whether they read so to their end. Offsets must follow each other and
    epochs rise no higher than the vote state's: the base offset and leader epoch of a
    batch lie outside its CRC."""
    files = [(damaged.log_path, damaged.size_bytes)] + [
        (posixpath.join(directory, segment_name(base) + LOG_SUFFIX), 0)
        for base in bases_on_disk(fs, directory)
        if base > damaged.base_offset
    ]
    expected, epoch, walked = damaged.end_offset, NO_EPOCH, None
    for path, start in files:
        try:
            for _, header in scan_batches(fs, path, start, fs.size(path), verify=False):
                if header.base_offset != expected or not (epoch <= header.epoch <= voted_epoch):
                    return walked, False
                expected, epoch = header.next_offset, header.epoch
                walked = RepairFloor(epoch, expected)
        except CorruptBatch:
            return walked, False
    return walked, True
