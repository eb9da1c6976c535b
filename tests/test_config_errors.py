"""One style of configuration checking everywhere (tidelog.errors): every config refuses a bad
value on construction with ConfigError, in one line naming the setting, the value and what
is allowed, never an assert (which -O drops); a command-line tool prints it and exits
non-zero."""

from __future__ import annotations

import re
from collections.abc import Callable
from pathlib import Path

import pytest
from click.testing import CliRunner

from tidelog.cli import main
from tidelog.client_config import ClientConfigError, security_of
from tidelog.core.isr import IsrConfig
from tidelog.core.replica import ReplicaConfig
from tidelog.errors import ConfigError, TidelogError, check_range
from tidelog.groups.messages import GroupConfig
from tidelog.server.config import load_config
from tidelog.spark.options import SparkOptionError, parse_sink_options
from tidelog.types import NodeId
from tidelog.wal.log import WalConfig

N1, N2, N3 = NodeId(1), NodeId(2), NodeId(3)
NODES = (N1, N2, N3)
PEERS = "1@127.0.0.1:9201,2@127.0.0.1:9202,3@127.0.0.1:9203"

# (what is built, the exact message)
BAD_CONFIGS: list[tuple[Callable[[], object], str]] = [
    (
        lambda: WalConfig(segment_bytes=0),
        "WalConfig.segment_bytes: 0 is out of range (1-2147483647)",
    ),
    (lambda: WalConfig(segment_ms=0), "WalConfig.segment_ms: 0 is out of range (1 or more)"),
    (
        lambda: WalConfig(index_interval_bytes=-1),
        "WalConfig.index_interval_bytes: -1 is out of range (1 or more)",
    ),
    (
        lambda: WalConfig(retention_bytes=-5),
        "WalConfig.retention_bytes: -5 is out of range (0 or more)",
    ),
    (lambda: WalConfig(retention_ms=-1), "WalConfig.retention_ms: -1 is out of range (0 or more)"),
    (
        lambda: WalConfig(flush_interval_ms=-1),
        "WalConfig.flush_interval_ms: -1 is out of range (0 or more)",
    ),
    (
        lambda: WalConfig(hwm_checkpoint_interval_ms=-1),
        "WalConfig.hwm_checkpoint_interval_ms: -1 is out of range (0 or more)",
    ),
    (
        lambda: ReplicaConfig(NodeId(4), NODES),
        "ReplicaConfig.node_id: 4 is not among the replicas (1, 2, 3)",
    ),
    (
        lambda: ReplicaConfig(N1, (N1, N1)),
        "ReplicaConfig.replicas: (1, 1) name a node twice",
    ),
    (
        lambda: ReplicaConfig(N1, NODES, heartbeat_ticks=0),
        "ReplicaConfig.heartbeat_ticks: 0 is out of range (1 or more)",
    ),
    (
        lambda: ReplicaConfig(N1, NODES, election_ticks=4, heartbeat_ticks=2),
        "ReplicaConfig.election_ticks: 4 must exceed heartbeat_ticks 2 by the lease margin 2",
    ),
    (
        lambda: ReplicaConfig(N1, NODES, tick_ms=0),
        "ReplicaConfig.tick_ms: 0 is out of range (1 or more)",
    ),
    (
        lambda: ReplicaConfig(N1, NODES, min_insync_replicas=4),
        "ReplicaConfig.min_insync_replicas (min.insync.replicas): 4 is out of range (1-3)",
    ),
    (
        lambda: ReplicaConfig(N1, NODES, inflight_appends_max=0),
        "ReplicaConfig.inflight_appends_max: 0 is out of range (1 or more)",
    ),
    (
        lambda: ReplicaConfig(N1, NODES, append_bytes_max=0),
        "ReplicaConfig.append_bytes_max: 0 is out of range (1 or more)",
    ),
    (
        lambda: ReplicaConfig(N1, NODES, produce_timeout_ticks=0),
        "ReplicaConfig.produce_timeout_ticks: 0 is out of range (1 or more)",
    ),
    (
        lambda: ReplicaConfig(N1, NODES, pending_produces_max=0),
        "ReplicaConfig.pending_produces_max: 0 is out of range (1 or more)",
    ),
    (
        lambda: ReplicaConfig(N1, NODES, replica_lag_time_max_ms=0),
        "ReplicaConfig.replica_lag_time_max_ms: 0 is out of range (1 or more)",
    ),
    (lambda: IsrConfig(min_insync=0), "IsrConfig.min_insync: 0 is out of range (1 or more)"),
    (
        lambda: IsrConfig(replica_lag_time_max_ms=0),
        "IsrConfig.replica_lag_time_max_ms: 0 is out of range (1 or more)",
    ),
    (
        lambda: GroupConfig(session_timeout_ms_min=0),
        "GroupConfig.session_timeout_ms_min: 0 is out of range (1 or more)",
    ),
    (
        lambda: GroupConfig(session_timeout_ms_min=100, session_timeout_ms_max=50),
        "GroupConfig.session_timeout_ms_max: 50 is out of range (100 or more)",
    ),
    (
        lambda: GroupConfig(initial_rebalance_delay_ms=-1),
        "GroupConfig.initial_rebalance_delay_ms: -1 is out of range (0 or more)",
    ),
    (
        lambda: GroupConfig(group_max_size=0),
        "GroupConfig.group_max_size: 0 is out of range (1 or more)",
    ),
    (
        lambda: GroupConfig(offsets_retention_ms=0),
        "GroupConfig.offsets_retention_ms: 0 is out of range (1 or more)",
    ),
    (
        lambda: GroupConfig(offsets_retention_check_interval_ms=0),
        "GroupConfig.offsets_retention_check_interval_ms: 0 is out of range (1 or more)",
    ),
    (
        lambda: GroupConfig(commit_timeout_ms=0),
        "GroupConfig.commit_timeout_ms: 0 is out of range (1 or more)",
    ),
    (
        lambda: load_config(
            {
                "node_id": 2,
                "data_dir": "/tmp/x",
                "listen": "127.0.0.1:9093",
                "peers": PEERS,
                "tick_ms": 0,
            },
            None,
        ),
        "--tick-ms: 0 is out of range (1-10000)",
    ),
]


