"""TLS of a secured cluster: the contexts of peer links (mutual TLS) and the node id a
peer's certificate names.

Rules of this file:
- A peer link is mutual TLS: both ends present a certificate signed by the cluster's CA
  (`ssl_ca`), TLS 1.2 or newer. Host names are not what identifies a peer: its node id is,
  as the URI `urn:tidelog:node:<id>` in the certificate's subject alternative names
  (`tidelog.tools.certs` writes it). A node refuses a stream whose certificate names
  another node than the one the stream claims (the dialled peer, or the handshake's id).
- The files are read once, at start-up (`peer_contexts`), and a broken file is a
  ConfigError that names it: a broker never starts half-secured.
"""

from __future__ import annotations

import ssl
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from tidelog.errors import TidelogError

NODE_URI_PREFIX = "urn:tidelog:node:"


class TlsError(TidelogError):
    """A certificate, key or CA file cannot be used."""


@dataclass(frozen=True, slots=True)
class TlsFiles:
    ca: Path
    cert: Path
    key: Path


@dataclass(frozen=True, slots=True)
class PeerContexts:
    """The two sides of a peer link: the server others dial, the client that dials."""

    server: ssl.SSLContext
    client: ssl.SSLContext


def _context(purpose: int, files: TlsFiles) -> ssl.SSLContext:
    context = ssl.SSLContext(purpose)
    context.minimum_version = ssl.TLSVersion.TLSv1_2
    try:
        context.load_cert_chain(files.cert, files.key)
    except FileNotFoundError as error:
        raise TlsError(f"{error.filename}: no such file") from None
    except ssl.SSLError as error:
        raise TlsError(
            f"{files.cert} with {files.key}: not a certificate and its key ({error.reason})"
        ) from None
    try:
        context.load_verify_locations(cafile=files.ca)
    except FileNotFoundError:
        raise TlsError(f"{files.ca}: no such file") from None
    except ssl.SSLError as error:
        raise TlsError(f"{files.ca}: not a CA certificate ({error.reason})") from None
    context.verify_mode = ssl.CERT_REQUIRED
    return context


def peer_contexts(files: TlsFiles) -> PeerContexts:
    """Mutual TLS both ways, against the cluster's CA; TlsError naming a bad file."""
    server = _context(ssl.PROTOCOL_TLS_SERVER, files)
    client = _context(ssl.PROTOCOL_TLS_CLIENT, files)
    client.check_hostname = False  # a peer is known by the node id in its certificate
    return PeerContexts(server, client)


def listener_context(files: TlsFiles, client_auth: str) -> ssl.SSLContext:
    """A Kafka listener's TLS (SSL, SASL_SSL): the node's certificate; client certificates
    (signed by the cluster's CA) not asked for, requested, or required (Kafka's
    ssl.client.auth = none | requested | required)."""
    context = _context(ssl.PROTOCOL_TLS_SERVER, files)
    context.verify_mode = {
        "none": ssl.CERT_NONE,
        "requested": ssl.CERT_OPTIONAL,
        "required": ssl.CERT_REQUIRED,
    }[client_auth]
    return context


def admin_context(files: TlsFiles) -> ssl.SSLContext:
    """The admin endpoint's HTTPS: the node's certificate, no client certificate."""
    return listener_context(files, "none")


def node_id_of(certificate: dict[str, Any] | None) -> int | None:
    """The node id a verified peer certificate names (`getpeercert()`), or None."""
    if not certificate:
        return None
    found = {
        value.removeprefix(NODE_URI_PREFIX)
        for kind, value in certificate.get("subjectAltName", ())
        if kind == "URI" and value.startswith(NODE_URI_PREFIX)
    }
    if len(found) != 1:
        return None
    text = found.pop()
    return int(text) if text.isdigit() else None
