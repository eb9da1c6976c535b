"""The replication state machine of one partition: no IO, no clock, no randomness of its own.

Messages, ticks and client requests go in; a `Ready` comes out. See `replica.py`.
"""

from tidelog.core.epochs import EpochEntry
from tidelog.core.messages import (
    AppendRequest,
    AppendResponse,
    FetchResult,
    HardState,
    Message,
    ProduceResult,
    Ready,
    VoteRequest,
    VoteResponse,
)
from tidelog.core.replica import Replica, ReplicaConfig, Rng, Role
from tidelog.core.storage import LogStorage, MemoryStorage, StoredState

__all__ = [
    "AppendRequest",
    "AppendResponse",
    "EpochEntry",
    "FetchResult",
    "HardState",
    "LogStorage",
    "MemoryStorage",
    "Message",
    "ProduceResult",
    "Ready",
    "Replica",
    "ReplicaConfig",
    "Rng",
    "Role",
    "StoredState",
    "VoteRequest",
    "VoteResponse",
]
