"""Broker configs (server/broker_configs.py): the replication throttles checked as Kafka's
brokers check them, kept in the metadata image (a node's own value over the cluster
default over Kafka's), replayed the same on every node; DescribeConfigs, AlterConfigs and
IncrementalAlterConfigs on BROKER resources through the codec (server/configs_api.py);
the rate each partition's runner is handed (server/throttles.py). Live:
tests/test_throttle_live.py."""

from __future__ import annotations

import json
import random
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import tidelog.protocol.kafka  # noqa: F401  (first: it imports kafka-python quietly)

# isort: split
from kafka.protocol.admin import (
    AlterConfigsRequest,
    DescribeConfigsRequest,
    IncrementalAlterConfigsRequest,
)

from round_trip import round_trip
from tidelog.core.membership import ReplicaKey
from tidelog.core.replica import FollowerStatus, Replica, ReplicaConfig, Role
from tidelog.errors import MetadataError, StorageError
from tidelog.protocol.kafka_errors import ErrorCode
from tidelog.protocol.peer import ForwardRequest, PartitionKey
from tidelog.server.acl import Authorizer
from tidelog.server.broker import forwarded_command
from tidelog.server.broker_configs import (
    DEFAULT_CONFIG,
    DYNAMIC_BROKER_CONFIG,
    DYNAMIC_DEFAULT_BROKER_CONFIG,
    FOLLOWER_RATE,
    LEADER_RATE,
    NO_THROTTLE,
    Synonym,
    broker_of,
    check_command,
    parse_rates,
)
from tidelog.server.configs_api import CONFIGS_HANDLERS
from tidelog.server.disk_health import DiskHealth
from tidelog.server.metadata import MetadataImage, encode_command
from tidelog.server.partition import PartitionRunner
from tidelog.server.partition_inputs import SetMinInsync, SetThrottle
from tidelog.server.throttles import Copy, ReplicationThrottles, partition_rates
from tidelog.types import DirectoryId, NodeId
from tidelog.wal import DiskStorage, WalConfig

BROKER = 4  # Kafka's ConfigResourceType.BROKER
SET, DELETE, APPEND = 0, 1, 2


class Log:
    """A metadata image fed commands at increasing offsets."""

    def __init__(self) -> None:
        self.image = MetadataImage()
        self.offset = 0
        self.changes: list[Any] = []

    def apply(self, command: dict[str, Any]) -> None:
        self.changes.append(self.image.apply(self.offset, encode_command(command)))
        self.offset += 1

    def set(self, broker: str, **configs: str) -> None:
        named = {name.replace("_", "."): value for name, value in configs.items()}
        self.apply({"type": "alter_broker_configs", "broker": broker, "configs": named})


# ---------------------------------------------------------------------- checks --------
@pytest.mark.parametrize(
    ("name", "broker"), [("", None), ("1", 1), ("+01", 1), ("2147483647", 2**31 - 1)]
)
def test_a_broker_resource_is_the_default_or_a_broker_id(name: str, broker: int | None) -> None:
    assert broker_of(name) == broker


@pytest.mark.parametrize(
    ("name", "message"),
    [
        ("-1", "Invalid negative broker ID."),
        ("abc", "Unable to parse broker name as a base 10 number."),
        (" 1", "Unable to parse broker name as a base 10 number."),
        ("2147483648", "Unable to parse broker name as a base 10 number."),
        ("1.0", "Unable to parse broker name as a base 10 number."),
    ],
)
def test_other_broker_names_are_refused_as_kafka_refuses_them(name: str, message: str) -> None:
    with pytest.raises(MetadataError) as refused:
        broker_of(name)
    assert (refused.value.code, str(refused.value)) == ("INVALID_REQUEST", message)


def test_both_rates_take_a_long_of_at_least_zero() -> None:
    assert parse_rates({LEADER_RATE: "0", FOLLOWER_RATE: str(NO_THROTTLE)}) == {
        LEADER_RATE: 0,
        FOLLOWER_RATE: NO_THROTTLE,
    }
    assert parse_rates({LEADER_RATE: " 200000 "}) == {LEADER_RATE: 200_000}


