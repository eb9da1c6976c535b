"""Kafka error codes, and which code each tidelog error becomes on the wire.

Codes are Kafka's (org.apache.kafka.common.protocol.Errors); only the ones tidelog answers
or reasons about are named. `error_code_for` is the single place a tidelog error turns into
a Kafka error code, so every handler answers the same failure the same way.

LogDiverged has no error code of its own: Fetch v12+ could report it in the partition's
`diverging_epoch` field (error NONE), but tidelog serves clients only committed records,
which never diverge, so its Fetch does not check a LastFetchedEpoch and never sets that
field; a consumer's position is validated with OffsetForLeaderEpoch (KIP-320). Where it
arises, OFFSET_OUT_OF_RANGE answers it, so the reader resets its position.
"""

from __future__ import annotations

from enum import IntEnum
from typing import Final

from tidelog.errors import (
    CorruptBatch,
    FencedEpoch,
    InvalidProducerEpoch,
    LogDiverged,
    NotEnoughReplicas,
    NotEnoughReplicasAfterAppend,
    NotLeader,
    OffsetNotAvailable,
    OffsetOutOfRange,
    OutOfOrderSequence,
    RequestTimedOut,
    StorageError,
    TidelogError,
    UnknownProducerId,
)


class ErrorCode(IntEnum):
    """Kafka protocol error codes."""

    UNKNOWN_SERVER_ERROR = -1
    NONE = 0
    OFFSET_OUT_OF_RANGE = 1
    CORRUPT_MESSAGE = 2
    UNKNOWN_TOPIC_OR_PARTITION = 3
    INVALID_FETCH_SIZE = 4
    LEADER_NOT_AVAILABLE = 5
    NOT_LEADER_OR_FOLLOWER = 6
    REQUEST_TIMED_OUT = 7
    BROKER_NOT_AVAILABLE = 8
    REPLICA_NOT_AVAILABLE = 9
    MESSAGE_TOO_LARGE = 10
    OFFSET_METADATA_TOO_LARGE = 12
    NETWORK_EXCEPTION = 13
    COORDINATOR_LOAD_IN_PROGRESS = 14
    COORDINATOR_NOT_AVAILABLE = 15
    NOT_COORDINATOR = 16
    INVALID_TOPIC_EXCEPTION = 17
    RECORD_LIST_TOO_LARGE = 18
    NOT_ENOUGH_REPLICAS = 19
    NOT_ENOUGH_REPLICAS_AFTER_APPEND = 20
    INVALID_REQUIRED_ACKS = 21
    ILLEGAL_GENERATION = 22
    INCONSISTENT_GROUP_PROTOCOL = 23
    INVALID_GROUP_ID = 24
    UNKNOWN_MEMBER_ID = 25
    INVALID_SESSION_TIMEOUT = 26
    REBALANCE_IN_PROGRESS = 27
    INVALID_COMMIT_OFFSET_SIZE = 28
    TOPIC_AUTHORIZATION_FAILED = 29
    GROUP_AUTHORIZATION_FAILED = 30
    CLUSTER_AUTHORIZATION_FAILED = 31
    INVALID_TIMESTAMP = 32
    UNSUPPORTED_SASL_MECHANISM = 33
    ILLEGAL_SASL_STATE = 34
    UNSUPPORTED_VERSION = 35
    TOPIC_ALREADY_EXISTS = 36
    INVALID_PARTITIONS = 37
    INVALID_REPLICATION_FACTOR = 38
    INVALID_REPLICA_ASSIGNMENT = 39
    INVALID_CONFIG = 40
    NOT_CONTROLLER = 41
    INVALID_REQUEST = 42
    UNSUPPORTED_FOR_MESSAGE_FORMAT = 43
    POLICY_VIOLATION = 44
    OUT_OF_ORDER_SEQUENCE_NUMBER = 45
    DUPLICATE_SEQUENCE_NUMBER = 46
    INVALID_PRODUCER_EPOCH = 47
    INVALID_TXN_STATE = 48
    INVALID_PRODUCER_ID_MAPPING = 49
    INVALID_TRANSACTION_TIMEOUT = 50
    CONCURRENT_TRANSACTIONS = 51
    TRANSACTIONAL_ID_AUTHORIZATION_FAILED = 53
    SECURITY_DISABLED = 54
    SASL_AUTHENTICATION_FAILED = 58
    UNKNOWN_PRODUCER_ID = 59
    KAFKA_STORAGE_ERROR = 56
    LOG_DIR_NOT_FOUND = 57
    INVALID_FETCH_SESSION_EPOCH = 71
    FETCH_SESSION_ID_NOT_FOUND = 70
    FENCED_LEADER_EPOCH = 74
    UNKNOWN_LEADER_EPOCH = 75
    UNSUPPORTED_COMPRESSION_TYPE = 76
    STALE_BROKER_EPOCH = 77
    OFFSET_NOT_AVAILABLE = 78
    MEMBER_ID_REQUIRED = 79
    PREFERRED_LEADER_NOT_AVAILABLE = 80
    ELIGIBLE_LEADERS_NOT_AVAILABLE = 83
    ELECTION_NOT_NEEDED = 84
    NO_REASSIGNMENT_IN_PROGRESS = 85
    GROUP_MAX_SIZE_REACHED = 81
    FENCED_INSTANCE_ID = 82
    GROUP_ID_NOT_FOUND = 69
    NON_EMPTY_GROUP = 68
    GROUP_SUBSCRIBED_TO_TOPIC = 86
    INVALID_RECORD = 87
    UNSTABLE_OFFSET_COMMIT = 88
    THROTTLING_QUOTA_EXCEEDED = 89
    RESOURCE_NOT_FOUND = 91
    DUPLICATE_RESOURCE = 92
    UNACCEPTABLE_CREDENTIAL = 93
    UNKNOWN_TOPIC_ID = 100
    INCONSISTENT_TOPIC_ID = 103
    BROKER_ID_NOT_REGISTERED = 102
    INCONSISTENT_CLUSTER_ID = 104
    DUPLICATE_VOTER = 126
    VOTER_NOT_FOUND = 127


