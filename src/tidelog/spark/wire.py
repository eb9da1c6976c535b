"""One blocking connection to one Kafka broker, as the Spark jobs' tasks hold them.

`verify-replicas` reads each replica through one, and the `tidelog` source reads a range
from its partition's leader through one (`tidelog.spark.direct`). A connection is TLS and
authenticated (SaslHandshake, then SaslAuthenticate rounds of kafka-python's PLAIN or SCRAM
client) before its first request when its `ClientSecurity` says so, and its requests are
kafka-python's, encoded and decoded by kafka-python.

Rules of this file:
- Every connect and every answer has a named timeout (OSError when it passes).
- An answer is checked before it is decoded: its size (at most RESPONSE_BYTES_MAX) and,
  decoded, its correlation id; one that does not decode is a SparkKafkaError naming the
  broker, never an exception of kafka-python's.
- A request may be sent before the previous answer is read (`send`, then `answer`): the
  broker answers in order, so the answers are read in the order of the sends.
"""

from __future__ import annotations

import socket
import struct
import warnings
from typing import Any, Final

from tidelog.address import parse_address
from tidelog.client_config import PLAINTEXT, ClientSecurity
from tidelog.protocol.kafka_errors import ErrorCode
from tidelog.spark.kafka_io import SparkKafkaError

# kafka-python 3.0.12 loads its JSON schemas with a deprecated importlib call at import time.
with warnings.catch_warnings():
    warnings.simplefilter("ignore", DeprecationWarning)
    from kafka.net.sasl import get_sasl_mechanism
    from kafka.protocol.consumer import FetchRequest, FetchResponse
    from kafka.protocol.metadata import MetadataRequest, MetadataResponse
    from kafka.protocol.sasl import (
        SaslAuthenticateRequest,
        SaslAuthenticateResponse,
        SaslHandshakeRequest,
        SaslHandshakeResponse,
    )

CLIENT_ID: Final = "tidelog-spark"
CONNECT_TIMEOUT_S: Final = 5.0
REQUEST_TIMEOUT_S: Final = 15.0
FETCH_BYTES_MAX: Final = 8 * 1024 * 1024
"""What one Fetch may return (also per partition): at least one whole batch comes anyway."""
RESPONSE_BYTES_MAX: Final = 2 * FETCH_BYTES_MAX + 1024 * 1024
DEFAULT_PORT: Final = 9092
METADATA_VERSION: Final = 7
FETCH_VERSION: Final = 11
NO_REPLICA_ID: Final = -1  # a consumer, not a broker
NO_SESSION_EPOCH: Final = -1  # a full fetch, no fetch session
NO_EPOCH: Final = -1
SASL_HANDSHAKE_VERSION: Final = 1
SASL_AUTHENTICATE_VERSION: Final = 1
SASL_ROUNDS_MAX: Final = 4
"""SaslAuthenticate rounds before a login counts as failed (PLAIN takes 1, SCRAM 2)."""
_SIZE = struct.Struct(">i")
DECODE_ERRORS: Final = (struct.error, ValueError, IndexError, KeyError, OverflowError)
"""What kafka-python's generated decoders raise on a malformed body."""


def split_address(address: str) -> tuple[str, int]:
    """("host", port) of `host:port`; SparkKafkaError when it is not one."""
    try:
        return parse_address(address, default_port=DEFAULT_PORT)
    except ValueError as error:
        raise SparkKafkaError(f"bad broker address: {error} (want host:port)") from None


