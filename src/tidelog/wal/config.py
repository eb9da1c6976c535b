"""The limits of one partition's log (Kafka's LogConfig, the part the disk log reads)."""

from __future__ import annotations

from dataclasses import dataclass

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
        assert 0 < self.segment_bytes <= SEGMENT_BYTES_MAX
        assert self.segment_ms > 0
        assert self.index_interval_bytes > 0
        assert self.hwm_checkpoint_interval_ms >= 0