@pytest.mark.parametrize(
    ("configs", "message"),
    [
        (
            {LEADER_RATE: "-1"},
            f"Invalid value -1 for configuration {LEADER_RATE}: Value must be at least 0",
        ),
        (
            {FOLLOWER_RATE: "fast"},
            f"Invalid value fast for configuration {FOLLOWER_RATE}: Not a number of type LONG",
        ),
        (
            {LEADER_RATE: "9223372036854775808"},
            f"Invalid value 9223372036854775808 for configuration {LEADER_RATE}: Value must "
            "be no more than 9223372036854775807",
        ),
        ({LEADER_RATE: "1.5"}, f"Invalid value 1.5 for configuration {LEADER_RATE}"),
        ({"log.retention.ms": "1"}, "Cannot update these configs dynamically: Set("),
        ({LEADER_RATE: None}, f"Null value not supported for : {LEADER_RATE}"),
    ],
)
def test_bad_values_and_other_configs_are_invalid_requests(
    configs: dict[str, object], message: str
) -> None:
    with pytest.raises(MetadataError) as refused:
        parse_rates(configs)
    assert refused.value.code == "INVALID_REQUEST"  # Kafka's broker path (KAFKA-13609)
    assert str(refused.value).startswith(message)


# ---------------------------------------------------------------------- the image -----
def test_a_brokers_own_value_wins_over_the_default_over_kafkas() -> None:
    log = Log()
    configs = log.image.broker_configs
    assert configs.rate_of(1, LEADER_RATE) is None  # Long.MAX_VALUE: no throttle
    assert configs.in_force(1, LEADER_RATE) == Synonym(str(NO_THROTTLE), DEFAULT_CONFIG)
    log.set("", leader_replication_throttled_rate="500000")
    log.set("+2", leader_replication_throttled_rate="100", follower_replication_throttled_rate="0")
    assert configs.rate_of(1, LEADER_RATE) == 500_000
    assert configs.rate_of(2, LEADER_RATE) == 100
    assert configs.rate_of(2, FOLLOWER_RATE) == 1  # 0: the least the core takes
    assert configs.rate_of(1, FOLLOWER_RATE) is None
    assert configs.levels(2, LEADER_RATE) == (
        Synonym("100", DYNAMIC_BROKER_CONFIG),
        Synonym("500000", DYNAMIC_DEFAULT_BROKER_CONFIG),
        Synonym(str(NO_THROTTLE), DEFAULT_CONFIG),
    )
    assert configs.configs_of("02") == {LEADER_RATE: "100", FOLLOWER_RATE: "0"}
    log.set("2")  # an empty set: back to the default
    assert configs.rate_of(2, LEADER_RATE) == 500_000
    assert configs.held == {"": {LEADER_RATE: "500000"}}
    assert all(change.brokers for change in log.changes)


@pytest.mark.parametrize(
    "command",
    [
        {"type": "alter_broker_configs", "broker": "1", "configs": {LEADER_RATE: "-5"}},
        {"type": "alter_broker_configs", "broker": "1", "configs": {"num.io.threads": "8"}},
        {"type": "alter_broker_configs", "broker": "-1", "configs": {LEADER_RATE: "5"}},
        {"type": "alter_broker_configs", "broker": 1, "configs": {LEADER_RATE: "5"}},
        {"type": "alter_broker_configs", "broker": "1", "configs": [LEADER_RATE]},
        {"type": "alter_broker_configs", "configs": {LEADER_RATE: "5"}},
        {"type": "alter_broker_configs", "broker": "1", "configs": {LEADER_RATE: 5}},
    ],
)
def test_a_committed_command_that_cannot_be_applied_changes_nothing(
    command: dict[str, Any],
) -> None:
    log = Log()
    log.set("1", leader_replication_throttled_rate="7")
    log.apply(command)
    assert log.image.broker_configs.held == {"1": {LEADER_RATE: "7"}}
    assert not log.changes[-1].brokers


@settings(max_examples=200, deadline=None)
@given(
    st.dictionaries(
        st.sampled_from(["type", "broker", "configs"]),
        st.one_of(
            st.none(),
            st.integers(),
            st.text(max_size=12),
            st.just("alter_broker_configs"),
            st.dictionaries(
                st.sampled_from([LEADER_RATE, FOLLOWER_RATE, "x"]),
                st.one_of(st.none(), st.integers(), st.text(max_size=25)),
            ),
        ),
    )
)
def test_no_committed_command_makes_apply_raise(command: dict[str, Any]) -> None:
    Log().apply({**command, "type": "alter_broker_configs"})