@pytest.mark.parametrize(("build", "message"), BAD_CONFIGS)
def test_a_bad_value_of_each_config_is_a_config_error_naming_it(
    build: Callable[[], object], message: str
) -> None:
    with pytest.raises(ConfigError, match=f"^{re.escape(message)}$"):
        build()


def test_the_defaults_are_valid() -> None:
    assert WalConfig().segment_bytes > 0
    assert len(ReplicaConfig(N1, NODES).first_voters) == len(NODES)
    assert IsrConfig().min_insync == 1
    assert GroupConfig().session_timeout_ms_min <= GroupConfig().session_timeout_ms_max


def test_client_and_spark_errors_are_config_errors() -> None:
    with pytest.raises(
        ConfigError, match=r"^security\.protocol=gopher: not one of PLAINTEXT"
    ) as client:
        security_of({"security.protocol": "gopher"})
    assert isinstance(client.value, ClientConfigError)
    with pytest.raises(ConfigError, match=r"kafka\.bootstrap\.servers") as spark:
        parse_sink_options({})
    assert isinstance(spark.value, SparkOptionError)


def test_a_config_error_is_a_tidelog_error_and_a_value_error() -> None:
    error = ConfigError("x: 1 is out of range (2 or more)")
    assert isinstance(error, TidelogError)
    assert isinstance(error, ValueError)


def test_check_range_bounds_are_inclusive() -> None:
    check_range("a", 1, 1, 1)
    check_range("b", 5, 0)
    with pytest.raises(ConfigError, match=r"^c: 3 is out of range \(0-2\)$"):
        check_range("c", 3, 0, 2)


def test_a_bad_broker_flag_prints_what_is_wrong_and_exits_non_zero() -> None:
    node = ["--node-id", "2", "--data-dir", "/tmp/tidelog-config-test/node-2"]
    flags = [*node, "--listen", "127.0.0.1:9093", "--peers", PEERS, "--tick-ms", "0"]
    result = CliRunner().invoke(main, ["broker", *flags])
    assert result.exit_code != 0
    assert result.stderr == "error: --tick-ms: 0 is out of range (1-10000)\n"


def test_a_bad_client_setting_prints_what_is_wrong_and_exits_non_zero(tmp_path: Path) -> None:
    bad = tmp_path / "bad.properties"
    bad.write_text("security.protocol=gopher\n")
    result = CliRunner().invoke(main, ["topics", "list", "--command-config", str(bad)])
    assert result.exit_code != 0
    assert result.stderr.startswith(
        f"error: --command-config {bad}: security.protocol=gopher: not one of"
    ), result.stderr
