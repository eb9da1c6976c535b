"""SASL mechanisms of the broker, sans-IO: SCRAM-SHA-256 and SCRAM-SHA-512 (RFC 5802,
RFC 7677, as Kafka's KIP-84) and PLAIN (RFC 4616), checked against salted credentials.

Rules of this file:
- A credential is what the metadata log stores: salt, iterations, StoredKey = H(ClientKey)
  and ServerKey, never a password. `make_credential` derives one (the salt is handed in).
- `ScramServer` is one exchange: `step(client-first)` returns server-first, `step(
  client-final)` returns server-final; then `user` is authenticated. Anything malformed,
  an unknown user, a nonce that is not ours, or a wrong proof raises `SaslError`; a failed
  exchange answers nothing more (the connection closes).
- PLAIN is checked against the user's SCRAM-SHA-512 (else SCRAM-SHA-256) credential, so a
  user has one password for every mechanism. Comparisons are constant-time.
- Kafka's SCRAM extensions (`tokenauth`) and an authorization id other than the user are
  refused.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import hmac
from collections.abc import Callable
from dataclasses import dataclass

from tidelog.errors import TidelogError

MECHANISMS = ("SCRAM-SHA-256", "SCRAM-SHA-512")
SASL_MECHANISMS = ("PLAIN", *MECHANISMS)
HASHES = {"SCRAM-SHA-256": "sha256", "SCRAM-SHA-512": "sha512"}
# Kafka's mechanism ids in Describe/AlterUserScramCredentials (ScramMechanism).
MECHANISM_IDS = {1: "SCRAM-SHA-256", 2: "SCRAM-SHA-512"}
ITERATIONS_MIN = 4096  # Kafka's minimum
ITERATIONS_MAX = 16384  # Kafka's maximum
MESSAGE_BYTES_MAX = 4096


class SaslError(TidelogError):
    """An authentication exchange failed (malformed, unknown user, wrong password)."""


@dataclass(frozen=True, slots=True)
class ScramCredential:
    mechanism: str
    salt: bytes
    iterations: int
    stored_key: bytes
    server_key: bytes


Lookup = Callable[[str, str], "ScramCredential | None"]  # (user, mechanism) -> credential


def _hmac(name: str, key: bytes, message: bytes) -> bytes:
    return hmac.new(key, message, name).digest()


def _salted(mechanism: str, password: str, salt: bytes, iterations: int) -> bytes:
    return hashlib.pbkdf2_hmac(HASHES[mechanism], password.encode(), salt, iterations)


def credential_from_salted(
    mechanism: str, salted_password: bytes, salt: bytes, iterations: int
) -> ScramCredential:
    """A credential from a salted password (what AlterUserScramCredentials carries)."""
    name = HASHES[mechanism]
    client_key = _hmac(name, salted_password, b"Client Key")
    stored_key = hashlib.new(name, client_key).digest()
    server_key = _hmac(name, salted_password, b"Server Key")
    return ScramCredential(mechanism, salt, iterations, stored_key, server_key)


def make_credential(
    mechanism: str, password: str, salt: bytes, iterations: int = ITERATIONS_MIN
) -> ScramCredential:
    if mechanism not in HASHES:
        raise SaslError(f"unknown mechanism {mechanism!r}")
    salted = _salted(mechanism, password, salt, iterations)
    return credential_from_salted(mechanism, salted, salt, iterations)


def check_password(credential: ScramCredential, password: str) -> bool:
    salted = _salted(credential.mechanism, password, credential.salt, credential.iterations)
    expected = credential_from_salted(credential.mechanism, salted, credential.salt, 1)
    return hmac.compare_digest(expected.stored_key, credential.stored_key)


def _unescape(name: str) -> str:
    if "=" in name.replace("=2C", "").replace("=3D", ""):
        raise SaslError("a user name with a bad escape")
    return name.replace("=2C", ",").replace("=3D", "=")


def _attributes(text: str) -> list[tuple[str, str]]:
    pairs = []
    for part in text.split(","):
        key, sep, value = part.partition("=")
        if not sep or len(key) != 1:
            raise SaslError(f"malformed SCRAM attribute {part[:40]!r}")
        pairs.append((key, value))
    return pairs


class ScramServer:
    """The server side of one SCRAM exchange."""

    def __init__(self, mechanism: str, lookup: Lookup, nonce: str) -> None:
        if mechanism not in HASHES:
            raise SaslError(f"unknown mechanism {mechanism!r}")
        self.mechanism = mechanism
        self.hash = HASHES[mechanism]
        self.lookup = lookup
        self.server_nonce = nonce
        self.user: str | None = None  # set once the client proved who it is
        self.done = False
        self._credential: ScramCredential | None = None
        self._first_bare = ""
        self._server_first = ""
        self._nonce = ""
        self._gs2 = ""
        self._pending_user = ""

    def step(self, message: bytes) -> bytes:
        if self.done:
            raise SaslError("the exchange is over")
        if len(message) > MESSAGE_BYTES_MAX:
            raise SaslError("a SCRAM message too long")
        try:
            text = message.decode("utf-8")
        except UnicodeDecodeError:
            raise SaslError("a SCRAM message that is not UTF-8") from None
        if self._credential is None:
            return self._first(text).encode()
        return self._final(text).encode()

    def _first(self, text: str) -> str:
        parts = text.split(",", 2)
        if len(parts) != 3 or parts[0] not in ("n", "y"):
            raise SaslError("malformed client-first message (channel binding is not offered)")
        if parts[1] and parts[1] != "a=":
            authzid = _unescape(parts[1][2:]) if parts[1].startswith("a=") else None
            if authzid is None:
                raise SaslError("malformed authorization id")
        else:
            authzid = None
        self._gs2 = f"{parts[0]},{parts[1]},"
        self._first_bare = parts[2]
        attributes = _attributes(parts[2])
        if len(attributes) < 2 or attributes[0][0] != "n" or attributes[1][0] != "r":
            raise SaslError("a client-first message needs n= and r=")
        if attributes[2:]:  # extensions (tokenauth, ...)
            raise SaslError("SCRAM extensions are not supported")
        user = _unescape(attributes[0][1])
        if authzid is not None and authzid != user:
            raise SaslError("an authorization id other than the user")
        client_nonce = attributes[1][1]
        if not client_nonce or not client_nonce.isprintable() or "," in client_nonce:
            raise SaslError("a bad client nonce")
        credential = self.lookup(user, self.mechanism)
        if credential is None:
            raise SaslError(f"unknown user {user[:64]!r} for {self.mechanism}")
        self._credential = credential
        self._pending_user = user
        self._nonce = client_nonce + self.server_nonce
        salt = base64.b64encode(credential.salt).decode()
        self._server_first = f"r={self._nonce},s={salt},i={credential.iterations}"
        return self._server_first

    def _final(self, text: str) -> str:
        credential = self._credential
        assert credential is not None  # set by _first: our own order
        attributes = _attributes(text)
        if len(attributes) < 3 or [k for k, _ in attributes[:2]] != ["c", "r"]:
            raise SaslError("malformed client-final message")
        if attributes[-1][0] != "p":
            raise SaslError("a client-final message without a proof")
        binding, nonce, proof_text = attributes[0][1], attributes[1][1], attributes[-1][1]
        try:
            if base64.b64decode(binding, validate=True).decode() != self._gs2:
                raise SaslError("channel binding differs from the client-first message")
            proof = base64.b64decode(proof_text, validate=True)
        except (binascii.Error, UnicodeDecodeError):
            raise SaslError("bad base64 in the client-final message") from None
        # As Kafka's ScramSaslServer: the nonce must end with ours (librdkafka sends its
        # client nonce once more in front of it).
        if not nonce.endswith(self._nonce):
            raise SaslError("the nonce is not the one this exchange began with")
        without_proof = text[: text.rindex(",p=")]
        auth_message = f"{self._first_bare},{self._server_first},{without_proof}".encode()
        signature = _hmac(self.hash, credential.stored_key, auth_message)
        if len(proof) != len(signature):
            raise SaslError("a proof of the wrong length")
        client_key = bytes(a ^ b for a, b in zip(proof, signature, strict=True))
        if not hmac.compare_digest(
            hashlib.new(self.hash, client_key).digest(), credential.stored_key
        ):
            raise SaslError(f"authentication failed for {self._pending_user[:64]!r}")
        self.user = self._pending_user
        self.done = True
        server_signature = _hmac(self.hash, credential.server_key, auth_message)
        return "v=" + base64.b64encode(server_signature).decode()


def check_plain(message: bytes, lookup: Lookup) -> str:
    """The user a PLAIN message (authzid NUL user NUL password) authenticates; SaslError
    when it does not."""
    if len(message) > MESSAGE_BYTES_MAX:
        raise SaslError("a PLAIN message too long")
    parts = message.split(b"\0")
    if len(parts) != 3:
        raise SaslError("malformed PLAIN message")
    try:
        authzid, user, password = (part.decode("utf-8") for part in parts)
    except UnicodeDecodeError:
        raise SaslError("a PLAIN message that is not UTF-8") from None
    if authzid and authzid != user:
        raise SaslError("an authorization id other than the user")
    for mechanism in reversed(MECHANISMS):
        credential = lookup(user, mechanism)
        if credential is not None:
            if check_password(credential, password):
                return user
            break
    raise SaslError(f"authentication failed for {user[:64]!r}")