def test_every_node_replaying_the_log_holds_the_same_configs() -> None:
    commands = [
        check_command("", {LEADER_RATE: "1000"}),
        check_command("3", {FOLLOWER_RATE: "2000", LEADER_RATE: "300"}),
        {"type": "alter_broker_configs", "broker": "3", "configs": {LEADER_RATE: "x"}},
        check_command("003", {LEADER_RATE: "400"}),
    ]
    logs = [Log(), Log()]
    for log in logs:
        for command in commands:
            log.apply(json.loads(json.dumps(command)))
    first, second = (log.image.broker_configs for log in logs)
    assert first.held == second.held == {"": {LEADER_RATE: "1000"}, "3": {LEADER_RATE: "400"}}


def test_the_controller_takes_a_forwarded_broker_config_command() -> None:
    command = check_command("1", {LEADER_RATE: "10"})
    request = ForwardRequest(NodeId(2), NodeId(1), 1, (encode_command(command),))
    assert forwarded_command(request) == command


# ---------------------------------------------------------------------- the Kafka APIs
class FakeBroker:
    """The `BrokerView` the configs handlers use: a `Log`'s image, and a controller that
    applies each command it is given there."""

    def __init__(self, *, authorizer: bool = False) -> None:
        self.log = Log()
        self.image = self.log.image
        self.authorizer = Authorizer(enabled=authorizer, super_users=frozenset())
        self.committed: list[dict[str, Any]] = []

    async def commit_metadata(self, command: dict[str, Any]) -> tuple[ErrorCode, None]:
        self.committed.append(command)
        self.log.apply(command)
        return ErrorCode.NONE, None


def describe(broker: FakeBroker, name: str, version: int = 4, **fields: Any) -> Any:
    resource = DescribeConfigsRequest.DescribeConfigsResource(
        resource_type=BROKER, resource_name=name, configuration_keys=fields.pop("keys", None)
    )
    sent = DescribeConfigsRequest[version](
        resources=[resource], include_synonyms=fields.pop("synonyms", False), **fields
    )
    [result] = round_trip(CONFIGS_HANDLERS, broker, sent).results
    return result


def incremental(broker: FakeBroker, name: str, *changes: tuple[str, int, str | None]) -> Any:
    cls = IncrementalAlterConfigsRequest.AlterConfigsResource
    configs = [
        cls.AlterableConfig(name=key, config_operation=operation, value=value)
        for key, operation, value in changes
    ]
    sent = IncrementalAlterConfigsRequest[1](
        resources=[cls(resource_type=BROKER, resource_name=name, configs=configs)],
        validate_only=False,
    )
    [answer] = round_trip(CONFIGS_HANDLERS, broker, sent).responses
    return ErrorCode(answer.error_code), answer.error_message


def test_a_broker_describes_each_rate_in_force_with_its_source_and_synonyms() -> None:
    broker = FakeBroker()
    assert incremental(broker, "", (LEADER_RATE, SET, "500000")) == (ErrorCode.NONE, None)
    assert incremental(broker, "2", (LEADER_RATE, SET, "200000")) == (ErrorCode.NONE, None)
    result = describe(broker, "2", synonyms=True, include_documentation=True)
    assert result.error_code == 0
    configs = {c.name: c for c in result.configs}
    leader, follower = configs[LEADER_RATE], configs[FOLLOWER_RATE]
    assert (leader.value, leader.config_source) == ("200000", DYNAMIC_BROKER_CONFIG)
    assert [(s.value, s.source) for s in leader.synonyms] == [
        ("200000", DYNAMIC_BROKER_CONFIG),
        ("500000", DYNAMIC_DEFAULT_BROKER_CONFIG),
        (str(NO_THROTTLE), DEFAULT_CONFIG),
    ]
    assert (follower.value, follower.config_source) == (str(NO_THROTTLE), DEFAULT_CONFIG)
    assert leader.config_type == 5 and leader.documentation and not leader.read_only
    one = describe(broker, "1", keys=[LEADER_RATE])
    assert [(c.name, c.value, c.config_source) for c in one.configs] == [
        (LEADER_RATE, "500000", DYNAMIC_DEFAULT_BROKER_CONFIG)
    ]
    default = describe(broker, "")  # only what is set, as Kafka answers the default
    assert [(c.name, c.value) for c in default.configs] == [(LEADER_RATE, "500000")]
    for version in range(1, 5):  # Kafka 4.0 serves v1-4
        assert len(describe(broker, "2", version).configs) == 2


def test_a_bad_broker_name_is_an_invalid_request_everywhere() -> None:
    broker = FakeBroker()
    assert describe(broker, "-3").error_code == ErrorCode.INVALID_REQUEST
    code, message = incremental(broker, "x", (LEADER_RATE, SET, "1"))
    assert (code, message) == (
        ErrorCode.INVALID_REQUEST,
        "Unable to parse broker name as a base 10 number.",
    )
    assert not broker.committed


