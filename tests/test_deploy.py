"""deploy/ and docs/deploy.md cannot drift from the broker: every settings file they hold
loads as `tidelog broker --config` loads it (the page's with certificates made as the page
makes them, where it puts them), the compose file mounts each node's and publishes the port
it advertises, and the image and the systemd unit run the broker on the file where the
settings go. (The page's shell blocks run in tests/test_docs.py; the brokers themselves run
on separate hosts in tests/test_multihost.py.)
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Final

from click.testing import CliRunner

from test_docs import blocks_of
from tidelog.cli import main
from tidelog.server.config import BrokerConfig, load_config

ROOT: Final = Path(__file__).resolve().parent.parent
DEPLOY: Final = ROOT / "deploy"
PAGE: Final = ROOT / "docs" / "deploy.md"
SETTINGS: Final = "/etc/tidelog/tidelog.toml"
NODES: Final = (1, 2, 3)


def test_the_compose_nodes_load_and_publish_what_they_advertise() -> None:
    compose = (DEPLOY / "compose.yaml").read_text()
    configs = [load_config({}, DEPLOY / "compose" / f"node-{node}.toml") for node in NODES]
    for node, config in zip(NODES, configs, strict=True):
        assert config.node_id == node
        assert config.peers == configs[0].peers  # the same on every node
        assert config.peers[node][0] == f"tidelog-{node}"
        [advertised] = config.advertised_listeners
        host, port = advertised.address
        assert host == f"tidelog-{node}"  # its name on the compose network
        assert config.listen == ("0.0.0.0", port)
        assert f"./compose/node-{node}.toml:{SETTINGS}:ro" in compose
        assert f'"{port}:{port}"' in compose
        assert config.data_dir == Path("/var/lib/tidelog")
        assert f"data-{node}:/var/lib/tidelog" in compose


def test_the_image_and_the_unit_run_the_broker_on_its_settings() -> None:
    dockerfile = (DEPLOY / "Dockerfile").read_text()
    assert 'ENTRYPOINT ["tidelog"]' in dockerfile
    assert f'CMD ["broker", "--config", "{SETTINGS}"]' in dockerfile
    unit = (DEPLOY / "tidelog.service").read_text()
    [start] = re.findall(r"^ExecStart=(.+)$", unit, flags=re.MULTILINE)
    assert start.split()[1:] == ["broker", "--config", SETTINGS]
    assert "StateDirectory=tidelog" in unit  # /var/lib/tidelog, the settings' data_dir
    # Exits that a restart cannot help: a bad setting, a disk that fails at start.
    assert "RestartPreventExitStatus=2 3" in unit


def make_certificates(directory: Path) -> None:
    """The page's certificates and token, made by `tidelog certs` as the page makes them."""
    runner = CliRunner()
    commands = [["ca", "--cluster", "orders-prod"], ["client", "--name", "ops"], ["token"]]
    commands += [
        ["node", "--node-id", str(n), "--host", f"broker-{n}.example.com", "--host", f"10.0.0.{n}"]
        for n in NODES
    ]
    for command in commands:
        result = runner.invoke(main, ["certs", command[0], "--dir", str(directory), *command[1:]])
        assert result.exit_code == 0, result.output


def page_settings(tmp_path: Path) -> list[BrokerConfig]:
    """Each settings block of the page, as its broker loads it, its files in `tmp_path`."""
    make_certificates(tmp_path / "etc")
    configs = []
    for index, block in enumerate(b for b in blocks_of(PAGE) if b.language == "toml"):
        path = tmp_path / f"settings-{index}.toml"
        text = block.text.replace("/etc/tidelog/", f"{tmp_path / 'etc'}/")
        path.write_text(text.replace("/var/lib/tidelog", str(tmp_path / "data")))
        configs.append(load_config({}, path))
    return configs


def test_the_page_s_settings_load_with_its_certificates(tmp_path: Path) -> None:
    [config] = page_settings(tmp_path)
    assert config.tls is not None  # peer links are mutual TLS
    assert config.listen == ("0.0.0.0", 9093)
    assert {str(listener) for listener in config.advertised_listeners} == {
        "SSL://broker-1.example.com:9093",
        "SASL_SSL://broker-1.example.com:9094",
    }
    assert config.peers == {node: (f"10.0.0.{node}", 9192) for node in NODES}
    assert config.super_users == "User:CN=ops,O=tidelog cluster orders-prod"  # `certs client`
