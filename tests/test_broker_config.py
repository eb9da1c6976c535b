"""The broker's configuration: address forms, TOML file under flags, and every error message.

Errors are checked through `tidelog broker` itself: a bad value exits 2 before the broker
would start. The broker's `run` is replaced by a recorder; the real one is never called here.
"""

from __future__ import annotations

import logging
from pathlib import Path

import pytest
from click.testing import CliRunner

from tidelog.cli import main
from tidelog.errors import ConfigError
from tidelog.server.config import (
    BrokerConfig,
    format_peers,
    load_config,
    parse_address,
    parse_peers,
)
from tidelog.tools import broker_cmd

PEERS = "1@127.0.0.1:9201,2@127.0.0.1:9202,3@127.0.0.1:9203"


def flags(**values: object) -> dict[str, object]:
    """The flags of node 2 of a three-node cluster, with `values` replaced."""
    base: dict[str, object] = {
        "node_id": 2,
        "data_dir": "/tmp/tidelog-config-test/node-2",
        "listen": "127.0.0.1:9093",
        "peers": PEERS,
    }
    return base | values


def test_address_and_peer_list_forms() -> None:
    assert parse_address("127.0.0.1:9092", name="--listen") == ("127.0.0.1", 9092)
    assert parse_address("[::1]:9092", name="--listen") == ("::1", 9092)
    assert parse_address(" broker-1.local:1 ", name="--listen") == ("broker-1.local", 1)
    peers = parse_peers(PEERS, name="--peers")
    assert peers == {1: ("127.0.0.1", 9201), 2: ("127.0.0.1", 9202), 3: ("127.0.0.1", 9203)}
    assert format_peers(peers) == PEERS


def test_flags_alone_give_the_defaults() -> None:
    config = load_config(flags(), None)
    assert config.node_id == 2
    assert config.data_dir == Path("/tmp/tidelog-config-test/node-2")
    assert config.listen == ("127.0.0.1", 9093)
    assert config.peer_listen == ("127.0.0.1", 9202)  # this node's --peers entry
    assert config.admin_listen is None
    assert (config.cluster_id, config.tick_ms, config.election_ticks) == ("tidelog", 50, 10)
    assert (config.heartbeat_ticks, config.default_partitions) == (2, 1)
    assert config.default_replication_factor == 3
    assert (config.fsync, config.flush_interval_ms, config.log_level) == (True, None, "info")
    assert config.log_format == "text"


def test_replication_factor_defaults_to_at_most_three() -> None:
    one = load_config(flags(node_id=1, peers="1@127.0.0.1:9201"), None)
    assert one.default_replication_factor == 1
    five = ",".join(f"{n}@127.0.0.1:{9200 + n}" for n in range(1, 6))
    assert load_config(flags(peers=five), None).default_replication_factor == 3


def test_file_values_under_flags(tmp_path: Path) -> None:
    path = tmp_path / "broker.toml"
    path.write_text(
        'node_id = 1\ndata_dir = "/tmp/tidelog-config-test/node-1"\n'
        'listen = "127.0.0.1:9092"\nadmin_listen = "127.0.0.1:9292"\n'
        "tick_ms = 20\nfsync = false\nflush_interval_ms = 100\n"
        'log_level = "DEBUG"\nlog_format = "JSON"\n'
        '[peers]\n"1" = "127.0.0.1:9201"\n"2" = "127.0.0.1:9202"\n'
    )
    config = load_config({"tick_ms": 30, "election_ticks": None}, path)
    assert config.node_id == 1
    assert config.tick_ms == 30  # the flag wins
    assert config.admin_listen == ("127.0.0.1", 9292)
    assert config.peers == {1: ("127.0.0.1", 9201), 2: ("127.0.0.1", 9202)}
    assert (config.fsync, config.flush_interval_ms, config.log_level) == (False, 100, "debug")
    assert config.log_format == "json"
    assert config.default_replication_factor == 2


def test_the_dataclass_checks_itself() -> None:
    with pytest.raises(ConfigError, match="--peers: node 9 is not listed"):
        BrokerConfig(
            node_id=9,
            data_dir=Path("/tmp/x"),
            listen=("127.0.0.1", 9092),
            peer_listen=("127.0.0.1", 9201),
            peers={1: ("127.0.0.1", 9201)},
        )