# The most specific class wins: the lookup walks each error's MRO.
_CODE_OF_ERROR: Final[dict[type[TidelogError], ErrorCode]] = {
    NotLeader: ErrorCode.NOT_LEADER_OR_FOLLOWER,
    NotEnoughReplicas: ErrorCode.NOT_ENOUGH_REPLICAS,
    NotEnoughReplicasAfterAppend: ErrorCode.NOT_ENOUGH_REPLICAS_AFTER_APPEND,
    OffsetNotAvailable: ErrorCode.OFFSET_NOT_AVAILABLE,
    RequestTimedOut: ErrorCode.REQUEST_TIMED_OUT,
    FencedEpoch: ErrorCode.FENCED_LEADER_EPOCH,
    OffsetOutOfRange: ErrorCode.OFFSET_OUT_OF_RANGE,
    # Below Fetch v12 there is no diverging_epoch field: see the module docstring.
    LogDiverged: ErrorCode.OFFSET_OUT_OF_RANGE,
    CorruptBatch: ErrorCode.CORRUPT_MESSAGE,
    StorageError: ErrorCode.KAFKA_STORAGE_ERROR,
    OutOfOrderSequence: ErrorCode.OUT_OF_ORDER_SEQUENCE_NUMBER,
    InvalidProducerEpoch: ErrorCode.INVALID_PRODUCER_EPOCH,
    UnknownProducerId: ErrorCode.UNKNOWN_PRODUCER_ID,
}


def error_code_for(error: TidelogError | None) -> ErrorCode:
    """The Kafka error code that answers `error` (NONE for None).

    An error type without a mapping answers UNKNOWN_SERVER_ERROR, which clients do not
    retry; add a mapping rather than rely on it.
    """
    if error is None:
        return ErrorCode.NONE
    for cls in type(error).__mro__:
        code = _CODE_OF_ERROR.get(cls)
        if code is not None:
            return code
    return ErrorCode.UNKNOWN_SERVER_ERROR
