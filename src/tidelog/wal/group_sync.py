"""Group commit across logs: one sync of the file system for many partitions' rounds.

A node with thousands of partitions syncs many logs at once (the rounds of a failover's
elections, of writes spread over many partitions): each `DiskStorage.sync()` on its own
costs an fdatasync of every segment it wrote, and per checkpoint it replaces an fsync of
the temporary file, a rename and an fsync of the directory, every one a commit of the file
system's journal. `sync_logs` does the same for many logs with two syncs of their file
system (syncfs, `FileSystem.sync_all`), whatever their number.

Rules of this file:
- The order of one log's sync holds for each of them: the data and the checkpoints'
  temporary files are durable (the first sync of the file system) before any checkpoint
  is renamed over its old one, and every log counts its sync done only after the second
  sync made the renames durable. A crash in between leaves each checkpoint old or new,
  never a mix, and never newer than the data it describes.
- Logs are grouped by the file system that holds them (`DiskStorage.device`); a group of
  one syncs on its own (`DiskStorage.sync`), never the whole file system for one log.
- A failed sync of the file system fails every log of its group: none counts anything
  synced, and each reopens from what its last completed sync made durable (log.py's
  rules: after a failed fsync nothing written since is trusted).
"""

from __future__ import annotations

from collections.abc import Sequence

from tidelog.wal.log import DiskStorage

GROUP_MIN = 2
"""The fewest logs of one file system synced together; fewer sync on their own."""


def sync_logs(storages: Sequence[DiskStorage]) -> list[BaseException | None]:
    """Sync every log of `storages` (see the module's rules): for each, None once its
    sync is done, or the error that failed it (an OSError of its sync or its group's)."""
    results: list[BaseException | None] = [None] * len(storages)
    groups: dict[int, list[int]] = {}
    for position, storage in enumerate(storages):
        groups.setdefault(storage.device, []).append(position)
    for positions in groups.values():
        if len(positions) < GROUP_MIN:
            for position in positions:
                try:
                    storages[position].sync()
                except OSError as error:
                    results[position] = error
            continue
        try:
            _sync_together([storages[position] for position in positions])
        except OSError as error:
            for position in positions:
                results[position] = error
    return results


def _sync_together(storages: list[DiskStorage]) -> None:
    """One group, on one file system: stage, sync it, rename, sync it again, done."""
    staged = [storage.stage_sync() for storage in storages]
    fs, directory = storages[0].filesystem, storages[0].directory
    fs.sync_all(directory)  # the data, the indexes, new names, the temporary files
    renamed = [each.publish() for each in staged]
    if any(renamed):
        fs.sync_all(directory)  # the renames
    for each in staged:
        each.done()
