"""The named errors of the core, the disk log and the protocol, and the tree of them all.

Expected failures are values of these types (or raised as them); bugs are assertions. The
errors below are defined here, except those marked with their module: an error that only
one upper layer raises lives with that layer (it would otherwise import upwards), and
derives from TidelogError all the same, so `except TidelogError` catches every one.

    TidelogError
    ├── RetriableError                 the client should retry, maybe elsewhere
    │   ├── NotLeader                  this replica does not lead; carries a leader hint
    │   ├── NotEnoughReplicas          fewer live in-sync replicas than min.insync.replicas
    │   │   └── NotEnoughReplicasAfterAppend  ISR mode: the ISR shrank while it waited
    │   ├── OffsetNotAvailable         not readable yet (new leader's HWM, follower's HWM)
    │   └── RequestTimedOut            an acks=all produce did not commit in time
    ├── FencedEpoch                    a message or request from a stale leader epoch
    ├── OffsetOutOfRange               outside [log start offset, end]: reset the position
    ├── LogDiverged                    the log diverged behind the reader; names where
    ├── OutOfOrderSequence             an idempotent producer skipped a sequence number
    ├── InvalidProducerEpoch           an idempotent producer's epoch was fenced
    ├── UnknownProducerId              an idempotent producer's state is not known here
    ├── CorruptBatch                   a record batch failed its CRC-32C or framing checks
    ├── InvalidBatch                   a client's batch that Kafka's validation refuses
    ├── MetadataError                  a metadata command (topic, config) cannot be carried out
    ├── StorageError                   the disk log cannot serve (needs repair, bad path)
    ├── ProtocolError                  protocol.framing: off-protocol bytes; one connection closes
    │   └── FrameTooLarge              protocol.peer: more than one peer frame may hold
    ├── ConfigError                    a setting of any layer is out of what it allows
    │   ├── ClientConfigError          client_config: a client properties file or setting
    │   └── SparkOptionError           spark.options: a source or sink option is wrong
    ├── GroupError                     server.groups: a group request refused with a Kafka code
    ├── SparkKafkaError                spark.kafka_io: the cluster did not answer as Spark needs
    │   ├── DataLoss                   spark.kafka_io: planned offsets were deleted
    │   └── ReplicaReadError           spark.replicas: one replica could not be read
    ├── NoJava                         spark.session: PySpark found no Java 17
    ├── WorkerPythonError              spark.workers: the session's workers cannot import tidelog
    ├── SparkJobFailed                 spark.failures: a Spark job failed for a tidelog reason
    ├── ClientError                    tools.client_kafka: a client command failed
    │   ├── NoBroker                   tools.client_kafka: nothing listens at the bootstrap
    │   └── UnknownTopic               tools.client_kafka: no such topic or partition
    ├── ClusterError                   tools.cluster: the cluster directory or a node refused
    ├── DemoError                      tools.demo: a wait of the demo ran out
    └── PipelineError                  tools.demo_pipeline: the Spark pipeline did not finish
Every configuration (`BrokerConfig`, `WalConfig`, `ReplicaConfig`, `IsrConfig`,
`GroupConfig`, client properties, Spark options) checks itself when it is made or parsed
and raises ConfigError with one line naming the setting, the value and what is allowed
(`WalConfig.segment_bytes: 0 is out of range (1-2147483647)`), never an assert, which -O
drops. ConfigError is also a ValueError, as a bad value is. A command-line tool prints it
as `error: ...` and exits non-zero. (A topic's configs, set by a Kafka client, are refused
with MetadataError INVALID_CONFIG, the code Kafka answers.)
Codecs raise ValueError subclasses (protocol.codecs.CodecError, protocol.record_walk.
MalformedRecord) that their callers turn into Kafka error codes at once.
"""

from __future__ import annotations

from tidelog.types import Epoch, NodeId, Offset


class TidelogError(Exception):
    """The root of every error tidelog raises on purpose."""


class RetriableError(TidelogError):
    """A transient condition: the same request may succeed later."""


