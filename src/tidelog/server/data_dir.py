"""The node's data directory and its id (KIP-858).

Rules of this file:
- A node's data directory has an id: 63 random bits in its `directory-id` checkpoint
  (the format of a partition's), made with the directory and kept by every start.
  A directory that is empty, replaced by a new disk, gets a new id.
- The node registers its id with the controller (`register_broker`), and a partition made
  after it names each replica's copy by it (`TopicInfo.directories`), its first voter set
  (KIP-853): a node back on an empty directory is then a new copy, no voter of the
  partitions it held until their leaders add it again (core/membership.py).
- A data partition's copy made here takes the node's id when it is the copy the
  partition's first voter set names (`CopiesHeld`: this directory never held one of it);
  any other new copy takes a random id; one made before (its directory holds its own id)
  keeps its own.
"""

from __future__ import annotations

from pathlib import Path

from tidelog.types import DirectoryId
from tidelog.wal import checkpoint as ckpt
from tidelog.wal.fs import OsFileSystem


def node_directory_id(data_dir: Path) -> DirectoryId:
    """The id of the node's data directory, made (and the directory with it) if it has none.
    StorageError if its checkpoint cannot be read."""
    data_dir.mkdir(parents=True, exist_ok=True)
    fs = OsFileSystem()
    try:
        directory_id = ckpt.read_directory_id(fs, str(data_dir))
        if directory_id is None:
            directory_id = ckpt.random_directory_id()
            ckpt.write_checkpoints(fs, str(data_dir), {ckpt.DIRECTORY_ID: [[directory_id]]})
        return directory_id
    finally:
        fs.close()


COPIES_HELD = "copies-held"  # in the data directory: each partition it ever held a copy of


class CopiesHeld:
    """The partitions this data directory ever held a copy of (by topic id and partition),
    kept in `copies-held`, one line each, synced before the copy is made.

    A copy made where this directory never held one of that partition may take the id the
    partition's first voter set names for it (the node's: it is that copy). Any other (the
    node removed from the partition and added again, or a partition directory deleted by
    hand) gets a random id of its own: an empty copy under its old key would vote as the
    copy that held the committed records, the lost copy of scenario 28 again.
    """

    def __init__(self, data_dir: Path) -> None:
        self.path = data_dir / COPIES_HELD
        self.fs = OsFileSystem()
        self.held: set[tuple[str, int]] = set()
        self.fresh: set[tuple[str, int]] = set()  # claimed ahead (`claim_all`), not yet made
        self.torn = False  # the last line was cut by a crash: the next claim ends it first
        try:
            text = self.path.read_text(encoding="ascii")
        except FileNotFoundError:
            return
        self.torn = bool(text) and not text.endswith("\n")
        for line in text.splitlines():
            topic_id, _, partition = line.partition(" ")
            if partition.isdigit():  # a torn last line is the claim that never finished
                self.held.add((topic_id, int(partition)))

    def claim(self, topic_id: str, partition: int) -> bool:
        """Whether this directory never held a copy of the partition (or `claim_all` just
        claimed it, for this copy); from now on it has."""
        copy = (topic_id, partition)
        if copy not in self.fresh and not self.claim_all([copy]):
            return False
        self.fresh.discard(copy)
        return True

    def claim_all(self, copies: list[tuple[str, int]]) -> set[tuple[str, int]]:
        """Claim every copy of `copies` not held before, with one sync: the copies about to
        be made (a topic's partitions, a chunk at a time). Each one's next `claim` says it
        is fresh. Returns those."""
        new = {copy for copy in copies if copy not in self.held}
        if not new:
            return new
        path = str(self.path)
        created = not self.fs.exists(path)
        lines = "".join(f"{topic_id} {partition}\n" for topic_id, partition in sorted(new))
        self.fs.append(path, (("\n" if self.torn else "") + lines).encode("ascii"))
        self.fs.fsync(path)
        if created:
            self.fs.fsync_dir(str(self.path.parent))
        self.torn = False
        self.held |= new
        self.fresh |= new
        return new