def test_incremental_changes_are_checked_then_committed() -> None:
    broker = FakeBroker()
    refusals = [
        incremental(broker, "1", (LEADER_RATE, SET, "-1")),
        incremental(broker, "1", (FOLLOWER_RATE, SET, "abc")),
        incremental(broker, "1", ("num.network.threads", SET, "3")),
    ]
    assert [code for code, _ in refusals] == [ErrorCode.INVALID_REQUEST] * 3
    assert "Value must be at least 0" in str(refusals[0][1])
    assert "Not a number of type LONG" in str(refusals[1][1])
    assert incremental(broker, "1", (LEADER_RATE, APPEND, "1"))[0] == ErrorCode.INVALID_CONFIG
    assert not broker.committed
    # Kafka's kafka-reassign-partitions --verify deletes three rates, one tidelog does not
    # take: deleting what is not set changes nothing.
    unset = ("replica.alter.log.dirs.io.max.bytes.per.second", DELETE, None)
    assert incremental(broker, "1", (LEADER_RATE, DELETE, None), unset) == (ErrorCode.NONE, None)
    assert not broker.committed
    both = ((LEADER_RATE, SET, "100"), (FOLLOWER_RATE, SET, "200"))
    assert incremental(broker, "1", *both) == (ErrorCode.NONE, None)
    assert incremental(broker, "1", *both) == (ErrorCode.NONE, None)  # no change: no command
    assert broker.committed == [check_command("1", {LEADER_RATE: "100", FOLLOWER_RATE: "200"})]
    assert incremental(broker, "1", (LEADER_RATE, DELETE, None), unset)[0] == ErrorCode.NONE
    assert broker.image.broker_configs.held == {"1": {FOLLOWER_RATE: "200"}}


def test_alter_configs_replaces_a_brokers_whole_set() -> None:
    broker = FakeBroker()
    incremental(broker, "1", (LEADER_RATE, SET, "100"), (FOLLOWER_RATE, SET, "200"))
    cls = AlterConfigsRequest.AlterConfigsResource
    sent = AlterConfigsRequest[2](
        resources=[
            cls(
                resource_type=BROKER,
                resource_name="1",
                configs=[cls.AlterableConfig(name=FOLLOWER_RATE, value="300")],
            )
        ],
        validate_only=False,
    )
    [answer] = round_trip(CONFIGS_HANDLERS, broker, sent).responses
    assert answer.error_code == 0
    assert broker.image.broker_configs.held == {"1": {FOLLOWER_RATE: "300"}}


def test_broker_configs_need_the_cluster_with_an_authorizer() -> None:
    broker = FakeBroker(authorizer=True)
    assert describe(broker, "1").error_code == ErrorCode.CLUSTER_AUTHORIZATION_FAILED
    code, _ = incremental(broker, "1", (LEADER_RATE, SET, "1"))
    assert code == ErrorCode.CLUSTER_AUTHORIZATION_FAILED


# ---------------------------------------------------------------------- the rates -----
def key(partition: int) -> PartitionKey:
    return PartitionKey("t", partition)


def rates(
    copies: dict[PartitionKey, Copy | None],
    leader: int | None = None,
    followers: dict[int, int] | None = None,
    moving_onto: dict[int, int] | None = None,
) -> dict[PartitionKey, int | None]:
    follower: Callable[[int], int | None] = (followers or {}).get
    return partition_rates(
        copies, leader_rate=leader, follower_rate=follower, moving_onto=moving_onto or {}
    )


def test_no_rate_set_is_no_throttle() -> None:
    assert rates({key(0): Copy(True, frozenset({4}))}) == {key(0): None}


def test_the_leader_rate_is_shared_among_the_partitions_led_with_learners() -> None:
    copies = {
        key(0): Copy(True, frozenset({4})),
        key(1): Copy(True, frozenset({4, 5})),
        key(2): Copy(True, frozenset()),  # in sync: holds the share of one more
        key(3): Copy(False, frozenset({4})),  # followed: the same
        key(4): None,  # never throttled (ISR mode, not moving)
    }
    assert rates(copies, leader=300) == {
        key(0): 150,
        key(1): 150,
        key(2): 100,
        key(3): 100,
        key(4): None,
    }


