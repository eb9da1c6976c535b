"""Each client connection's session: its listener, its client's host, its principal, and
where its SASL exchange stands (set by the Kafka listener, read by the handlers).

Rules of this file:
- A principal is `User:NAME`: the SASL user, or a client certificate's subject on an SSL
  listener; `User:ANONYMOUS` until it is known (and on PLAINTEXT listeners).
- On a SASL listener, until the exchange succeeds, only `BEFORE_AUTHENTICATION` APIs are
  taken (`kafka_server.Connection` closes the connection on anything else).
"""

from __future__ import annotations

import contextvars
from dataclasses import dataclass
from typing import Any

from tidelog.protocol.kafka import ApiKey
from tidelog.protocol.scram import ScramServer

ANONYMOUS = "User:ANONYMOUS"
SASL_PROTOCOLS = ("SASL_PLAINTEXT", "SASL_SSL")
BEFORE_AUTHENTICATION = frozenset(
    {ApiKey.API_VERSIONS, ApiKey.SASL_HANDSHAKE, ApiKey.SASL_AUTHENTICATE}
)
SHORT_NAMES = {
    "commonName": "CN",
    "organizationName": "O",
    "organizationalUnitName": "OU",
    "countryName": "C",
    "localityName": "L",
    "stateOrProvinceName": "ST",
}


@dataclass
class Session:
    """One client connection: who it is, and where its SASL exchange stands."""

    listener: str
    peer: str = ""
    host: str = ""  # the client's address, as ACLs name hosts
    principal: str = ANONYMOUS
    mechanism: str | None = None  # chosen by SaslHandshake
    scram: ScramServer | None = None
    authenticated: bool = False
    close_after_reply: bool = False  # a failed exchange: answer, then close

    @property
    def needs_sasl(self) -> bool:
        return self.listener in SASL_PROTOCOLS and not self.authenticated


client_session: contextvars.ContextVar[Session] = contextvars.ContextVar("client_session")


def principal_of(certificate: dict[str, Any]) -> str:
    """A client certificate's principal, as Kafka's default builder names it: `User:` and
    the subject's distinguished name, most specific first (`User:CN=alice,O=...`)."""
    names = [
        f"{SHORT_NAMES.get(key, key)}={value}"
        for entry in reversed(certificate.get("subject", ()))
        for key, value in entry
    ]
    return "User:" + ",".join(names) if names else ANONYMOUS


def session() -> Session:
    """The connection's session (a request handled outside a connection: anonymous)."""
    return client_session.get(Session("PLAINTEXT"))
