"""The steps that carry out a `Ready`, shared by the broker and the simulator.

Rules (the contract of `tidelog.core.Ready`):
1. `write_ready` writes the hard state, a reset or truncation, the batches, the HWM and a
   new log start; nothing is durable yet (a reset or log start move may already be).
2. The caller sends `ready.messages` (they may go before the sync).
3. `storage.sync()`; only then may `ready.messages_after_persist` be sent.
4. `replica.advance(ready)`.
"""

from __future__ import annotations

from tidelog.core.messages import Ready
from tidelog.core.storage import LogStorage


def write_ready(storage: LogStorage, ready: Ready) -> None:
    """Step 1: hand the Ready's writes to the storage, in order. Syncs nothing."""
    if ready.hard_state is not None:
        storage.save_hard_state(ready.hard_state)
    if ready.reset_to is not None:
        storage.reset(start_offset=ready.reset_to, prev_epoch=ready.reset_prev_epoch)
    if ready.truncate_to is not None:
        storage.truncate_to(offset=ready.truncate_to)
    if ready.batches:
        storage.append(list(ready.batches))
    if ready.hwm is not None:
        storage.save_hwm(ready.hwm)
    if ready.log_start_offset is not None:  # after the HWM it may not pass
        storage.advance_log_start(ready.log_start_offset)
