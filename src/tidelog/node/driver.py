"""The steps that carry out a `Ready`, shared by the broker and the simulator.

Rules (the contract of `tidelog.core.Ready`):
1. `write_ready` writes the hard state, the truncation and the batches, and checkpoints the
   HWM; nothing is durable yet.
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
    if ready.truncate_to is not None:
        storage.truncate_to(offset=ready.truncate_to)
    if ready.batches:
        storage.append(list(ready.batches))
    if ready.hwm is not None:
        storage.save_hwm(ready.hwm)
