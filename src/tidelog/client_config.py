"""Kafka client properties, as a `--command-config` file holds them (librdkafka's names), and
the one mapping of their security settings to what each of tidelog's clients needs:
kafka-python's keyword arguments, or a TLS context and SASL credentials for a connection of
our own (`spark.replicas`). A base module: the tools, the Spark job and the tests use it.

Rules of this file:
- A properties file holds one `name=value` a line: the first `=` separates them, both are
  stripped; blank lines and comments (`#`, `!`) are skipped. A line without `=`, or a file
  that cannot be read, is a ClientConfigError naming the file (and the line), never a
  traceback.
- The security properties are checked here, before anything connects: `security.protocol`
  is PLAINTEXT, SSL, SASL_PLAINTEXT or SASL_SSL (any case, as librdkafka takes it;
  PLAINTEXT when absent); SASL needs `sasl.mechanism` (or librdkafka's `sasl.mechanisms`)
  PLAIN, SCRAM-SHA-256 or SCRAM-SHA-512, `sasl.username` and `sasl.password`; a file named
  by `ssl.*.location` must be readable, and a client certificate needs its key.
- Other properties (`client.id`, `linger.ms`, ...) are librdkafka's: `perf` and the Spark
  source pass them on, the kafka-python commands do not use them.
- A password is never in a repr or an error message.

    TidelogError
    └── ConfigError                a setting is out of what it allows (tidelog.errors)
        └── ClientConfigError    a client properties file, or a setting in it, is wrong
"""

from __future__ import annotations

import os
import ssl
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Final

from tidelog.errors import ConfigError

PROTOCOLS: Final = ("PLAINTEXT", "SSL", "SASL_PLAINTEXT", "SASL_SSL")
SASL_MECHANISMS: Final = ("PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512")
COMMENT_STARTS: Final = ("#", "!")
NO_HOSTNAME_CHECK: Final = ("", "none")
"""`ssl.endpoint.identification.algorithm` values that turn host name checks off (librdkafka:
`none`; its default, `https`, checks them)."""

FILE_PROPERTIES: Final = ("ssl.ca.location", "ssl.certificate.location", "ssl.key.location")


class ClientConfigError(ConfigError):
    """A client properties file, or a setting in it, is wrong; `str(error)` is for the user."""


def parse_properties(items: Iterable[str], where: str) -> dict[str, str]:
    """`name=value` items as a dict (a later one wins; name and value stripped).
    ClientConfigError naming `where` for an item that is not `name=value`."""
    properties: dict[str, str] = {}
    for item in items:
        name, found, value = item.partition("=")
        if not found or not name.strip():
            raise ClientConfigError(f"bad {where} {item!r} (want name=value)")
        properties[name.strip()] = value.strip()
    return properties


def read_properties(path: Path, where: str = "--command-config") -> dict[str, str]:
    """The properties of a file; ClientConfigError when it cannot be read or parsed."""
    try:
        text = path.read_text()
    except OSError as error:
        raise ClientConfigError(f"{where} {path}: {error.strerror or error}") from None
    except UnicodeDecodeError:
        raise ClientConfigError(f"{where} {path}: not a text file") from None
    lines = (line.strip() for line in text.splitlines())
    items = [line for line in lines if line and not line.startswith(COMMENT_STARTS)]
    return parse_properties(items, f"line of {where} {path}:")


