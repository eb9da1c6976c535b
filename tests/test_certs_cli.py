"""`tidelog certs`: a cluster's CA, node and client certificates and the admin token, for
brokers on machines of their own (docs/deploy.md). The certificates themselves are checked
where they are used: tests/test_multihost.py runs a cluster on them, over SSL and mutual TLS.
"""

from __future__ import annotations

import ipaddress
import stat
from pathlib import Path

from click.testing import CliRunner
from cryptography import x509

from tidelog.cli import main


def certs(*args: str) -> tuple[int, str, str]:
    result = CliRunner().invoke(main, ["certs", *args])
    return result.exit_code, result.stdout, result.stderr


def test_a_ca_then_a_node_naming_its_hosts_a_client_and_a_token(tmp_path: Path) -> None:
    out = tmp_path / "certs"
    assert certs("ca", "--dir", str(out), "--cluster", "prod") == (
        0,
        f"{out}/ca.crt\n{out}/ca.key\n",
        "",
    )
    hosts = ["--host", "10.0.0.1", "--host", "broker-1.example.com", "--host", "fd00::1"]
    code, stdout, _ = certs("node", "--dir", str(out), "--node-id", "1", *hosts)
    assert (code, stdout) == (0, f"{out}/node-1.crt\n{out}/node-1.key\n")
    names = (
        x509.load_pem_x509_certificate((out / "node-1.crt").read_bytes())
        .extensions.get_extension_for_class(x509.SubjectAlternativeName)
        .value
    )
    assert names.get_values_for_type(x509.IPAddress) == [
        ipaddress.ip_address("10.0.0.1"),
        ipaddress.ip_address("fd00::1"),
    ]
    assert names.get_values_for_type(x509.DNSName) == ["broker-1.example.com"]
    assert names.get_values_for_type(x509.UniformResourceIdentifier) == ["urn:tidelog:node:1"]
    code, stdout, _ = certs("client", "--dir", str(out), "--name", "ops")
    assert (code, stdout) == (
        0,
        f"{out}/ops.crt\n{out}/ops.key\nprincipal: User:CN=ops,O=tidelog cluster prod\n",
    )
    assert certs("token", "--dir", str(out)) == (0, f"{out}/admin.token\n", "")
    assert len((out / "admin.token").read_text().strip()) >= 16  # the brokers' minimum
    for name in ("ca.key", "node-1.key", "ops.key", "admin.token"):
        assert stat.S_IMODE((out / name).stat().st_mode) == 0o600


def test_nothing_is_overwritten_and_a_node_needs_the_ca(tmp_path: Path) -> None:
    out = tmp_path / "certs"
    assert certs("node", "--dir", str(out), "--node-id", "1", "--host", "h")[::2] == (
        1,
        f"error: {out} holds no ca.crt: make it with `certs ca`\n",
    )
    assert certs("ca", "--dir", str(out))[0] == 0
    key = (out / "ca.key").read_bytes()
    assert certs("ca", "--dir", str(out))[::2] == (
        1,
        f"error: {out}/ca.key exists: not overwritten\n",
    )
    assert (out / "ca.key").read_bytes() == key
    assert certs("ca", "--dir", str(tmp_path / "other"), "--cluster", "a b")[::2] == (
        1,
        "error: --cluster: 'a b' is not letters, digits, '.', '_' or '-'\n",
    )