BAD_FLAGS = [
    (["--node-id", "4"], "error: --peers: node 4 is not listed (nodes: 1, 2, 3)"),
    (["--listen", "127.0.0.1:70000"], "error: --listen: port 70000 is out of range (1-65535)"),
    (["--listen", "127.0.0.1"], "error: --listen: '127.0.0.1' is not HOST:PORT"),
    (["--listen", ":9092"], "error: --listen: ':9092' is not HOST:PORT"),
    (["--listen", "127.0.0.1:http"], "error: --listen: port 'http' is not a number"),
    (
        ["--peer-listen", "127.0.0.1:9201"],
        "error: --node-id 2 but --peer-listen 127.0.0.1:9201 differs from its --peers entry "
        "127.0.0.1:9202",
    ),
    (["--peers", "1@127.0.0.1:9201,1@127.0.0.1:9202"], "error: --peers: node 1 is listed twice"),
    (["--peers", "127.0.0.1:9201"], "error: --peers: '127.0.0.1:9201' is not ID@HOST:PORT"),
    (["--peers", "x@127.0.0.1:9201"], "error: --peers: node id 'x' is not a non-negative"),
    (
        ["--peers", "1@127.0.0.1:9201,2@127.0.0.1:9201"],
        "error: --peers: nodes 1 and 2 share 127.0.0.1:9201",
    ),
    (["--listen", "127.0.0.1:9202"], "error: --peer-listen 127.0.0.1:9202 is also --listen"),
    (["--admin-listen", "127.0.0.1:9093"], "error: --admin-listen 127.0.0.1:9093 is also"),
    (
        ["--listen", "0.0.0.0:9093"],
        "error: --listen PLAINTEXT://0.0.0.0:9093 binds every address: name the one clients "
        "reach in --advertised-listen PLAINTEXT://HOST:PORT",
    ),
    (
        ["--listen", "[::]:9093"],
        "error: --listen PLAINTEXT://[::]:9093 binds every address: name the one",
    ),
    (
        ["--advertised-listen", "0.0.0.0:9093"],
        "error: --advertised-listen PLAINTEXT://0.0.0.0:9093: 0.0.0.0 names no host a client "
        "can reach",
    ),
    (
        ["--advertised-listen", "SSL://10.0.0.2:9093"],
        "error: --advertised-listen SSL://10.0.0.2:9093: --listen has no SSL listener",
    ),
    (
        ["--advertised-listen", "10.0.0.2:9093,PLAINTEXT://b:1"],
        "error: --advertised-listen: PLAINTEXT is listed twice (one entry each)",
    ),
    (["--advertised-listen", "10.0.0.2"], "error: --advertised-listen: '10.0.0.2' is not HOST"),
    (["--advertised-listen", "TLS://a:1"], "error: --advertised-listen: 'TLS' is not one of"),
    (
        ["--peers", "1@127.0.0.1:9201,2@127.0.0.1:9202,3@0.0.0.0:9203"],
        "error: --peers: node 3 at 0.0.0.0:9203: 0.0.0.0 names no host another node can dial",
    ),
    (
        ["--peer-listen", "0.0.0.0:9201"],
        "error: --node-id 2 but --peer-listen 0.0.0.0:9201 differs from its --peers entry "
        "127.0.0.1:9202",
    ),
    (["--tick-ms", "0"], "error: --tick-ms: 0 is out of range (1-10000)"),
    (["--election-ticks", "2"], "error: --heartbeat-ticks 2 must be less than --election-ticks"),
]


@pytest.fixture
def run_calls(monkeypatch: pytest.MonkeyPatch) -> list[BrokerConfig]:
    """Stands in for tidelog.server.app.run: records the config, returns 0."""
    calls: list[BrokerConfig] = []

    def fake_run(config: BrokerConfig) -> int:
        calls.append(config)
        return 0

    monkeypatch.setattr(broker_cmd, "load_broker_run", lambda: fake_run)
    # The command configures logging for the broker; keep the test runner's logging as is.
    monkeypatch.setattr(logging, "basicConfig", lambda **_: None)
    return calls


