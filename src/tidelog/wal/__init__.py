"""Durable storage of one partition: segments of record batches, indexes, checkpoints,
recovery and retention, on a `FileSystem` the simulator can replace with a faulty one.

May import only `tidelog.core`, `tidelog.wal` and the base modules (tests/test_layers.py).
"""

from tidelog.wal.faultyfs import FaultyFileSystem, SimulatedCrash
from tidelog.wal.fs import FileSystem, OsFileSystem
from tidelog.wal.log import DiskStorage, RepairNeeded, WalConfig

__all__ = [
    "DiskStorage",
    "FaultyFileSystem",
    "FileSystem",
    "OsFileSystem",
    "RepairNeeded",
    "SimulatedCrash",
    "WalConfig",
]
