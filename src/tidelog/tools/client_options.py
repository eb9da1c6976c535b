"""The options every client command shares, and the one place they are resolved.

Rules of this file:
- `client_options` gives a command `--bootstrap-server` and `--command-config FILE` (a Kafka
  client properties file, as Kafka's tools take it, in librdkafka's names; also
  `$TIDELOG_COMMAND_CONFIG`) and hands the command one `client: ClientSettings`.
- `resolve_client` decides, in this order. The properties: `--command-config`, else
  `$TIDELOG_COMMAND_CONFIG`, else (only when `--bootstrap-server` is not given either) a
  running secure local cluster's `DIR/client-sasl.properties`; else none: PLAINTEXT. The
  bootstrap: `--bootstrap-server`, else the file's `bootstrap.servers`, else the running
  local cluster's, else 127.0.0.1:9092. A data directory given explicitly (`--data-dir`,
  `$TIDELOG_DATA_DIR`) without `cluster.json` is an error naming it, when the bootstrap
  would come from it.
- `--command-config`'s timing keys (request.timeout.ms, retry.backoff.ms,
  retry.backoff.max.ms, default.api.timeout.ms) set every request's timeout and retries
  (`ClientSettings.timing`); `produce --producer-property` and `consume --consumer-property`
  take Kafka's producer and consumer settings (`client_properties` checks and maps them).
- A bad file or setting, like every expected failure of a client command (`ClientError`,
  `ClientConfigError`), prints `error: ...` on stderr and exits 1, never a traceback.
"""

from __future__ import annotations

import functools
import os
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Final, NoReturn, ParamSpec, TypeVar

import click

from tidelog.client_config import ClientConfigError, read_properties
from tidelog.tools.client_kafka import ClientError, ClientSettings
from tidelog.tools.client_properties import (
    CONSUMER,
    PRODUCER,
    ClientProperties,
    consumer_client_properties,
    producer_client_properties,
)
from tidelog.tools.client_status import (
    CLIENT_SASL_PROPERTIES,
    DATA_DIR_ENV,
    chosen_data_dir,
    find_local_cluster,
    local_cluster_directory,
    missing_cluster_file,
)

DEFAULT_BOOTSTRAP: Final = "127.0.0.1:9092"
COMMAND_CONFIG_ENV: Final = "TIDELOG_COMMAND_CONFIG"
EXIT_ERROR: Final = 1
EXPECTED_ERRORS: Final = (ClientError, ClientConfigError)

P = ParamSpec("P")
R = TypeVar("R")


def fail(error: ClientError | ClientConfigError) -> NoReturn:
    """`error: ...` on stderr, exit 1."""
    click.echo(f"error: {error}", err=True)
    raise SystemExit(EXIT_ERROR) from error


def reports_errors(command: Callable[P, None]) -> Callable[P, None]:
    """Print a ClientError or ClientConfigError as `error: ...` on stderr and exit 1."""

    @functools.wraps(command)
    def wrapper(*args: P.args, **kwargs: P.kwargs) -> None:
        try:
            command(*args, **kwargs)
        except EXPECTED_ERRORS as error:
            fail(error)

    return wrapper


def json_option(command: Callable[P, R]) -> Callable[P, R]:
    return click.option("--json", "as_json", is_flag=True, help="Machine-readable output.")(command)


def client_options(command: Callable[..., None]) -> Callable[..., None]:
    """`--bootstrap-server` and `--command-config`, resolved into the command's `client`."""

    @functools.wraps(command)
    def wrapper(
        *args: object,
        bootstrap: str | None,
        command_config: Path | None,
        data_dir: Path | None,
        **kwargs: object,
    ) -> None:
        token = chosen_data_dir.set(data_dir)
        try:
            try:
                client = resolve_client(bootstrap, command_config)
            except EXPECTED_ERRORS as error:
                fail(error)
            command(*args, client=client, **kwargs)
        finally:
            chosen_data_dir.reset(token)

    with_data_dir = click.option(
        "--data-dir",
        "data_dir",
        type=click.Path(file_okay=False, path_type=Path),
        default=None,
        help=f"A local cluster's directory (default: ${DATA_DIR_ENV}, else ./data): its "
        "bootstrap by default, and each replica's state where a command shows it.",
    )(wrapper)

    with_config = click.option(
        "--command-config",
        type=click.Path(path_type=Path),
        default=None,
        metavar="FILE",
        help="Client properties (bootstrap.servers, security.protocol, sasl.mechanism, "
        "sasl.username, sasl.password, ssl.ca.location, ...), as Kafka's tools take them; "
        f"e.g. a secure cluster's client-sasl.properties. Default: ${COMMAND_CONFIG_ENV}, "
        "else, without --bootstrap-server, a running secure local cluster's "
        "client-sasl.properties.",
    )(with_data_dir)
    return click.option(
        "--bootstrap-server",
        "bootstrap",
        default=None,
        metavar="HOST:PORT[,...]",
        help="Brokers to bootstrap from (default: --command-config's bootstrap.servers, else "
        "the running local cluster's (its SASL_SSL listeners if it is secure), else "
        f"{DEFAULT_BOOTSTRAP}).",
    )(with_config)


