"""The limits of one partition's log (Kafka's LogConfig, the part the disk log reads)."""

from __future__ import annotations

from dataclasses import dataclass

from tidelog.errors import check_range
from tidelog.wal.segment import SEGMENT_BYTES_MAX

DAY_MS = 24 * 60 * 60 * 1000


@dataclass(frozen=True, slots=True)
class WalConfig:
    """Limits of one partition's log; the defaults are Kafka's, except as noted."""

    segment_bytes: int = 1024 * 1024 * 1024
    segment_ms: int = 7 * DAY_MS
    index_interval_bytes: int = 4096
    retention_bytes: int | None = None
    retention_ms: int | None = 7 * DAY_MS
    # None: every sync() fsyncs (the default). N: sync() fsyncs at most every N ms.
    flush_interval_ms: int | None = None
    # The HWM is only a hint for recovery, so it is checkpointed lazily (Kafka: 5 s).
    hwm_checkpoint_interval_ms: int = 5000

    def __post_init__(self) -> None:
        """ConfigError naming the first setting out of range (tidelog.errors)."""
        check_range("WalConfig.segment_bytes", self.segment_bytes, 1, SEGMENT_BYTES_MAX)
        check_range("WalConfig.segment_ms", self.segment_ms, 1)
        check_range("WalConfig.index_interval_bytes", self.index_interval_bytes, 1)
        if self.retention_bytes is not None:
            check_range("WalConfig.retention_bytes", self.retention_bytes, 0)
        if self.retention_ms is not None:
            check_range("WalConfig.retention_ms", self.retention_ms, 0)
        if self.flush_interval_ms is not None:
            check_range("WalConfig.flush_interval_ms", self.flush_interval_ms, 0)
        check_range("WalConfig.hwm_checkpoint_interval_ms", self.hwm_checkpoint_interval_ms, 0)