def invoke(args: list[str]) -> tuple[int, str]:
    result = CliRunner().invoke(main, ["broker", *args])
    return result.exit_code, result.stderr


def base_args() -> list[str]:
    node = ["--node-id", "2", "--data-dir", "/tmp/tidelog-config-test/node-2"]
    return [*node, "--listen", "127.0.0.1:9093", "--peers", PEERS]


@pytest.mark.parametrize(("extra", "message"), BAD_FLAGS)
def test_bad_flags_exit_2_with_a_clear_message(
    extra: list[str], message: str, run_calls: list[BrokerConfig]
) -> None:
    code, stderr = invoke(base_args() + extra)
    assert code == 2
    assert stderr.startswith(message)
    assert run_calls == []


def test_valid_flags_reach_the_broker(run_calls: list[BrokerConfig]) -> None:
    extra = ["--admin-listen", "127.0.0.1:9292", "--tick-ms", "10", "--log-level", "WARNING"]
    code, stderr = invoke(base_args() + extra)
    assert (code, stderr) == (0, "")
    [config] = run_calls
    assert config.admin_listen == ("127.0.0.1", 9292)
    assert (config.tick_ms, config.log_level) == (10, "warning")


def test_a_listener_on_every_address_advertises_the_one_clients_reach(
    tmp_path: Path, run_calls: list[BrokerConfig]
) -> None:
    peers = "1@10.0.0.1:9192,2@10.0.0.2:9192,3@broker-3.example.com:9192"
    path = tmp_path / "node-2.toml"
    path.write_text(
        'node_id = 2\ndata_dir = "/tmp/tidelog-config-test/node-2"\n'
        'listen = "PLAINTEXT://0.0.0.0:9092,SASL_PLAINTEXT://[::]:9094"\n'
        'advertised_listen = "PLAINTEXT://10.0.0.2:9092,'
        'SASL_PLAINTEXT://broker-2.example.com:19094"\n'
        f'peer_listen = "0.0.0.0:9192"\npeers = "{peers}"\n'
    )
    config = load_config({}, path)
    assert config.peer_listen == ("0.0.0.0", 9192)  # binds every address, on its entry's port
    assert config.peers[2] == ("10.0.0.2", 9192)  # where the others dial it
    assert [str(listener) for listener in config.listeners] == [
        "PLAINTEXT://0.0.0.0:9092",
        "SASL_PLAINTEXT://[::]:9094",
    ]
    assert [str(listener) for listener in config.advertised_listeners] == [
        "PLAINTEXT://10.0.0.2:9092",
        "SASL_PLAINTEXT://broker-2.example.com:19094",
    ]
    # Without advertised_listen, a listener is advertised where it listens.
    two = "10.0.0.2:9092,SASL_PLAINTEXT://10.0.0.2:9094"
    plain = load_config(flags(listen=two), None)
    assert plain.advertised_listeners == plain.listeners
    # Only SASL_PLAINTEXT named: PLAINTEXT keeps its own address.
    one = load_config(flags(listen=two, advertised_listen="SASL_PLAINTEXT://b:1"), None)
    assert [str(listener) for listener in one.advertised_listeners] == [
        "PLAINTEXT://10.0.0.2:9092",
        "SASL_PLAINTEXT://b:1",
    ]
    code, stderr = invoke([*base_args(), "--advertised-listen", "broker-2:9093"])
    assert (code, stderr) == (0, "")
    assert [str(listener) for listener in run_calls[0].advertised_listeners] == [
        "PLAINTEXT://broker-2:9093"
    ]


def test_the_log_format_flag_takes_text_or_json_and_names_itself_when_wrong(
    run_calls: list[BrokerConfig],
) -> None:
    code, stderr = invoke([*base_args(), "--log-format", "xml"])
    assert code == 2
    assert "--log-format" in stderr and "'xml' is not one of 'text', 'json'" in stderr
    assert run_calls == []
    assert invoke([*base_args(), "--log-format", "JSON"]) == (0, "")
    assert [config.log_format for config in run_calls] == ["json"]
    with pytest.raises(ConfigError, match=r"^--log-format: 'yaml' is not one of"):
        load_config(flags(log_format="yaml"), None)  # a value that did not come through click


