"""The scenario language's time and network commands: campaign, transfer, tick, deliver,
drop, stabilize, isolate, partition, heal. Messages wait in the cluster's flight until a
command delivers or drops them, oldest first.
"""

from __future__ import annotations

from collections.abc import Iterator

from tidelog.core.liveness import NodePing, NodePong
from tidelog.core.messages import (
    AppendRequest,
    AppendResponse,
    TimeoutNow,
    VoteRequest,
    VoteResponse,
    WakeUp,
)
from tidelog.testing.cluster import Envelope
from tidelog.testing.scenario_base import ScenarioState, ScriptError, describe_message, nodes_of
from tidelog.types import NodeId

MESSAGE_TYPES: dict[str, type] = {
    "append": AppendRequest,
    "append-resp": AppendResponse,
    "vote": VoteRequest,
    "vote-resp": VoteResponse,
    "timeout-now": TimeoutNow,
    "ping": NodePing,
    "pong": NodePong,
    "wake": WakeUp,
}
STABILIZE_ROUNDS_MAX = 10_000


class NetCommands(ScenarioState):
    """Time passing, messages delivered or lost, the network cut and healed."""

    def cmd_campaign(self, args: list[str], kv: dict[str, str]) -> None:
        del kv
        for node in nodes_of(args[0]):
            self.c.input(node, lambda replica: replica.campaign())

    def cmd_ping(self, args: list[str], kv: dict[str, str]) -> None:
        del kv
        for node in nodes_of(args[0]):
            self.c.ping(node)

    def cmd_expire(self, args: list[str], kv: dict[str, str]) -> None:
        del kv
        for node in nodes_of(args[0]):
            for dead in self.c.expire(node):
                self.say(f"{node}: node {dead} is dead")

    def cmd_transfer(self, args: list[str], kv: dict[str, str]) -> None:
        """`transfer 1 to=2`: node 1, the leader, hands its leadership to node 2."""
        node, target = nodes_of(args[0])[0], NodeId(int(kv["to"]))
        refusals: list[str | None] = []
        self.c.input(node, lambda replica: refusals.append(replica.transfer_leadership(target)))
        if refusals and refusals[0] is not None:
            self.say(f"refused: {refusals[0]}")

    def cmd_tick(self, args: list[str], kv: dict[str, str]) -> None:
        among = {"from": kv["deliver"], "to": kv["deliver"]} if "deliver" in kv else None
        for _ in range(int(kv.get("count", "1"))):
            self.c.now += 1
            for node in nodes_of(args[0]):
                self.c.tick(node)
            if among is not None:
                self.deliver_quietly(among)

    def deliver_quietly(self, among: dict[str, str]) -> None:
        """Deliver everything among some nodes without a transcript (time passing)."""
        for _ in range(STABILIZE_ROUNDS_MAX):
            pending = list(self.matching(among))
            if not pending:
                return
            self.c.deliver(pending[0])
        raise ScriptError("deliver did not settle")

    def cmd_deliver(self, args: list[str], kv: dict[str, str]) -> None:
        del args
        limit = int(kv.get("count", "1000000"))
        skip = int(kv.get("skip", "0"))
        for envelope in list(self.matching(kv))[skip : skip + limit]:
            self.deliver(envelope)

    def cmd_drop(self, args: list[str], kv: dict[str, str]) -> None:
        del args
        for envelope in list(self.matching(kv)):
            self.c.in_flight.remove(envelope)
            self.say(f"dropped {describe_message(envelope.msg)}")

    def cmd_stabilize(self, args: list[str], kv: dict[str, str]) -> None:
        del args
        only = {"from": kv["nodes"], "to": kv["nodes"]} if "nodes" in kv else {}
        for _ in range(STABILIZE_ROUNDS_MAX):
            pending = list(self.matching(only))
            if not pending:
                return
            self.deliver(pending[0])
        raise ScriptError("stabilize did not settle")

    def matching(self, kv: dict[str, str]) -> Iterator[Envelope]:
        senders = set(nodes_of(kv["from"])) if "from" in kv else None
        recipients = set(nodes_of(kv["to"])) if "to" in kv else None
        kind = MESSAGE_TYPES[kv["type"]] if "type" in kv else None
        for envelope in sorted(self.c.in_flight, key=lambda e: e.seq):
            msg = envelope.msg
            if senders is not None and msg.sender not in senders:
                continue
            if recipients is not None and msg.recipient not in recipients:
                continue
            if kind is not None and not isinstance(msg, kind):
                continue
            yield envelope

    def deliver(self, envelope: Envelope) -> None:
        recipient = self.c.nodes[envelope.msg.recipient]
        suffix = "" if recipient.alive else "  (recipient down: lost)"
        self.say(describe_message(envelope.msg) + suffix)
        self.c.deliver(envelope)

    def cmd_isolate(self, args: list[str], kv: dict[str, str]) -> None:
        del kv
        for node in nodes_of(args[0]):
            self.c.isolate(node)

    def cmd_partition(self, args: list[str], kv: dict[str, str]) -> None:
        del kv
        self.c.partition(*(nodes_of(group) for group in args))

    def cmd_heal(self, args: list[str], kv: dict[str, str]) -> None:
        del args, kv
        self.c.heal()
