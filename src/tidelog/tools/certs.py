"""The certificates of a secured cluster, made with the `cryptography` library: a CA of
the cluster, one certificate per node naming its node id, and client certificates.

Rules of this file:
- A node's certificate carries its id twice: as the URI `urn:tidelog:node:<id>` in its
  subject alternative names (what peers check, `tidelog.server.tls.node_id_of`) and in its
  common name (`tidelog node <id>`, for people). It also names the hosts it serves, so
  clients that check host names accept it.
- Keys are written with mode 0600, before anything is in them; nothing overwrites an
  existing file (a second `init` in the same directory is refused).
- ECDSA P-256 keys, SHA-256 signatures; certificates are valid from an hour ago (clocks
  differ) for `days`.
"""

from __future__ import annotations

import datetime
import ipaddress
import os
from dataclasses import dataclass
from pathlib import Path

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

from tidelog.errors import TidelogError

NODE_URI_PREFIX = "urn:tidelog:node:"
DAYS_DEFAULT = 825
CA_NAME = "ca"


class CertError(TidelogError):
    """Certificates could not be made (an existing file, a bad name)."""


@dataclass(frozen=True, slots=True)
class Issued:
    """Where a certificate and its key were written."""

    cert: Path
    key: Path


def write_private(path: Path, data: bytes) -> None:
    """Write `data` to a new file of mode 0600 (refused when the file exists)."""
    try:
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    except FileExistsError:
        raise CertError(f"{path} exists: not overwritten") from None
    with os.fdopen(fd, "wb") as file:
        file.write(data)


def _key_bytes(key: ec.EllipticCurvePrivateKey) -> bytes:
    return key.private_bytes(
        serialization.Encoding.PEM,
        serialization.PrivateFormat.PKCS8,
        serialization.NoEncryption(),
    )


def _name(common_name: str, cluster: str) -> x509.Name:
    return x509.Name(
        [
            x509.NameAttribute(NameOID.ORGANIZATION_NAME, f"tidelog cluster {cluster}"),
            x509.NameAttribute(NameOID.COMMON_NAME, common_name),
        ]
    )


def _validity(
    days: int, now: datetime.datetime | None
) -> tuple[datetime.datetime, datetime.datetime]:
    start = (now or datetime.datetime.now(datetime.UTC)) - datetime.timedelta(hours=1)
    return start, start + datetime.timedelta(days=days)


def make_ca(directory: Path, cluster: str, *, days: int = DAYS_DEFAULT) -> Issued:
    """A new CA for the cluster in `directory` (ca.crt, ca.key)."""
    directory.mkdir(parents=True, exist_ok=True)
    key = ec.generate_private_key(ec.SECP256R1())
    name = _name(f"tidelog CA {cluster}", cluster)
    not_before, not_after = _validity(days, None)
    cert = (
        x509.CertificateBuilder()
        .subject_name(name)
        .issuer_name(name)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(not_before)
        .not_valid_after(not_after)
        .add_extension(x509.BasicConstraints(ca=True, path_length=0), critical=True)
        .add_extension(
            x509.KeyUsage(
                digital_signature=True,
                content_commitment=False,
                key_encipherment=False,
                data_encipherment=False,
                key_agreement=False,
                key_cert_sign=True,
                crl_sign=True,
                encipher_only=False,
                decipher_only=False,
            ),
            critical=True,
        )
        .add_extension(x509.SubjectKeyIdentifier.from_public_key(key.public_key()), critical=False)
        .sign(key, hashes.SHA256())
    )
    issued = Issued(directory / f"{CA_NAME}.crt", directory / f"{CA_NAME}.key")
    write_private(issued.key, _key_bytes(key))
    write_private(issued.cert, cert.public_bytes(serialization.Encoding.PEM))
    return issued


def load_ca(directory: Path) -> tuple[x509.Certificate, ec.EllipticCurvePrivateKey]:
    cert = x509.load_pem_x509_certificate((directory / f"{CA_NAME}.crt").read_bytes())
    key = serialization.load_pem_private_key((directory / f"{CA_NAME}.key").read_bytes(), None)
    if not isinstance(key, ec.EllipticCurvePrivateKey):
        raise CertError(f"{directory / CA_NAME}.key is not an EC key")
    return cert, key


def issue(
    directory: Path,
    name: str,
    *,
    common_name: str,
    node_id: int | None = None,
    hosts: tuple[str, ...] = ("127.0.0.1", "localhost"),
    days: int = DAYS_DEFAULT,
    now: datetime.datetime | None = None,
) -> Issued:
    """A certificate signed by the CA in `directory` (name.crt, name.key): a node's when
    `node_id` is given (server and client use, the node URI), else a client's."""
    ca_cert, ca_key = load_ca(directory)
    cluster = ca_cert.subject.get_attributes_for_oid(NameOID.ORGANIZATION_NAME)[0].value
    cluster_name = str(cluster).removeprefix("tidelog cluster ")
    key = ec.generate_private_key(ec.SECP256R1())
    not_before, not_after = _validity(days, now)
    alternative: list[x509.GeneralName] = []
    for host in hosts:
        try:
            alternative.append(x509.IPAddress(ipaddress.ip_address(host)))
        except ValueError:
            alternative.append(x509.DNSName(host))
    if node_id is not None:
        alternative.append(x509.UniformResourceIdentifier(f"{NODE_URI_PREFIX}{node_id}"))
    usages = [ExtendedKeyUsageOID.CLIENT_AUTH]
    if node_id is not None:
        usages.append(ExtendedKeyUsageOID.SERVER_AUTH)
    builder = (
        x509.CertificateBuilder()
        .subject_name(_name(common_name, cluster_name))
        .issuer_name(ca_cert.subject)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(not_before)
        .not_valid_after(not_after)
        .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
        .add_extension(x509.ExtendedKeyUsage(usages), critical=False)
        .add_extension(
            x509.AuthorityKeyIdentifier.from_issuer_public_key(ca_key.public_key()),
            critical=False,
        )
    )
    if alternative:
        builder = builder.add_extension(x509.SubjectAlternativeName(alternative), critical=False)
    cert = builder.sign(ca_key, hashes.SHA256())
    issued = Issued(directory / f"{name}.crt", directory / f"{name}.key")
    write_private(issued.key, _key_bytes(key))
    write_private(issued.cert, cert.public_bytes(serialization.Encoding.PEM))
    return issued


def issue_node(directory: Path, node_id: int, **kwargs: object) -> Issued:
    return issue(
        directory,
        f"node-{node_id}",
        common_name=f"tidelog node {node_id}",
        node_id=node_id,
        **kwargs,  # type: ignore[arg-type]
    )


def principal_of_file(path: Path) -> str:
    """The principal a broker gives the client certificate at `path`: its subject, as
    `server.session.principal_of` names a client certificate's; CertError when unreadable."""
    from tidelog.server.session import principal_of  # noqa: PLC0415 - a broker module

    try:
        certificate = x509.load_pem_x509_certificate(path.read_bytes())
    except (OSError, ValueError) as error:
        raise CertError(f"{path}: {error}") from None
    # The subject as ssl's getpeercert() gives it: ((("commonName", "..."),), ...).
    subject = tuple(((a.oid._name, str(a.value)),) for a in certificate.subject)
    return principal_of({"subject": subject})