class NotLeader(RetriableError):
    """This replica is not the leader of the partition."""

    def __init__(self, leader_hint: NodeId | None) -> None:
        super().__init__(f"not the leader (leader hint: {leader_hint})")
        self.leader_hint = leader_hint


class NotEnoughReplicas(RetriableError):
    """acks=all refused: fewer live in-sync replicas than min.insync.replicas."""

    def __init__(self, in_sync: int, required: int) -> None:
        super().__init__(f"{in_sync} live in-sync replicas, {required} required")
        self.in_sync = in_sync
        self.required = required


class NotEnoughReplicasAfterAppend(NotEnoughReplicas):
    """acks=all appended, then answered with an error: the committed ISR fell below
    min.insync.replicas while the batch waited (ISR mode, docs/isr.md rule 7). The batch
    may still commit later: the producer retries (idempotently, to keep one copy)."""


class OffsetNotAvailable(RetriableError):
    """The offset is not readable here yet (HWM not established or behind the leader's)."""


class RequestTimedOut(RetriableError):
    """An acks=all produce was not committed within its timeout; it may still commit."""


class FencedEpoch(TidelogError):
    """A request or message carried an epoch older than the replica's current one."""

    def __init__(self, epoch: Epoch, current: Epoch) -> None:
        super().__init__(f"epoch {epoch} is fenced by current epoch {current}")
        self.epoch = epoch
        self.current = current


class OffsetOutOfRange(TidelogError):
    """The offset lies outside the readable range of the log."""

    def __init__(self, offset: Offset, log_start_offset: Offset, end_offset: Offset) -> None:
        super().__init__(f"offset {offset} is outside [{log_start_offset}, {end_offset}]")
        self.offset = offset
        self.log_start_offset = log_start_offset
        self.end_offset = end_offset


class LogDiverged(TidelogError):
    """The log diverged behind the reader's position (KIP-320).

    The reader should truncate its position to `end_offset`, the end of `epoch` here.
    """

    def __init__(self, epoch: Epoch, end_offset: Offset) -> None:
        super().__init__(f"log diverged: epoch {epoch} ends at offset {end_offset}")
        self.epoch = epoch
        self.end_offset = end_offset


class OutOfOrderSequence(TidelogError):
    """An idempotent producer's batch does not follow its last sequence number."""


class InvalidProducerEpoch(TidelogError):
    """An idempotent producer wrote with an epoch older than one already seen."""


class UnknownProducerId(TidelogError):
    """An idempotent producer id unknown here sent a batch that does not start at sequence 0:
    it may retry a batch whose record of it was deleted, so it is refused, never duplicated."""


class CorruptBatch(TidelogError):
    """A record batch failed its CRC-32C or framing checks."""


class InvalidBatch(TidelogError):
    """A client's record batch that Kafka's Produce validation refuses, before any append.

    `code` names the Kafka error (INVALID_RECORD, CORRUPT_MESSAGE, MESSAGE_TOO_LARGE, ...);
    `record_errors` are (index in the batch, message) of the records at fault, where Kafka
    lists them (its RecordValidationException).
    """

    def __init__(
        self, code: str, message: str, record_errors: tuple[tuple[int, str], ...] = ()
    ) -> None:
        super().__init__(message)
        self.code = code
        self.record_errors = record_errors


class MetadataError(TidelogError):
    """A metadata command that cannot be carried out; `code` names the Kafka error."""

    def __init__(self, code: str, message: str) -> None:
        super().__init__(message)
        self.code = code


class StorageError(TidelogError):
    """The storage of a partition cannot serve the request."""


class ConfigError(TidelogError, ValueError):
    """A configuration value is missing, malformed, or contradicts another one; the
    message is one line: the setting, the value, what is allowed."""


def check_range(setting: str, value: int, low: int, high: int | None = None) -> None:
    """ConfigError `setting: value is out of range (low-high)` unless low <= value <= high
    (`high` None: no upper bound)."""
    if high is None:
        if value < low:
            raise ConfigError(f"{setting}: {value} is out of range ({low} or more)")
    elif not low <= value <= high:
        raise ConfigError(f"{setting}: {value} is out of range ({low}-{high})")
