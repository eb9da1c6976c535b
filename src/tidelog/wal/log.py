"""The durable log of one partition (Kafka's UnifiedLog): its one face to the core and the
runner. `DiskStorage` implements `tidelog.core.storage.LogStorage` on a `FileSystem`.

The rooms behind it, each stating its own rules:
- `local_log.py` (LocalLog): the segments' files: append, roll, read, truncate, flush;
  `segments.py` (LogSegments) the ordered set of them, `segment.py` one of them.
- `loader.py` (LogLoader): recovery at open: scan, cut a torn tail, rebuild indexes, derive
  the epochs; `quarantine.py`: damage set aside, the repair floor recovery can prove.
- `epoch_cache.py` (LeaderEpochCache): the leader-epoch history and its checkpoint;
  `voters_cache.py` (VoterSetCache): the voter sets (KIP-853) and theirs.
- `retention.py`: which segments retention deletes; `timestamps.py`: search by time;
  `controls.py`: where the control batches lie; `checkpoint.py`: the checkpoint files.
This file holds what ties them: the checkpoints' order against the data, the HWM, the log
start, the producer snapshot and the repair floor. A compacting cleaner and snapshots
belong beside retention.py and the producer snapshot: they reach the segments through
`LocalLog` and move the log start through `_move_log_start`.

Rules of this file:
- Group commit: `append` only writes (checking framing, not the CRC: the core checked
  every batch it hands over, at the leader's door or from the leader); nothing counts as
  durable until `sync()` returns. A truncation (rare: a leader change) is durable when
  `truncate_to` returns, together with everything written before it, so the durable log is
  always a prefix of the written one. `sync()` flushes the segments (local_log.py), then
  replaces the checkpoints that changed. `save_hard_state` is durable when the next
  `sync()` returns.
- The leader-epoch history is derived from the batches (epoch_cache.py). Its checkpoint
  lags (a sync writes it once the data is durable; recovery derives it from the segments it
  scans), so a log start move checkpoints it, trimmed to the new start, BEFORE deleting any
  segment: the deleted batches may be all that tells the epoch of the record before the
  log start.
- The voter sets are derived from the VOTERS control batches (voters_cache.py) and kept
  as the epochs are: cut by every truncation (and a repair's cut), trimmed by a log start
  move to the set in effect at the first offset the log holds, and checkpointed with the
  trimmed epochs BEFORE any segment is deleted (its VOTERS batch may be in one): the sets
  of durable batches, trimmed alike, so a crash that takes an unsynced VOTERS batch at the
  new start leaves the set before it. A reset checkpoints the leader's set at the offset
  before the new start before the segments go. Below the log start, recovery takes the
  set the checkpoint holds, never one from segments a crash left there.
- Never below the HWM: truncation below the checkpointed HWM is a bug (assert); retention
  and `advance_log_start` never pass the HWM saved with `save_hwm`.
- The recovery point is the base of a segment below which every batch was synced and every
  index fsync'd. It only moves forward when a sync follows a roll, and moves back durably
  BEFORE a truncation below it, so recovery always scans everything that may be torn.
- A corrupt batch is never served (local_log.py); recovery finds damage itself
  (loader.py). Damage is set aside, never deleted (quarantine.py), and the log ends
  before it (a follower then fetches it again from its leader). The repair floor (how far
  the log reached: its end and last epoch as the log knew them, or, found at a start, what
  recovery can prove, the end unknown when the damage hides it) and the cut are
  checkpointed first, then the HWM (at most the new log end) and the epochs: after a crash
  in between, the next start finds the damage again and finishes the repair with the floor
  it recorded. The floor stays until the replica says its log reached it again
  (`clear_repair_floor`).
- After a failed write or fsync (EIO, ENOSPC) nothing written since the last completed
  sync is trusted: `reopen` releases the files without syncing, recovers the directory
  again and cuts the log back to what that sync made durable (PostgreSQL's fsyncgate).
- `flush_interval_ms` (never the default) is the weaker mode: `sync()` skips the data
  fsync until that much time has passed since the last one, so a crash may lose that window.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable

from tidelog.core.membership import VoterSet
from tidelog.core.messages import HardState
from tidelog.core.producers import ProducerEntry
from tidelog.core.storage import RepairFloor, StoredState, later_floor
from tidelog.errors import CorruptBatch, OffsetOutOfRange
from tidelog.records import BatchHeader, check_framing
from tidelog.types import DirectoryId, Epoch, Offset
from tidelog.wal import checkpoint as ckpt
from tidelog.wal.config import WalConfig
from tidelog.wal.controls import ControlBatches
from tidelog.wal.epoch_cache import LeaderEpochCache
from tidelog.wal.fs import FileSystem, OsFileSystem
from tidelog.wal.loader import LogLoader, clean_directory
from tidelog.wal.local_log import LocalLog, RepairNeeded
from tidelog.wal.quarantine import floor_found_by_recovery, set_aside_files
from tidelog.wal.retention import segments_past_retention
from tidelog.wal.timestamps import max_timestamp_record, offset_for_timestamp
from tidelog.wal.vote_state import VoteState
from tidelog.wal.voters_cache import VoterSetCache

__all__ = ["DiskStorage", "RepairNeeded", "WalConfig"]

Clock = Callable[[], int]


class StagedSync:
    """A sync of one log in a group commit, half done (`DiskStorage.stage_sync`)."""

    __slots__ = ("end", "hard_state", "renames", "storage")

    def __init__(
        self,
        storage: DiskStorage,
        renames: ckpt.Renames,
        hard_state: HardState,
        end: Offset | None,
    ) -> None:
        self.storage = storage
        self.renames = renames  # the checkpoints staged: (temporary, final) paths
        self.hard_state = hard_state  # the vote it makes durable
        self.end = end  # the log end it makes durable (None: not the data, flush_interval_ms)

    def publish(self) -> bool:
        """Rename the staged checkpoints (their temporary files are durable now); whether
        there were any."""
        ckpt.publish_checkpoints(self.storage.filesystem, self.renames)
        return bool(self.renames)

    def done(self) -> None:
        """The renames are durable too: everything staged counts as synced."""
        self.storage._synced(self)


class DiskStorage:
    """A LogStorage in a directory of segment files. Opening it recovers the directory."""

    def __init__(
        self,
        directory: str,
        *,
        clock: Clock,
        config: WalConfig | None = None,
        fs: FileSystem | None = None,
        new_directory_id: Callable[[], DirectoryId] | None = None,
        lazy: bool = False,
    ) -> None:
        self.directory = directory
        # `lazy`: a new directory's first files (its id, its first segment) are durable
        # with the log's first sync, not at once: thousands of new logs opened together
        # cost a group commit (wal/group_sync.py), not three syncs each.
        self._lazy = lazy
        self._staged_renames: ckpt.Renames = []  # checkpoints written, renamed at a sync
        self._clock = clock
        # Made with the directory (KIP-853): `new_directory_id` draws it (random by default).
        self._new_directory_id = new_directory_id or ckpt.random_directory_id
        self.directory_id = DirectoryId(0)
        self._fs: FileSystem = fs if fs is not None else OsFileSystem()
        self._local = LocalLog(self._fs, directory, config=config or WalConfig(), clock=clock)
        self._epochs = LeaderEpochCache()
        self._voters = VoterSetCache()
        # Where the control batches lie (wal/controls.py): recovery feeds what it scans.
        self._controls = ControlBatches(Offset(0))
        self._last_sync_ms = clock()
        self._hwm_checkpoint_ms = self._last_sync_ms
        self._hard_state = HardState(epoch=Epoch(0), voted_for=None)
        self._hard_state_saved = self._hard_state
        self._hwm = self._hwm_checkpointed = Offset(0)
        self.log_start_offset = self._recovery_point = Offset(0)
        self._repair_floor: RepairFloor | None = None
        self._repair_floor_dirty = False
        self._repair_cut: Offset | None = None  # where a repair in progress cuts the log
        self._producers: tuple[ProducerEntry, ...] = ()  # the snapshot at the log start
        self.synced_end_offset = Offset(0)  # the log end as of the last completed sync
        try:
            self._recover()
        except BaseException:
            self._fs.close()
            raise

    @property
    def config(self) -> WalConfig:
        return self._local.config

    @config.setter
    def config(self, config: WalConfig) -> None:
        """A topic's configuration changed: later rolls and retention follow it."""
        self._local.config = config

    @property
    def needs_repair(self) -> RepairNeeded | None:
        """Damage a read or recovery found and `quarantine` has not set aside yet."""
        return self._local.needs_repair

    # --- LogStorage -----------------------------------------------------------------
    def load(self) -> StoredState:
        return StoredState(
            hard_state=self._hard_state,
            hwm=Offset(min(self._hwm, self.log_end_offset)),
            log_start_offset=self.log_start_offset,
            log_end_offset=self.log_end_offset,
            epochs=self._epochs.entries,
            repair_floor=self._repair_floor,
            producers=self._producers,
            directory_id=self.directory_id,
            voter_sets=self._voters.entries,
        )

    def read(self, start_offset: Offset, *, end_offset: Offset, max_bytes: int) -> list[bytes]:
        """Whole batches from the one holding `start_offset`, each ending at or before
        `end_offset`, up to `max_bytes` but at least one when one qualifies. Each batch's
        CRC-32C is checked; a corrupt one raises StorageError and marks the log for repair."""
        self._local.check_serving()
        if start_offset < self.log_start_offset:
            raise OffsetOutOfRange(start_offset, self.log_start_offset, self.log_end_offset)
        if start_offset >= self.log_end_offset:
            return []
        return self._local.read(start_offset, end_offset=end_offset, max_bytes=max_bytes)

    def read_range(self, start_offset: Offset, *, end_offset: Offset, max_bytes: int) -> memoryview:
        """As `read`, but the batches come as one view of the file's bytes, read with one
        pread and never copied again, all from the segment holding `start_offset` (a
        reader asks again for the next one). Each batch's CRC-32C is checked. Empty when
        no batch ends by `end_offset`."""
        self._local.check_serving()
        if start_offset < self.log_start_offset:
            raise OffsetOutOfRange(start_offset, self.log_start_offset, self.log_end_offset)
        if start_offset >= min(end_offset, self.log_end_offset):
            return memoryview(b"")
        return self._local.read_range(start_offset, end_offset=end_offset, max_bytes=max_bytes)

    def save_hard_state(self, hard_state: HardState) -> None:
        """Durable when the next `sync()` returns."""
        assert hard_state.epoch >= self._hard_state.epoch
        self._hard_state = hard_state

    def truncate_to(self, *, offset: Offset) -> None:
        """Remove every batch at or above `offset`, a batch boundary at or above the
        checkpointed HWM. Durable on return, with everything written before it."""
        self._local.check_serving()
        assert offset >= self._hwm_checkpointed, "truncation below the checkpointed HWM"
        assert offset >= self.log_start_offset
        assert offset <= self.log_end_offset
        if offset == self.log_end_offset:
            return
        if offset < self._recovery_point:
            # Recovery must rescan from here before any new batch here can reach the disk.
            self._write_recovery_point(offset)
        self._local.truncate(offset)
        self._epochs.truncate(offset)
        self._voters.truncate(offset)
        self._controls.truncate(offset)
        self._hwm = Offset(min(self._hwm, offset))
        self._flush(self._clock())

    def append(self, batches: list[bytes]) -> None:
        """Append stamped batches at the log end, their framing checked before they are
        written (not their CRC: the core checked each batch it hands over, and every read
        checks it again). Rolls to a new segment at `segment_bytes` or `segment_ms`."""
        self._local.check_serving()
        pending: list[tuple[bytes, BatchHeader]] = []
        end = self.log_end_offset
        for batch in batches:
            header = check_framing(batch)
            assert header.size_bytes == len(batch)
            assert header.base_offset == end, "append leaves a gap"
            self._epochs.assign(header)
            self._controls.on_batch(header)
            self._voters.on_batch(batch, header)
            pending.append((batch, header))
            end = header.next_offset
        self._local.append(pending)

    def lower_hwm(self, offset: Offset) -> None:
        """Lower the HWM to `offset`, and its checkpoint at once, durably (ISR mode gives up
        records committed here after an unclean election, then truncates below the old
        HWM: `LogStorage.lower_hwm`)."""
        self._hwm = Offset(min(self._hwm, offset))
        if self._hwm_checkpointed > self._hwm:
            ckpt.write_checkpoints(
                self._fs, self.directory, {ckpt.HWM: ckpt.offset_rows(self._hwm)}
            )
            self._hwm_checkpointed = self._hwm

    def save_hwm(self, hwm: Offset) -> None:
        """The HWM is checkpointed by `sync()`, at most every hwm_checkpoint_interval_ms."""
        assert hwm >= self._hwm_checkpointed
        self._hwm = hwm

    def clear_repair_floor(self) -> None:
        """Forgotten durably by the next sync that makes the data durable."""
        self._repair_floor = None
        self._repair_floor_dirty = True

    def checkpoint_due(self) -> bool:
        """Whether the next `sync()` would write the vote or the HWM checkpoint (each a
        file written, synced and renamed: a slow sync, best run off the event loop)."""
        if self._hard_state != self._hard_state_saved:
            return True
        hwm = Offset(min(self._hwm, self.log_end_offset))
        interval = self.config.hwm_checkpoint_interval_ms
        return hwm != self._hwm_checkpointed and (
            self._clock() - self._hwm_checkpoint_ms >= interval
        )

    def sync(self) -> None:
        """Make everything written so far durable: data, then names, then checkpoints."""
        if self._staged_renames:  # a lazy log's first files
            renames, self._staged_renames = self._staged_renames, []
            ckpt.commit_renames(self._fs, self.directory, renames)
        now = self._clock()
        interval = self.config.flush_interval_ms
        if interval is not None and now - self._last_sync_ms < interval:
            self._write_checkpoints(now, hard_state_only=True)
            return
        self._flush(now)

    def _flush(self, now: int) -> None:
        self._last_sync_ms = now
        self._local.flush()
        self.synced_end_offset = self.log_end_offset
        self._write_checkpoints(now, hard_state_only=False)

    def stage_sync(self) -> StagedSync:
        """The first half of a `sync()` this log shares with others of its file system
        (wal/group_sync.py): the checkpoints that changed written to their temporary files,
        nothing synced. Then, once a sync of the file system made the data and those files
        durable, `StagedSync.publish` renames them, and once another made the renames
        durable, `StagedSync.done` counts everything synced. Nothing may be written to
        this log in between."""
        now = self._clock()
        interval = self.config.flush_interval_ms
        data = interval is None or now - self._last_sync_ms >= interval
        renames = self._staged_renames
        self._staged_renames = []
        if self._hard_state != self._hard_state_saved:
            renames = renames + self._vote.stage(self._hard_state)
        files: dict[str, list[list[int]]] = {}
        if data:
            self._last_sync_ms = now
            files.update(self._data_checkpoints(now))
        renames = renames + ckpt.stage_checkpoints(self._fs, self.directory, files)
        end = self.log_end_offset if data else None
        return StagedSync(self, renames, self._hard_state, end)

    def _synced(self, staged: StagedSync) -> None:
        if staged.end is not None:
            self._local.flushed()
            self.synced_end_offset = staged.end
        self._hard_state_saved = staged.hard_state

    @property
    def filesystem(self) -> FileSystem:
        return self._fs

    @property
    def device(self) -> int:
        """The file system holding this log (`FileSystem.device`)."""
        return self._device

    # --- beyond LogStorage ----------------------------------------------------------
    @property
    def log_end_offset(self) -> Offset:
        return self._local.log_end_offset

    @property
    def hwm(self) -> Offset:
        return self._hwm

    def data_end_offset(self, below: Offset) -> Offset:
        """The offset after the last data record below `below` (the HWM), at least the log
        start: `below` less the control batches (new leaders') at the top of the log below
        it. A batch whose kind is unknown counts as data (wal/controls.py). Past the log end
        (a follower told a HWM it has not reached) the batches are unknown, and at or below
        the log start there are none: `below`.
        Below the batches recovery scanned it reads batch headers (wal/controls.py's
        `data_end_offset`). It never marks the log damaged."""
        if self.needs_repair is not None:
            return below
        if not self.log_start_offset < below <= self.log_end_offset:
            return below
        return self._controls.data_end_offset(
            below, log_start_offset=self.log_start_offset, header_before=self._local.header_before
        )

    def segment_paths(self) -> list[str]:
        return self._local.segments.paths()

    def size_bytes(self) -> int:
        """The bytes of every segment (the partition's size, as DescribeLogDirs tells it)."""
        return self._local.segments.size_bytes()

    def close(self) -> None:
        """A clean shutdown: sync everything, checkpoint the HWM, release the files."""
        if self.needs_repair is None:
            self.sync()
            hwm = Offset(min(self._hwm, self.log_end_offset))
            if hwm != self._hwm_checkpointed:
                ckpt.write_checkpoints(self._fs, self.directory, {ckpt.HWM: ckpt.offset_rows(hwm)})
                self._hwm_checkpointed = hwm
        self._fs.close()

    def release(self) -> None:
        """Release the files without syncing anything (after a failed write or fsync)."""
        self._fs.close()

    def reopen(self) -> DiskStorage:
        """After a failed write or fsync (EIO, ENOSPC): this log released unsynced, and its
        directory recovered again, cut back to what the last completed sync made durable.
        The kernel may have dropped the pages a failed fsync did not write and still show
        them, so nothing written after that sync is trusted (PostgreSQL's fsyncgate).
        Raises OSError while the disk still fails."""
        synced = self.synced_end_offset
        self.release()
        fresh = DiskStorage(
            self.directory,
            clock=self._clock,
            config=self.config,
            fs=self._fs,
            new_directory_id=self._new_directory_id,
        )
        if fresh.log_end_offset > synced:
            fresh.truncate_to(offset=synced)
        return fresh

    def __enter__(self) -> DiskStorage:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # --- the log start: retention, DeleteRecords, reset -------------------------------
    def retention_due(self, wall_ms: int) -> bool:
        """Whether `apply_retention` would delete a segment now (no IO: a node asks it
        of thousands of idle partitions)."""
        segments = self._local.segments
        return segments_past_retention(segments, self.config, wall_ms=wall_ms, hwm=self._hwm) > 0

    def apply_retention(
        self,
        wall_ms: int,
        snapshot: Callable[[Offset], tuple[ProducerEntry, ...]] | None = None,
    ) -> int:
        """Delete whole segments beyond retention_bytes or older than retention_ms (by the
        time of day `wall_ms`, as record timestamps are), oldest first, never the active one
        and never one holding an offset at or above the HWM (wal/retention.py).
        `snapshot` gives the producer snapshot at a log start (the replica's
        `producer_snapshot`); without it the one saved last is kept. Durable on return.
        The number of segments deleted."""
        segments = self._local.segments
        count = segments_past_retention(segments, self.config, wall_ms=wall_ms, hwm=self._hwm)
        if count:
            start = segments[count].base_offset
            self._move_log_start(start, snapshot(start) if snapshot else None)
        return count

    def advance_log_start(
        self, offset: Offset, *, producers: tuple[ProducerEntry, ...] | None = None
    ) -> None:
        """DeleteRecords: make `offset` the log start offset, deleting the segments wholly
        below it; `producers` is the producer snapshot there. Durable on return. Past the
        HWM raises OffsetOutOfRange."""
        if offset > self._hwm:
            raise OffsetOutOfRange(offset, self.log_start_offset, self._hwm)
        if offset > self.log_start_offset:
            self._move_log_start(offset, producers)

    def reset(
        self,
        *,
        start_offset: Offset,
        prev_epoch: Epoch,
        producers: tuple[ProducerEntry, ...] | None = None,
        voters: VoterSet | None = None,
    ) -> None:
        """Drop the whole log and start it empty at `start_offset`, which becomes the log
        start and the HWM: a follower behind its leader's log start (Kafka's
        truncateFullyAndStartAt). Everything below it is committed and deleted on the
        leader; `prev_epoch` is the epoch of its record at start_offset - 1, which the epoch
        history keeps, and `voters` the leader's voter set there (None: the partition's
        first), which the voter sets keep. The checkpoints move first, so after a crash in
        between the old segments below `start_offset` are hidden and any above it are an
        ordinary divergent tail. Durable on return."""
        self._local.check_serving()
        self._save_producers(producers)
        self.log_start_offset = start_offset
        self._hwm = self._hwm_checkpointed = start_offset
        self._epochs.history.reset(start_offset, prev_epoch)
        self._voters.reset(start_offset, voters)
        ckpt.write_checkpoints(
            self._fs,
            self.directory,
            {
                ckpt.LOG_START_OFFSET: ckpt.offset_rows(start_offset),
                ckpt.HWM: ckpt.offset_rows(start_offset),
                ckpt.LEADER_EPOCH: self._epochs.rows(),
                ckpt.VOTERS: self._voters.rows(),
            },
        )
        local = self._local
        local.delete(local.segments.replace([]))
        local.segments.add(local.new_segment(start_offset))
        self._controls.reset(start_offset)
        local.sync_directory()
        self._write_recovery_point(start_offset)
        self.synced_end_offset = start_offset

    def _save_producers(self, producers: tuple[ProducerEntry, ...] | None) -> None:
        """The producer snapshot of a new log start, durable before the log start itself:
        a crash in between leaves a snapshot ahead of the log start (what the log replays
        it knows already), never behind it (a deleted batch forgotten). None keeps the
        snapshot saved last."""
        if producers is not None and producers != self._producers:
            self._producers = producers
            rows = ckpt.producer_rows(producers)
            ckpt.write_checkpoints(self._fs, self.directory, {ckpt.PRODUCERS: rows})

    def _move_log_start(self, offset: Offset, producers: tuple[ProducerEntry, ...] | None) -> None:
        """Checkpoint the producer snapshot, then the new log start with the epoch history
        and the voter sets trimmed to it, then remove the segments below it: after a crash
        in between, the checkpoints hide what was not removed yet. The epochs and voter
        sets go first because the segments removed may be all that tells the epoch of the
        record before the log start, or the voter set in effect there (their checkpoints
        lag until a sync covers what recovery derived from them)."""
        assert offset <= self._hwm
        self._save_producers(producers)
        self.log_start_offset = offset
        doomed = self._local.segments.remove_below(offset)
        first = self._first_offset()
        self._epochs.trim(first)
        files = {
            ckpt.LOG_START_OFFSET: ckpt.offset_rows(offset),
            ckpt.LEADER_EPOCH: self._epochs.durable_rows(first, self.synced_end_offset),
        }
        voters = self._voters.trim(first, synced_end_offset=self.synced_end_offset)
        if voters is not None:
            files[ckpt.VOTERS] = voters
        if self._hwm_checkpointed < offset:
            # The log start never passes the HWM, after a crash too. Checkpoint the log
            # start itself, not the HWM in memory: that may lie beyond what is synced here,
            # and a torn batch below a checkpointed HWM reads as corruption.
            self._hwm_checkpointed = offset
            files[ckpt.HWM] = ckpt.offset_rows(offset)
        ckpt.write_checkpoints(self._fs, self.directory, files)
        self._local.delete(doomed)
        self._local.sync_directory()

    def _first_offset(self) -> Offset:
        """The first offset the log holds, where a log start move trims the epoch history
        and the voter sets (as MemoryStorage does): the base of the batch holding the log
        start; the log start when the log holds no batch there (it ends at or below it);
        the first segment's base when that batch cannot be read."""
        segment = self._local.segments.first
        if self.log_start_offset >= segment.end_offset:
            return self.log_start_offset
        first = segment.base_offset
        if segment.base_offset < self.log_start_offset:
            with contextlib.suppress(CorruptBatch):
                first = segment.find(self.log_start_offset)[1].base_offset
        return first

    # --- time index -------------------------------------------------------------------
    def offset_for_timestamp(self, timestamp: int) -> tuple[Offset, int] | None:
        """(offset, timestamp) of the first data record whose timestamp is >= `timestamp`,
        or None. Control batches (a new leader's) never match, and a segment whose only
        later timestamps are theirs is passed over."""
        self._local.check_serving()
        return offset_for_timestamp(self._local, timestamp, log_start_offset=self.log_start_offset)

    def max_timestamp_record(self, below: Offset) -> tuple[Offset, int] | None:
        """(offset, timestamp) of the first data record below `below` with the largest
        timestamp (ListOffsets' MAX_TIMESTAMP, KIP-734), or None when there is none.
        Control batches never count; a segment or batch whose max timestamp cannot beat
        the best found so far is passed over."""
        self._local.check_serving()
        return max_timestamp_record(self._local, below, log_start_offset=self.log_start_offset)

    # --- checkpoints ------------------------------------------------------------------
    def _write_checkpoints(self, now: int, *, hard_state_only: bool) -> None:
        if self._hard_state != self._hard_state_saved:
            self._vote.write(self._hard_state)  # in place (wal/vote_state.py)
        if not hard_state_only:
            ckpt.write_checkpoints(self._fs, self.directory, self._data_checkpoints(now))
        self._hard_state_saved = self._hard_state

    def _data_checkpoints(self, now: int) -> dict[str, list[list[int]]]:
        """The checkpoints that changed; call only once the data is durable."""
        files: dict[str, list[list[int]]] = {}
        epochs = self._epochs.take_rows()
        if epochs is not None:
            files[ckpt.LEADER_EPOCH] = epochs
        voters = self._voters.take_rows()
        if voters is not None:
            files[ckpt.VOTERS] = voters
        if self._repair_floor_dirty:
            files[ckpt.REPAIR_FLOOR] = ckpt.repair_floor_rows(self._repair_floor)
            self._repair_floor_dirty = False
        hwm = Offset(min(self._hwm, self.log_end_offset))
        interval = self.config.hwm_checkpoint_interval_ms
        if hwm != self._hwm_checkpointed and now - self._hwm_checkpoint_ms >= interval:
            files[ckpt.HWM] = ckpt.offset_rows(hwm)
            self._hwm_checkpointed = hwm
            self._hwm_checkpoint_ms = now
        active_base = self._local.segments.active.base_offset
        if active_base > self._recovery_point:
            files[ckpt.RECOVERY_POINT] = ckpt.offset_rows(active_base)
            self._recovery_point = active_base
        return files

    def _write_recovery_point(self, offset: Offset) -> None:
        ckpt.write_checkpoints(
            self._fs, self.directory, {ckpt.RECOVERY_POINT: ckpt.offset_rows(offset)}
        )
        self._recovery_point = offset

    # --- recovery -------------------------------------------------------------------
    def _recover(self) -> None:
        """Open the directory: checkpoints, then segments (wal/loader.py), then set aside
        the damage found and finish a repair a crash interrupted; see the module's rules."""
        fs, directory = self._fs, self.directory
        fs.makedirs(directory)
        self._device = fs.device(directory)  # before anything is written (fs.py's rules)
        bases = clean_directory(fs, directory)
        directory_id = ckpt.read_directory_id(fs, directory)
        if directory_id is None:  # a new directory (or one of a tidelog before the ids)
            directory_id = self._new_directory_id()
            files: dict[str, list[list[int]]] = {ckpt.DIRECTORY_ID: [[int(directory_id)]]}
            if self._lazy:
                self._staged_renames = ckpt.stage_checkpoints(fs, directory, files)
            else:
                ckpt.write_checkpoints(fs, directory, files)
        self.directory_id = directory_id
        self._vote = VoteState(fs, directory)
        self._hard_state = self._vote.read()
        self._hard_state_saved = self._hard_state
        self._hwm_checkpointed = ckpt.read_offset(fs, directory, ckpt.HWM) or Offset(0)
        self._hwm = self._hwm_checkpointed
        self.log_start_offset = ckpt.read_offset(fs, directory, ckpt.LOG_START_OFFSET) or Offset(0)
        self._recovery_point = ckpt.read_offset(fs, directory, ckpt.RECOVERY_POINT) or Offset(0)
        self._repair_floor, self._repair_cut = ckpt.read_repair_floor(fs, directory)
        self._producers = ckpt.read_producers(fs, directory)
        self._voters.restore(ckpt.read_voters(fs, directory))
        loader = LogLoader(
            self._local,
            self._epochs,
            self._controls,
            self._voters,
            hwm_checkpointed=self._hwm_checkpointed,
            recovery_point=self._recovery_point,
        )
        if not bases:
            self._local.segments.add(self._local.new_segment(self.log_start_offset))
            self._controls.reset(self.log_start_offset)
            self._voters.truncate(self.log_start_offset)
            if self._lazy:
                self._local.dir_dirty = True
            else:
                self._local.sync_directory()
        else:
            loader.open_segments(bases)
        self.log_start_offset = Offset(
            max(self.log_start_offset, self._local.segments.first.base_offset)
        )
        self._voters.keep_checkpointed_below(self.log_start_offset)
        loader.check_committed_end(self.log_start_offset)
        if self.needs_repair is not None:
            self._set_aside(len(self._local.segments) - 1, self._floor_of_damage())
        elif self._repair_cut is not None:  # a repair cut the log, then a crash came
            self._end_log_at(self.log_end_offset)
        self._epochs.trim(self._first_offset())
        self._hwm_checkpointed = Offset(min(self._hwm_checkpointed, self.log_end_offset))
        self._hwm = self._hwm_checkpointed
        self.synced_end_offset = self.log_end_offset

    # --- damage -----------------------------------------------------------------------
    def quarantine(self) -> bool:
        """Set aside the damage a read found (`needs_repair`; see the module's rules). The
        damaged segment is read again from its start: the log then ends before its first
        bad batch, and the repair floor records how far the log reached (its end and last
        epoch). False when no read found damage, or the segment reads whole again (only
        its sparse index was wrong: it is rebuilt)."""
        damage = self.needs_repair
        if damage is None:
            return False
        index = self._local.segments.index_of_path(damage.segment_path)
        floor = RepairFloor(self._epochs.last_epoch, self.log_end_offset)
        if index is None or not self._damaged_again(index):
            self._local.needs_repair = None
            return False
        self._set_aside(index, floor)
        return True

    def _damaged_again(self, index: int) -> bool:
        """Scan segment `index` again, checking every CRC; True when a batch fails (the
        segment then ends before it), else its indexes are rebuilt and it stays."""
        segments = self._local.segments
        segment = segments[index]
        try:
            segment.rebuild_indexes(verify=True)
        except CorruptBatch:
            return True
        if index < len(segments) - 1:
            segment.seal()
        self._local.mark_indexes_unsynced(segment)
        return False

    def _set_aside(self, index: int, floor: RepairFloor) -> None:
        """Segment `index` ends at its good prefix (its `size_bytes`); set the rest of it and
        every later segment aside in quarantine/, durably, floor first (module's rules)."""
        local = self._local
        segment = local.segments[index]
        cut = segment.end_offset
        self._repair_floor = later_floor(self._repair_floor, floor)
        self._repair_cut = cut
        point = Offset(min(self._recovery_point, segment.base_offset))
        ckpt.write_checkpoints(
            self._fs,
            self.directory,
            {
                ckpt.REPAIR_FLOOR: ckpt.repair_floor_rows(self._repair_floor, cut),
                ckpt.RECOVERY_POINT: ckpt.offset_rows(point),
            },
        )
        self._recovery_point = point
        set_aside_files(self._fs, self.directory, segment)
        for later in local.segments.remove_after(index):
            local.forget(later)
        self._end_log_at(cut)
        local.needs_repair = None

    def _end_log_at(self, cut: Offset) -> None:
        """The log now ends at `cut`: checkpoint its HWM (at most there), epochs, voter
        sets and start, and that the repair is done."""
        self._epochs.history.truncate(cut)
        self._voters.truncate(cut)
        self._controls.truncate(cut)
        self._hwm = self._hwm_checkpointed = Offset(min(self._hwm, cut))
        self._repair_cut = None
        files = {
            ckpt.HWM: ckpt.offset_rows(self._hwm),
            ckpt.LEADER_EPOCH: self._epochs.rows(),
            ckpt.VOTERS: self._voters.rows(),
            ckpt.REPAIR_FLOOR: ckpt.repair_floor_rows(self._repair_floor),
        }
        if cut < self.log_start_offset:  # the batch holding the log start was damaged
            self.log_start_offset = cut
            files[ckpt.LOG_START_OFFSET] = ckpt.offset_rows(cut)
        ckpt.write_checkpoints(self._fs, self.directory, files)
        self.synced_end_offset = cut

    def _floor_of_damage(self) -> RepairFloor:
        """The floor for the damage recovery found: the one a repair in progress recorded
        when the damage is where it cuts (it knew more: it is finishing), else what
        recovery can tell (quarantine.py's `floor_found_by_recovery`)."""
        assert self.needs_repair is not None
        cut, recorded = self._repair_cut, self._repair_floor
        if cut is not None and recorded is not None and self.needs_repair.offset >= cut:
            return recorded
        return floor_found_by_recovery(
            self._fs,
            self.directory,
            self._local.segments.active,
            hwm_checkpointed=self._hwm_checkpointed,
            voted_epoch=self._hard_state.epoch,
        )