def resolve_client(bootstrap: str | None, command_config: Path | None) -> ClientSettings:
    """Where and how the command connects (this module's rules); ClientConfigError naming
    the file when it cannot be read or a setting in it is wrong."""
    where, path = config_file(bootstrap, command_config)
    if path is None:
        if not bootstrap:
            check_data_dir()
        return ClientSettings.of(bootstrap or default_bootstrap(), {})
    properties = read_properties(path, where)
    file_bootstrap = properties.pop("bootstrap.servers", "")
    try:
        settings = ClientSettings.of(bootstrap or file_bootstrap or default_bootstrap(), properties)
    except ClientConfigError as error:
        raise ClientConfigError(f"{where} {path}: {error}") from None
    if not (bootstrap or file_bootstrap):
        check_data_dir()
    return settings


def config_file(bootstrap: str | None, command_config: Path | None) -> tuple[str, Path | None]:
    """The properties file to read and where it was named, or ("", None)."""
    if command_config is not None:
        return "--command-config", command_config
    named = os.environ.get(COMMAND_CONFIG_ENV, "").strip()
    if named:
        return f"${COMMAND_CONFIG_ENV}", Path(named)
    if not bootstrap:
        local = local_secure_properties()
        if local is not None:
            return "the local cluster's", local
    return "", None


def local_secure_properties() -> Path | None:
    """`DIR/client-sasl.properties` of a running secure local cluster, if it has one."""
    cluster = find_local_cluster()
    if cluster is None or cluster.get("secure") is not True:
        return None
    path = local_cluster_directory() / CLIENT_SASL_PROPERTIES
    return path if path.exists() else None


def default_bootstrap() -> str:
    """The bootstrap of a running local cluster, else 127.0.0.1:9092."""
    cluster = find_local_cluster()
    return str(cluster["bootstrap"]) if cluster is not None else DEFAULT_BOOTSTRAP


def check_data_dir() -> None:
    """ClientError when the bootstrap would come from a data directory given explicitly
    that holds no cluster.json (say so, rather than fail to reach 127.0.0.1:9092)."""
    missing = missing_cluster_file()
    if missing is not None:
        raise ClientError(missing)


def parsed_properties(
    parse: Callable[[tuple[str, ...]], ClientProperties],
) -> Callable[[click.Context, click.Parameter, tuple[str, ...]], ClientProperties]:
    """A click callback: the option's K=V items checked by `parse`; a usage error naming
    the unknown key or bad value otherwise."""

    def callback(
        _ctx: click.Context, _param: click.Parameter, items: tuple[str, ...]
    ) -> ClientProperties:
        try:
            return parse(items)
        except ClientConfigError as error:
            raise click.BadParameter(str(error)) from None

    return callback


def kafka_property_option(
    role: str, parse: Callable[[tuple[str, ...]], ClientProperties], known: Iterable[str]
) -> Callable[[Callable[P, R]], Callable[P, R]]:
    """`--ROLE-property K=V` (repeatable), as Kafka's console tools take it, handed to the
    command checked as `ROLE_config: ClientProperties`."""
    return click.option(
        f"--{role}-property",
        f"{role}_config",
        multiple=True,
        metavar="K=V",
        callback=parsed_properties(parse),
        help=f"A {role} setting in Kafka's name; repeat. Known: {', '.join(sorted(known))}.",
    )


producer_property_option = kafka_property_option("producer", producer_client_properties, PRODUCER)
consumer_property_option = kafka_property_option("consumer", consumer_client_properties, CONSUMER)
