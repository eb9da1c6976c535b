"""Who a client is: SASL on SASL_PLAINTEXT and SASL_SSL listeners (SaslHandshake v1, then
SaslAuthenticate with PLAIN, SCRAM-SHA-256 or SCRAM-SHA-512), a client certificate on SSL
listeners, and the SCRAM credentials in the metadata log (Describe- and
AlterUserScramCredentials).

Rules of this file:
- Every connection has a `Session` (`client_session`): its listener, its principal
  (`User:NAME`; `User:ANONYMOUS` until it is known) and where its SASL exchange stands.
- On a SASL listener, until the exchange succeeds, a connection may send ApiVersions,
  SaslHandshake and SaslAuthenticate only; anything else closes it
  (`kafka_server.Connection`). A failed exchange is answered SASL_AUTHENTICATION_FAILED,
  with one log line, and then the connection closes, as Kafka does.
- Credentials are checked against the salted SCRAM credentials of the metadata image
  (`tidelog.protocol.scram`); passwords are never stored. A credential is changed only
  through the metadata log (forwarded to its leader by any other node), after validation
  at the door (known mechanism, Kafka's iteration bounds, a salt and a salted password).
"""

from __future__ import annotations

import base64
import logging
import secrets
from typing import Any

from tidelog.protocol.kafka import ApiKey, KafkaRequest
from tidelog.protocol.kafka_errors import ErrorCode
from tidelog.protocol.scram import (
    ITERATIONS_MAX,
    ITERATIONS_MIN,
    MECHANISM_IDS,
    SASL_MECHANISMS,
    SaslError,
    ScramCredential,
    ScramServer,
    check_plain,
    credential_from_salted,
)
from tidelog.server.acl import ALTER, DESCRIBE
from tidelog.server.answers import body_of, response
from tidelog.server.authorize import cluster_allowed
from tidelog.server.session import session
from tidelog.server.view import BrokerView

log = logging.getLogger("tidelog.sasl")

USER_NAME_MAX = 256
MECHANISM_NUMBERS = {name: number for number, name in MECHANISM_IDS.items()}


def lookup_in(broker: BrokerView) -> Any:
    def lookup(user: str, mechanism: str) -> ScramCredential | None:
        return broker.image.scram.get((user, mechanism))

    return lookup


# ---------------------------------------------------------------------- SaslHandshake --
async def sasl_handshake(broker: BrokerView, request: KafkaRequest) -> Any:
    del broker
    state = session()
    mechanism = str(body_of(request).mechanism)
    code = ErrorCode.NONE
    if not state.needs_sasl or state.mechanism is not None or request.api_version < 1:
        code = ErrorCode.ILLEGAL_SASL_STATE  # v0 would need raw tokens: SaslAuthenticate
    elif mechanism not in SASL_MECHANISMS:
        code = ErrorCode.UNSUPPORTED_SASL_MECHANISM
    else:
        state.mechanism = mechanism
    if code is not ErrorCode.NONE:
        state.close_after_reply = state.needs_sasl
    return response(request, error_code=int(code), mechanisms=list(SASL_MECHANISMS))


# ---------------------------------------------------------------------- SaslAuthenticate
async def sasl_authenticate(broker: BrokerView, request: KafkaRequest) -> Any:
    state = session()
    token = bytes(body_of(request).auth_bytes or b"")

    def answer(code: ErrorCode, message: str | None, data: bytes = b"") -> Any:
        fields: dict[str, Any] = {
            "error_code": int(code),
            "error_message": message,
            "auth_bytes": data,
        }
        if request.api_version >= 1:
            fields["session_lifetime_ms"] = 0
        return response(request, **fields)

    if not state.needs_sasl or state.mechanism is None:
        state.close_after_reply = True
        return answer(ErrorCode.ILLEGAL_SASL_STATE, "no SASL exchange in progress")
    lookup = lookup_in(broker)
    user: str | None
    try:
        if state.mechanism == "PLAIN":
            user, reply = check_plain(token, lookup), b""
        else:
            if state.scram is None:
                state.scram = ScramServer(state.mechanism, lookup, secrets.token_urlsafe(18))
            reply = state.scram.step(token)
            user = state.scram.user if state.scram.done else None
    except SaslError as error:
        log.warning("authentication failed from %s with %s: %s", state.peer, state.mechanism, error)
        state.close_after_reply = True
        return answer(
            ErrorCode.SASL_AUTHENTICATION_FAILED,
            "Authentication failed during authentication due to invalid credentials with "
            f"SASL mechanism {state.mechanism}",
        )
    if user is not None:
        state.authenticated = True
        state.principal = f"User:{user}"
        log.info("%s authenticated as %s with %s", state.peer, state.principal, state.mechanism)
    return answer(ErrorCode.NONE, None, reply)


