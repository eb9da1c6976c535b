"""A name kept for testing/scenario.py until the merge of issue 41: an ISR-mode replica is
a `Replica` whose `isr` is not None (core/replica.py, core/mode/isr.py). Nothing else
uses this module; the lead deletes it once scenario.py reads `replica.isr`."""

from __future__ import annotations

from tidelog.core.replica import Replica


class _InIsrMode(type):
    def __instancecheck__(cls, instance: object) -> bool:
        return isinstance(instance, Replica) and instance.isr is not None


class IsrReplica(Replica, metaclass=_InIsrMode):
    """`isinstance(replica, IsrReplica)`: whether `replica` is in ISR mode. Never made."""