def test_a_missing_required_flag_names_both_sources(run_calls: list[BrokerConfig]) -> None:
    code, stderr = invoke(["--node-id", "1", "--peers", "1@127.0.0.1:9201"])
    assert code == 2
    assert stderr == "error: --data-dir is required (a flag, or `data_dir` in --config)\n"


BAD_FILES = [
    ("foo = 1\n", "error: unknown key 'foo' in {path}"),
    ("node_id = \n", "error: --config: {path} is not valid TOML: "),
    ('tick_ms = "fast"\n', "error: tick_ms in {path}: expected int, got str 'fast'"),
    ("fsync = 1\n", "error: fsync in {path}: expected bool, got int 1"),
    ('admin_listen = "127.0.0.1:0"\n', "error: admin_listen in {path}: port 0 is out of"),
    ("flush_interval_ms = 5\n", "error: --flush-interval-ms applies only with fsync = false"),
    ('cluster_id = "a b"\n', "error: --cluster-id: 'a b' must be 1-64 letters"),
    ("heartbeat_ticks = 10\n", "error: --heartbeat-ticks 10 must be less than"),
    ("default_replication_factor = 4\n", "error: --default-replication-factor: 4 is out of"),
    ('log_format = "xml"\n', "error: --log-format: 'xml' is not one of ('text', 'json')"),
    ("log_format = 1\n", "error: log_format in {path}: expected str, got int 1"),
    ("group_max_size = 0\n", "error: --group-max-size: 0 is out of range (1-2147483647)"),
]


@pytest.mark.parametrize(("text", "message"), BAD_FILES)
def test_bad_config_files_exit_2_with_a_clear_message(
    text: str, message: str, tmp_path: Path, run_calls: list[BrokerConfig]
) -> None:
    path = tmp_path / "config.toml"
    path.write_text(text)
    code, stderr = invoke([*base_args(), "--config", str(path)])
    assert code == 2
    assert stderr.startswith(message.format(path=path))
    assert run_calls == []


def test_a_missing_config_file_or_a_file_as_data_dir(
    tmp_path: Path, run_calls: list[BrokerConfig]
) -> None:
    missing = tmp_path / "nope.toml"
    assert invoke([*base_args(), "--config", str(missing)]) == (
        2,
        f"error: --config: {missing}: no such file\n",
    )
    a_file = tmp_path / "file"
    a_file.write_text("")
    assert invoke([*base_args(), "--data-dir", str(a_file)]) == (
        2,
        f"error: --data-dir: {a_file} exists and is not a directory\n",
    )


def test_auto_create_topics_and_kafka_s_name_for_the_partition_default(
    tmp_path: Path, run_calls: list[BrokerConfig]
) -> None:
    assert load_config(flags(), None).auto_create_topics_enable is False  # off by default
    path = tmp_path / "c.toml"
    path.write_text("auto_create_topics_enable = true\nnum_partitions = 4\n")
    config = load_config(flags(), path)
    assert (config.auto_create_topics_enable, config.default_partitions) == (True, 4)
    path.write_text("num_partitions = 4\ndefault_partitions = 2\n")
    with pytest.raises(ConfigError, match="default_partitions and num_partitions are the same"):
        load_config(flags(), path)
    path.write_text('auto_create_topics_enable = "yes"\n')
    with pytest.raises(ConfigError, match=r"auto_create_topics_enable in .*: expected bool"):
        load_config(flags(), path)
    extra = ["--auto-create-topics-enable", "--num-partitions", "3"]
    code, stderr = invoke([*base_args(), *extra, "--default-replication-factor", "2"])
    assert (code, stderr) == (0, "")
    [config] = run_calls
    assert config.auto_create_topics_enable is True
    assert (config.default_partitions, config.default_replication_factor) == (3, 2)
    code, stderr = invoke([*base_args(), "--num-partitions", "0"])
    assert code == 2 and "partitions: 0 is out of range (1-10000)" in stderr