def test_a_follower_rate_bounds_what_every_leader_pushes_to_that_node() -> None:
    copies = {key(0): Copy(True, frozenset({4})), key(1): Copy(True, frozenset({5}))}
    # Node 4 takes 1000 B/s in all; the image moves four partitions onto it.
    assert rates(copies, followers={4: 1000}, moving_onto={4: 4}) == {key(0): 250, key(1): None}
    # With a leader rate too, each partition takes the least of its shares.
    assert rates(copies, leader=400, followers={4: 1000}, moving_onto={4: 1}) == {
        key(0): 200,
        key(1): 200,
    }
    # A copy that lost its log is moved by no command: this leader counts its own.
    lost = {key(0): Copy(True, frozenset({4})), key(1): Copy(True, frozenset({4}))}
    assert rates(lost, followers={4: 1000}) == {key(0): 500, key(1): 500}


def test_a_rate_never_drops_below_one_byte_a_second() -> None:
    copies = {key(p): Copy(True, frozenset({4})) for p in range(3)}
    assert set(rates(copies, leader=2).values()) == {1}


# ---------------------------------------------------------------------- the node ------
class FakeRunner:
    """A runner's status and the inputs it was handed."""

    def __init__(self, status: Any) -> None:
        self.state = status
        self.handed: list[Any] = []

    def status(self) -> Any:
        return self.state

    def submit(self, command: Any) -> None:
        self.handed.append(command)


def status(role: Role, *, learners: tuple[int, ...] = ()) -> Any:
    """A status of node 1's copy of a partition on nodes 1-3, and `learners` besides."""
    voters = tuple(ReplicaKey(NodeId(n), DirectoryId(n)) for n in (1, 2, 3))
    followers = tuple(
        FollowerStatus(NodeId(n), DirectoryId(n), n not in learners, None, None)
        for n in (2, 3, *learners)
    )
    return SimpleNamespace(
        node_id=NodeId(1),
        role=role,
        replicas=tuple(NodeId(n) for n in (1, 2, 3, *learners)),
        voters=voters,
        followers=followers if role is Role.LEADER else (),
    )


def test_each_runner_is_handed_its_rate_once_and_again_when_it_changes() -> None:
    log = Log()
    host = SimpleNamespace(
        node_id=NodeId(1),
        image=log.image,
        metadata_key=PartitionKey("__cluster_metadata", 0),
        runners={
            PartitionKey("__cluster_metadata", 0): FakeRunner(status(Role.LEADER)),
            key(0): FakeRunner(status(Role.LEADER, learners=(4,))),
            key(1): FakeRunner(status(Role.FOLLOWER, learners=(4,))),
        },
    )
    throttles = ReplicationThrottles(host)
    throttles.refresh()
    assert not any(runner.handed for runner in host.runners.values())  # nothing set
    log.set("", leader_replication_throttled_rate="1000")
    throttles.on_change(log.changes[-1])
    throttles.flush()
    throttles.refresh()  # nothing changed: nothing handed again
    handed = {k: [c.bytes_per_s for c in r.handed] for k, r in host.runners.items()}
    assert handed == {PartitionKey("__cluster_metadata", 0): [], key(0): [1000], key(1): [500]}
    log.set("1", leader_replication_throttled_rate="9223372036854775807")
    throttles.on_change(log.changes[-1])
    throttles.flush()
    assert [c.bytes_per_s for c in host.runners[key(0)].handed] == [1000, None]
    host.runners[key(0)] = FakeRunner(status(Role.LEADER))  # opened again: handed anew
    throttles.refresh()
    assert [c.bytes_per_s for c in host.runners[key(0)].handed] == [None]
    log.set("")
    log.set("1")
    throttles.refresh()
    throttles.refresh()
    assert throttles.handed == {}  # no rate set, none handed: nothing to keep


def test_a_replica_started_again_keeps_the_settings_its_runner_was_handed(
    tmp_path: Path,
) -> None:
    config = ReplicaConfig(NodeId(1), (NodeId(1),), tick_ms=10)
    storage = DiskStorage(str(tmp_path / "t-0"), clock=lambda: 0, config=WalConfig())
    executor = ThreadPoolExecutor(max_workers=1)
    runner = PartitionRunner(
        PartitionKey("t", 0),
        storage,
        open_replica=lambda storage: Replica(config, storage, random.Random(1)),
        send=lambda key, messages: None,
        executor=executor,
        fatal=lambda error: None,
        disk=DiskHealth(),
    )
    try:
        runner._step(SetThrottle(5000))
        runner._step(SetMinInsync(1))
        runner._restart(storage, StorageError("started again"))
        assert runner.replica.config.throttle_bytes_per_s == 5000
        assert runner.replica.config.min_insync_replicas == 1
    finally:
        storage.close()
        executor.shutdown()
