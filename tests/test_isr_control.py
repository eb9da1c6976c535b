"""ISR mode on one node (server/isr_control.py): its registration (rule 9 of docs/isr.md).
A node's replicas take no record before its registration is applied, and the registration
names the process (its incarnation) and whether it stopped cleanly."""

from __future__ import annotations

import asyncio
import random
from types import SimpleNamespace
from typing import Any

from tidelog.core.isr import PartitionRecord
from tidelog.core.replica import Replica, ReplicaConfig, Replication
from tidelog.core.storage import MemoryStorage
from tidelog.protocol.kafka_errors import ErrorCode
from tidelog.protocol.peer import PartitionKey
from tidelog.server.isr_control import IsrControl
from tidelog.server.metadata import MetadataImage, encode_command
from tidelog.server.partition_inputs import Input, TakeRecord, take_record
from tidelog.types import DirectoryId, NodeId

KEY = PartitionKey("t", 0)
NODES = (NodeId(1), NodeId(2), NodeId(3))


class Runner:
    """A partition runner that carries out the records submitted when asked (`run`)."""

    def __init__(self, node: NodeId) -> None:
        config = ReplicaConfig(node, NODES, replication=Replication.ISR)
        self.key = KEY
        self.replica: Replica = Replica(config, MemoryStorage(), random.Random(1))
        self.isr_mode = True
        self.repairing = False
        self.submitted: list[Input] = []

    def submit(self, command: Input) -> None:
        self.submitted.append(command)

    def isr_record(self) -> PartitionRecord | None:
        return replica_of(self).partition_record()

    def declines_leadership(self) -> bool:
        return replica_of(self).declines_leadership()

    def run(self) -> None:
        while self.submitted:
            command = self.submitted.pop(0)
            assert isinstance(command, TakeRecord)
            take_record(self.key, self.replica, command)


class Broker:
    """What IsrControl uses of a node: its image, runners, and the metadata log, which
    applies each command committed (the controller's answer comes when `answer` says)."""

    def __init__(self, node: NodeId) -> None:
        self.node_id = node
        self.directory_id = DirectoryId(100 + node)
        self.config = SimpleNamespace(peers={node: ("127.0.0.1", 9200 + node)})
        self.image = MetadataImage()
        self.runners = {KEY: Runner(node)}
        self.commands: list[dict[str, Any]] = []
        self.answer = asyncio.Event()

    def hosted(self) -> list[Runner]:
        return list(self.runners.values())

    def hosting(self, key: PartitionKey) -> Runner | None:
        return self.runners.get(key)

    def apply(self, command: dict[str, Any]) -> None:
        self.image.apply(self.image.applied_offset, encode_command(command))

    async def commit_metadata(self, command: dict[str, Any]) -> tuple[ErrorCode, str | None]:
        self.commands.append(command)
        await self.answer.wait()
        self.apply(command)
        return ErrorCode.NONE, None


def replica_of(where: Broker | Runner) -> Replica:
    runner = where.runners[KEY] if isinstance(where, Broker) else where
    replica = runner.replica
    assert replica.isr is not None
    return replica


async def settle() -> None:
    for _ in range(5):
        await asyncio.sleep(0)


def test_no_replica_takes_a_record_before_its_node_registered() -> None:
    async def run() -> None:
        broker = Broker(NodeId(2))
        broker.apply(
            {
                "type": "create_topic",
                "name": "t",
                "replicas": [[1, 2, 3]],
                "configs": {"replication.mode": "isr"},
            }
        )
        control = IsrControl(broker, clean=False)  # type: ignore[arg-type]
        control.hand_record(KEY)
        control.step()  # proposes the registration; its answer is not in yet
        await settle()
        runner = broker.runners[KEY]
        assert runner.submitted == [] and replica_of(broker).partition_record() is None
        [register] = broker.commands
        assert register == {
            "type": "register_broker",
            "node": 2,
            "clean": False,
            "incarnation": control.incarnation,
            "directory": 102,  # its data directory's id (KIP-858)
            "peer": "127.0.0.1:9202",  # where the others dial it
        }
        broker.answer.set()
        await settle()
        assert control.registered
        runner.run()  # handed as soon as the registration is applied
        record = replica_of(broker).partition_record()
        assert record is not None and record.isr == NODES  # a first registration
        assert record == broker.image.records[("t", 0)]

    asyncio.run(run())


def test_each_process_names_itself() -> None:
    broker = Broker(NodeId(1))
    first = IsrControl(broker, clean=True)  # type: ignore[arg-type]
    second = IsrControl(broker, clean=True)  # type: ignore[arg-type]
    assert first.incarnation != second.incarnation and len(first.incarnation) == 32