# ---------------------------------------------------------------------- SCRAM users ----
async def describe_user_scram_credentials(broker: BrokerView, request: KafkaRequest) -> Any:
    cls = request.response_class.DescribeUserScramCredentialsResult
    info_cls = cls.CredentialInfo
    if not cluster_allowed(broker, DESCRIBE):
        code = int(ErrorCode.CLUSTER_AUTHORIZATION_FAILED)
        return response(
            request, throttle_time_ms=0, error_code=code, error_message="not authorized", results=[]
        )
    asked = body_of(request).users
    known = sorted({user for user, _ in broker.image.scram})
    names = known if asked is None else [user.name for user in asked]
    results = []
    for name in names:
        credentials = [
            info_cls(mechanism=MECHANISM_NUMBERS[mechanism], iterations=credential.iterations)
            for (user, mechanism), credential in sorted(broker.image.scram.items())
            if user == name
        ]
        code = ErrorCode.NONE if credentials else ErrorCode.RESOURCE_NOT_FOUND
        message = None if credentials else f"no credentials for user {name[:USER_NAME_MAX]!r}"
        results.append(
            cls(
                user=name, error_code=int(code), error_message=message, credential_infos=credentials
            )
        )
    return response(request, throttle_time_ms=0, error_code=0, error_message=None, results=results)


def check_upsertion(upsertion: Any) -> tuple[ErrorCode, str | None]:
    """Kafka's checks of one upsertion, at the door."""
    name = str(upsertion.name)
    if not name or len(name) > USER_NAME_MAX:
        return ErrorCode.UNACCEPTABLE_CREDENTIAL, "a user name of 1-256 characters"
    if upsertion.mechanism not in MECHANISM_IDS:
        return ErrorCode.UNSUPPORTED_SASL_MECHANISM, f"mechanism {upsertion.mechanism}"
    if not ITERATIONS_MIN <= upsertion.iterations <= ITERATIONS_MAX:
        return (
            ErrorCode.UNACCEPTABLE_CREDENTIAL,
            f"iterations {upsertion.iterations} outside [{ITERATIONS_MIN}, {ITERATIONS_MAX}]",
        )
    if not upsertion.salt or not upsertion.salted_password:
        return ErrorCode.UNACCEPTABLE_CREDENTIAL, "an empty salt or salted password"
    return ErrorCode.NONE, None


async def alter_user_scram_credentials(broker: BrokerView, request: KafkaRequest) -> Any:
    body = body_of(request)
    cls = request.response_class.AlterUserScramCredentialsResult
    commands: list[tuple[str, dict[str, Any] | None, ErrorCode, str | None]] = []
    command: dict[str, Any] | None
    message: str | None
    for deletion in body.deletions:
        mechanism = MECHANISM_IDS.get(deletion.mechanism)
        if mechanism is None:
            commands.append((deletion.name, None, ErrorCode.UNSUPPORTED_SASL_MECHANISM, None))
        elif (deletion.name, mechanism) not in broker.image.scram:
            message = f"no {mechanism} credential for {str(deletion.name)[:USER_NAME_MAX]!r}"
            commands.append((deletion.name, None, ErrorCode.RESOURCE_NOT_FOUND, message))
        else:
            command = {"type": "delete_scram", "user": deletion.name, "mechanism": mechanism}
            commands.append((deletion.name, command, ErrorCode.NONE, None))
    for upsertion in body.upsertions:
        code, message = check_upsertion(upsertion)
        if code is not ErrorCode.NONE:
            commands.append((upsertion.name, None, code, message))
            continue
        credential = credential_from_salted(
            MECHANISM_IDS[upsertion.mechanism],
            bytes(upsertion.salted_password),
            bytes(upsertion.salt),
            upsertion.iterations,
        )
        command = {
            "type": "upsert_scram",
            "user": upsertion.name,
            "mechanism": credential.mechanism,
            "iterations": credential.iterations,
            "salt": base64.b64encode(credential.salt).decode(),
            "stored_key": base64.b64encode(credential.stored_key).decode(),
            "server_key": base64.b64encode(credential.server_key).decode(),
        }
        commands.append((upsertion.name, command, ErrorCode.NONE, None))
    # As Kafka: one alteration per user and mechanism in a request.
    keys = [(name, None if c is None else c["mechanism"]) for name, c, _, _ in commands]
    results = []
    for (name, command, code, message), key in zip(commands, keys, strict=True):
        if command is not None and keys.count(key) > 1:
            code, message = ErrorCode.DUPLICATE_RESOURCE, "two alterations of one credential"
        elif command is not None and not cluster_allowed(broker, ALTER):
            code, message = ErrorCode.CLUSTER_AUTHORIZATION_FAILED, "not authorized"
        elif command is not None:
            code, message = await broker.commit_metadata(command)
        results.append(cls(user=name, error_code=int(code), error_message=message))
    return response(request, throttle_time_ms=0, results=results)


SASL_HANDLERS = {
    ApiKey.SASL_HANDSHAKE: sasl_handshake,
    ApiKey.SASL_AUTHENTICATE: sasl_authenticate,
    ApiKey.DESCRIBE_USER_SCRAM_CREDENTIALS: describe_user_scram_credentials,
    ApiKey.ALTER_USER_SCRAM_CREDENTIALS: alter_user_scram_credentials,
}
