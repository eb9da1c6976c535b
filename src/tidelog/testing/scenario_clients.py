"""The scenario language's client commands: produce, fetch, latest, delete-records. What a
client is told is printed and handed to the checker (acknowledged writes, reads, the
leader's HWM), which judges it against every replica.
"""

from __future__ import annotations

from tidelog.core.messages import ProduceResult
from tidelog.core.replica import ACKS_ALL, ACKS_LEADER, ACKS_NONE, Replica
from tidelog.errors import StorageError, TidelogError
from tidelog.testing.scenario_base import (
    ScenarioState,
    describe_error,
    describe_record_batch,
    nodes_of,
)
from tidelog.testing.sim import build_batch
from tidelog.types import Epoch, NodeId, Offset

ACKS = {"all": ACKS_ALL, "-1": ACKS_ALL, "1": ACKS_LEADER, "0": ACKS_NONE}


class ClientCommands(ScenarioState):
    """Producers and consumers at one node; their answers printed and checked."""

    def cmd_produce(self, args: list[str], kv: dict[str, str]) -> None:
        node = nodes_of(args[0])[0]
        value = kv["value"]
        acks = ACKS[kv.get("acks", "all")]
        records = int(kv.get("records", "1"))
        if "producer" in kv:
            producer_id, epoch, sequence = (int(part) for part in kv["producer"].split(","))
            producer = (producer_id, epoch, sequence)
            batch = build_batch(value.encode(), records=records, producer=producer)
        else:
            batch = build_batch(value.encode(), records=records)
        self.next_request += 1
        request_id = self.next_request
        self.produced[request_id] = (value, batch, acks)
        if not self.c.input(node, lambda replica: replica.propose(request_id, batch, acks=acks)):
            self.say(f"produce {value}: node {node} is down")

    def on_completion(self, node: NodeId, result: ProduceResult) -> None:
        value, batch, acks = self.produced[result.request_id]
        if result.error is not None:
            self.say(f"produce {value}: {describe_error(result.error)}")
            return
        self.say(f"produce {value}: acknowledged by {node} at offset {result.base_offset}")
        if acks == ACKS_ALL and result.base_offset is not None:
            self.checker.on_acked(result.base_offset, batch)

    def cmd_fetch(self, args: list[str], kv: dict[str, str]) -> None:
        node = nodes_of(args[0])[0]
        replica = self.c.replica(node)
        epoch = Epoch(int(kv["epoch"])) if "epoch" in kv else None
        try:
            result = replica.fetch(
                Offset(int(kv["offset"])),
                max_bytes=int(kv.get("bytes", str(1 << 20))),
                last_fetched_epoch=epoch,
                now_ms=self.c.now,
            )
        except StorageError as error:  # never served; the node repairs in its next round
            self.say(f"error {describe_error(error)}")
            self.c.drain(node)
            return
        if result.error is not None:
            self.say(f"error {describe_error(result.error)}")
            return
        self.checker.on_read(node, result.batches)
        self.say(f"hwm={result.hwm} log_start={result.log_start_offset}")
        for batch in result.batches:
            self.say(describe_record_batch(batch))

    def cmd_delete_records(self, args: list[str], kv: dict[str, str]) -> None:
        node = nodes_of(args[0])[0]
        offset = Offset(int(kv["offset"]))
        outcome: list[str] = []

        def delete(replica: Replica) -> None:
            try:
                outcome.append(f"low_watermark={replica.delete_records(offset)}")
            except TidelogError as error:
                outcome.append(f"error {describe_error(error)}")

        self.c.input(node, delete)
        self.output.extend(outcome)

    def cmd_latest(self, args: list[str], kv: dict[str, str]) -> None:
        del kv
        node = nodes_of(args[0])[0]
        replica = self.c.replica(node)
        try:
            latest = replica.latest_offset(now_ms=self.c.now)
        except TidelogError as error:
            self.say(f"error {describe_error(error)}")
            return
        self.checker.on_leader_hwm(node, latest)
        self.say(f"latest={latest}")
