"""The node's data directory and its id (KIP-858).

Rules of this file:
- A node's data directory has an id: 63 random bits in its `directory-id` checkpoint
  (the format of a partition's), made with the directory and kept by every start.
  A directory that is empty, replaced by a new disk, gets a new id.
- The node registers its id with the controller (`register_broker`), and a partition made
  after it names each replica's copy by it (`TopicInfo.directories`), its first voter set
  (KIP-853): a node back on an empty directory is then a new copy, no voter of the
  partitions it held until their leaders add it again (core/membership.py).
- A data partition's copy made here takes the node's id; one made before (its directory
  holds its own id) keeps its own.
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
