"""The scenario language's node and disk commands: crash, restart, wipe, corrupt,
hold-persist, persist. A crash loses what a node had not synced; a held sync finishes only
when `persist` says so.
"""

from __future__ import annotations

from tidelog.core.storage import MemoryStorage
from tidelog.testing.cluster import SimMemoryStorage
from tidelog.testing.scenario_base import ScenarioState, ScriptError, nodes_of
from tidelog.types import Offset


class DiskCommands(ScenarioState):
    """Nodes crashed and restarted, disks wiped or rotting, syncs held back."""

    def cmd_crash(self, args: list[str], kv: dict[str, str]) -> None:
        del kv
        for node in nodes_of(args[0]):
            self.c.crash(node)

    def cmd_restart(self, args: list[str], kv: dict[str, str]) -> None:
        del kv
        for node in nodes_of(args[0]):
            self.c.restart(node)

    def cmd_wipe(self, args: list[str], kv: dict[str, str]) -> None:
        same = kv.get("same-directory") == "true"
        for node in nodes_of(args[0]):
            if self.c.nodes[node].alive:
                raise ScriptError(f"wipe {node}: crash it first")
            storage = self.c.nodes[node].storage
            if not isinstance(storage, SimMemoryStorage):
                raise ScriptError("wipe needs the in-memory storage")
            emptied = storage.emptied()
            if same:
                emptied.directory_id = storage.directory_id
            self.c.nodes[node].storage = emptied
            self.c.nodes[node].durable_hwm = 0  # the new disk holds nothing

    def cmd_corrupt(self, args: list[str], kv: dict[str, str]) -> None:
        node = nodes_of(args[0])[0]
        storage = self.c.nodes[node].storage
        if not isinstance(storage, MemoryStorage):
            raise ScriptError("corrupt needs the in-memory storage")
        storage.corrupt(Offset(int(kv["offset"])))

    def cmd_hold_persist(self, args: list[str], kv: dict[str, str]) -> None:
        del kv
        for node in nodes_of(args[0]):
            self.c.nodes[node].manual_persist = True

    def cmd_persist(self, args: list[str], kv: dict[str, str]) -> None:
        del kv
        for node in nodes_of(args[0]):
            sim_node = self.c.nodes[node]
            sim_node.manual_persist = False
            if sim_node.persisting is not None:
                self.c.finish_persist(node)