@dataclass(frozen=True, slots=True)
class ClientSecurity:
    """How a client connects: the security protocol, TLS files, SASL mechanism and user."""

    protocol: str = "PLAINTEXT"
    ca_location: str | None = None
    certificate_location: str | None = None
    key_location: str | None = None
    key_password: str | None = field(default=None, repr=False)
    check_hostname: bool = True
    mechanism: str | None = None
    username: str | None = None
    password: str | None = field(default=None, repr=False)

    @property
    def tls(self) -> bool:
        return self.protocol in ("SSL", "SASL_SSL")

    @property
    def sasl(self) -> bool:
        return self.protocol.startswith("SASL_")

    def kafka_python(self) -> dict[str, Any]:
        """kafka-python's keyword arguments for these settings (no bootstrap_servers)."""
        settings: dict[str, Any] = {"security_protocol": self.protocol}
        if self.tls:
            settings["ssl_check_hostname"] = self.check_hostname
            for name, value in (
                ("ssl_cafile", self.ca_location),
                ("ssl_certfile", self.certificate_location),
                ("ssl_keyfile", self.key_location),
                ("ssl_password", self.key_password),
            ):
                if value is not None:
                    settings[name] = value
        if self.sasl:
            settings["sasl_mechanism"] = self.mechanism
            settings["sasl_plain_username"] = self.username
            settings["sasl_plain_password"] = self.password
        return settings

    def ssl_context(self) -> ssl.SSLContext | None:
        """The client TLS context (None without TLS): the CA (else the system's), the
        client certificate if any, host names checked unless turned off.
        ClientConfigError naming a file that is no certificate or key."""
        if not self.tls:
            return None
        try:
            context = ssl.create_default_context(cafile=self.ca_location)
            context.check_hostname = self.check_hostname
            if self.certificate_location is not None:
                context.load_cert_chain(
                    self.certificate_location, self.key_location, self.key_password
                )
        except (OSError, ssl.SSLError) as error:
            files = ", ".join(
                f for f in (self.ca_location, self.certificate_location, self.key_location) if f
            )
            raise ClientConfigError(f"TLS with {files}: {error}") from None
        return context


PLAINTEXT: Final = ClientSecurity()


def security_of(properties: Mapping[str, str]) -> ClientSecurity:
    """The security settings of client properties (librdkafka's names), checked as this
    module's rules say; ClientConfigError for the first thing wrong."""
    protocol = properties.get("security.protocol", "PLAINTEXT").strip().upper()
    if protocol not in PROTOCOLS:
        given = properties["security.protocol"]
        raise ClientConfigError(f"security.protocol={given}: not one of {', '.join(PROTOCOLS)}")
    security = ClientSecurity(
        protocol=protocol,
        ca_location=properties.get("ssl.ca.location") or None,
        certificate_location=properties.get("ssl.certificate.location") or None,
        key_location=properties.get("ssl.key.location") or None,
        key_password=properties.get("ssl.key.password") or None,
        check_hostname=(
            properties.get("ssl.endpoint.identification.algorithm", "https").strip().lower()
            not in NO_HOSTNAME_CHECK
        ),
        mechanism=(properties.get("sasl.mechanism") or properties.get("sasl.mechanisms") or "")
        .strip()
        .upper()
        or None,
        username=properties.get("sasl.username") or None,
        password=properties.get("sasl.password") or None,
    )
    if security.tls:
        check_files(properties)
        if (security.certificate_location is None) != (security.key_location is None):
            raise ClientConfigError(
                "ssl.certificate.location and ssl.key.location go together: give both or neither"
            )
    if security.sasl:
        check_sasl(security)
    return security


def check_files(properties: Mapping[str, str]) -> None:
    for name in FILE_PROPERTIES:
        path = properties.get(name)
        if path and not os.access(path, os.R_OK):
            reason = "not readable" if os.path.exists(path) else "no such file"
            raise ClientConfigError(f"{name}={path}: {reason}")


def check_sasl(security: ClientSecurity) -> None:
    if security.mechanism not in SASL_MECHANISMS:
        given = (
            f"sasl.mechanism={security.mechanism}" if security.mechanism else "no sasl.mechanism"
        )
        raise ClientConfigError(
            f"security.protocol={security.protocol} with {given}: want one of "
            f"{', '.join(SASL_MECHANISMS)}"
        )
    missing = [
        name
        for name, value in (
            ("sasl.username", security.username),
            ("sasl.password", security.password),
        )
        if value is None
    ]
    if missing:
        raise ClientConfigError(
            f"security.protocol={security.protocol} needs {' and '.join(missing)}"
        )