class BrokerConnection:
    """One blocking connection to one broker: a request out, its response back, in turn;
    TLS and authenticated first as `security` says (OSError or SparkKafkaError if not)."""

    def __init__(
        self, address: str, security: ClientSecurity = PLAINTEXT, *, client_id: str = CLIENT_ID
    ) -> None:
        self.address, self.client_id = address, client_id
        host, port = split_address(address)
        context = security.ssl_context()
        self.sock = socket.create_connection((host, port), timeout=CONNECT_TIMEOUT_S)
        self.correlation_id = 0
        try:
            if context is not None:  # the TLS socket takes the plain one over
                self.sock = context.wrap_socket(self.sock, server_hostname=host)
            self.sock.settimeout(REQUEST_TIMEOUT_S)
            if security.sasl:
                self.authenticate(security)
        except BaseException:
            self.sock.close()
            raise

    def authenticate(self, security: ClientSecurity) -> None:
        """SaslHandshake, then SaslAuthenticate rounds until kafka-python's client of the
        mechanism is done; SparkKafkaError when the broker refuses."""
        handshake = SaslHandshakeRequest(mechanism=security.mechanism)
        answer = self.call(handshake, SaslHandshakeResponse, SASL_HANDSHAKE_VERSION)
        if answer.error_code != 0:
            raise SparkKafkaError(f"SASL {security.mechanism}: {error_name(answer.error_code)}")
        login = get_sasl_mechanism(security.mechanism)(**security.kafka_python())
        for _ in range(SASL_ROUNDS_MAX):
            if login.is_done():
                break
            request = SaslAuthenticateRequest(auth_bytes=login.auth_bytes())
            step = self.call(request, SaslAuthenticateResponse, SASL_AUTHENTICATE_VERSION)
            if step.error_code != 0:
                reason = step.error_message or error_name(step.error_code)
                raise SparkKafkaError(f"SASL {security.mechanism}: {reason}")
            try:
                login.receive(step.auth_bytes)
            except ValueError as error:  # a SCRAM server that did not prove itself
                raise SparkKafkaError(f"SASL {security.mechanism}: {error}") from None
        if not login.is_authenticated():
            raise SparkKafkaError(f"SASL {security.mechanism}: not logged in")

    def close(self) -> None:
        self.sock.close()

    def __enter__(self) -> BrokerConnection:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def call(self, request: Any, response_class: Any, version: int) -> Any:
        """Send `request` at `version`, return the decoded response. OSError (ConnectionError
        when the broker closes the connection) or SparkKafkaError for a bad answer."""
        return self.answer(response_class, version, self.send(request, version))

    def send(self, request: Any, version: int) -> int:
        """Send `request` at `version`; its correlation id, for `answer`."""
        self.correlation_id += 1
        request.API_VERSION = version
        request.with_header(correlation_id=self.correlation_id, client_id=self.client_id)
        self.sock.sendall(request.encode(header=True, framed=True))
        return self.correlation_id

    def answer(self, response_class: Any, version: int, correlation_id: int) -> Any:
        """The next answer, decoded as `response_class` at `version`; it must answer the
        request of `correlation_id` (the oldest one sent and not answered yet)."""
        (size,) = _SIZE.unpack(self.receive(_SIZE.size))
        if not 0 < size <= RESPONSE_BYTES_MAX:
            raise SparkKafkaError(f"{self.address}: response of {size} bytes")
        payload = self.receive(size)
        try:
            response = response_class[version].decode(payload, header=True)
        except DECODE_ERRORS as error:
            what = f"{self.address}: an answer that does not decode: {error!r}"
            raise SparkKafkaError(what) from error
        if response.header.correlation_id != correlation_id:
            raise SparkKafkaError(f"{self.address}: answer to another request")
        return response

    def receive(self, size: int) -> bytearray:
        buffer = bytearray(size)
        view, got = memoryview(buffer), 0
        while got < size:
            count = self.sock.recv_into(view[got:])
            if not count:
                raise ConnectionError("the broker closed the connection")
            got += count
        return buffer


def error_name(code: int) -> str:
    try:
        return ErrorCode(code).name
    except ValueError:
        return f"error {code}"


def ask_metadata(bootstrap: str, topic: str, security: ClientSecurity) -> Any:
    """The Metadata of `topic` from the first bootstrap broker that answers."""
    request = MetadataRequest(
        topics=[MetadataRequest.MetadataRequestTopic(name=topic)],
        allow_auto_topic_creation=False,
    )
    failures = []
    for address in bootstrap.split(","):
        try:
            with BrokerConnection(address.strip(), security) as connection:
                return connection.call(request, MetadataResponse, METADATA_VERSION)
        except (OSError, SparkKafkaError) as error:
            failures.append(f"{address.strip()}: {error}")
    raise SparkKafkaError(f"no broker answers at {bootstrap} ({'; '.join(failures)})")


def fetch_request(
    topic: str,
    partition: int,
    offset: int,
    *,
    max_wait_ms: int,
    min_bytes: int,
    isolation_level: int,
    rack_id: str,
    max_bytes: int = FETCH_BYTES_MAX,
) -> Any:
    """A Fetch (v11) of one partition at `offset`, as a consumer: no fetch session, no
    leader epoch to check, at most `max_bytes` (for the partition and in all)."""
    wanted = FetchRequest.FetchTopic.FetchPartition(
        partition=partition,
        current_leader_epoch=NO_EPOCH,
        fetch_offset=offset,
        log_start_offset=-1,
        partition_max_bytes=max_bytes,
    )
    return FetchRequest(
        replica_id=NO_REPLICA_ID,
        max_wait_ms=max_wait_ms,
        min_bytes=min_bytes,
        max_bytes=max_bytes,
        isolation_level=isolation_level,
        session_id=0,
        session_epoch=NO_SESSION_EPOCH,
        topics=[FetchRequest.FetchTopic(topic=topic, partitions=[wanted])],
        forgotten_topics_data=[],
        rack_id=rack_id,
    )


def fetch_answer(connection: BrokerConnection, partition: int, correlation_id: int) -> Any:
    """The answer of the Fetch `correlation_id` for its one partition; None when the
    answer holds anything else."""
    response = connection.answer(FetchResponse, FETCH_VERSION, correlation_id)
    answers = [p for t in response.responses for p in t.partitions]
    if len(answers) != 1 or answers[0].partition_index != partition:
        return None
    return answers[0]
