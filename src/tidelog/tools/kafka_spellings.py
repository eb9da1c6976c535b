"""Kafka's tools' spellings of what the client commands already take, in one place:
`--topic` beside the positional TOPIC and `--group` beside GROUP, kafka-console-consumer's
and kafka-console-producer's `--property KEY=VALUE`, kafka-topics' `--create`/`--describe`/
`--alter`/`--list`/`--delete` verbs and kafka-consumer-groups' `--list`/`--describe`/
`--reset-offsets`/`--delete`/`--delete-offsets`.

Rules of this file:
- `topic_argument` (and `group_argument`) gives a command both spellings of its topic (its
  group) and hands it one: exactly one of them when it is required, at most one otherwise;
  both, or neither when one is required, is a usage error (exit 2) that says so.
- `--property` keys are Kafka's; each maps onto a flag the command has (`print.key=true` is
  `--print-key`) or onto a setting only Kafka's spelling reaches (`null.literal`). An unknown
  key, a value that is not what the key wants, or a key given twice is refused naming the
  key, before anything is asked of the cluster.
- `KafkaTopicsGroup` and `KafkaGroupsGroup` rewrite `topics --VERB ...` (`groups --VERB
  ...`) into `topics COMMAND ...` before click parses it, so each verb is an alias of a
  command with the same options and help, and the group's help lists the commands alone
  (the verbs in one line of its epilog, `verbs_epilog`). A command named first is left
  alone: `alter-config --delete K` is that command's option.
- No IO here: parsing only.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Final

import click

from tidelog.tools.client_kafka import ClientError

TOPICS_VERBS: Final = {
    "--create": "create",
    "--describe": "describe",
    "--alter": "add-partitions",
    "--list": "list",
    "--delete": "delete",
}
"""kafka-topics' verbs, each the command it stands for (--alter grows a topic's partitions,
what kafka-topics 3.x --alter does; configs are `topics alter-config`)."""
GROUPS_VERBS: Final = {
    "--list": "list",
    "--describe": "describe",
    "--reset-offsets": "reset-offsets",
    "--delete": "delete",
    "--delete-offsets": "delete-offsets",
}
"""kafka-consumer-groups' verbs, each the command it stands for."""

CONSUMER_FLAGS: Final = {
    "print.key": "print_key",
    "print.value": "print_value",
    "print.offset": "print_offset",
    "print.partition": "print_partition",
    "print.timestamp": "print_timestamp",
    "print.headers": "print_headers",
}
"""kafka-console-consumer's boolean --property keys, by the layout field each sets."""
CONSUMER_TEXTS: Final = {
    "key.separator": "separator",
    "headers.separator": "headers_separator",
    "headers.key.separator": "headers_key_separator",
    "null.literal": "null_literal",
}
"""Its text keys (key.separator separates every field, as in Kafka's formatter)."""

PRODUCER_FLAGS: Final = ("parse.key", "parse.headers", "ignore.error")
"""kafka-console-producer's boolean --property keys."""
PRODUCER_TEXTS: Final = (
    "key.separator",
    "headers.delimiter",
    "headers.separator",
    "headers.key.separator",
)
"""Its text keys (each must not be empty)."""


def named_argument(kind: str, *, required: bool, name: str) -> Callable[..., Any]:
    """The positional KIND (optional on the command line) and `--KIND`, resolved into the
    command's `name` parameter (this module's rules); None when neither is given and it is
    not required."""
    upper = kind.upper()

    def decorate(command: Callable[..., None]) -> Callable[..., None]:
        @functools.wraps(command)
        def wrapper(*args: Any, **kwargs: Any) -> None:
            positional = kwargs.pop(f"{kind}_positional")
            option = kwargs.pop(f"{kind}_option")
            kwargs[name] = one_named(kind, positional, option, required=required)
            command(*args, **kwargs)

        with_option = click.option(
            f"--{kind}",
            f"{kind}_option",
            default=None,
            metavar=upper,
            help=f"The {kind} (Kafka's spelling of the {upper} argument).",
        )(wrapper)
        metavar = upper if required else f"[{upper}]"
        return click.argument(f"{kind}_positional", metavar=metavar, required=False)(with_option)

    return decorate


def topic_argument(*, required: bool = True, name: str = "topic") -> Callable[..., Any]:
    """TOPIC or `--topic TOPIC` (`named_argument`)."""
    return named_argument("topic", required=required, name=name)


def group_argument(*, name: str = "group") -> Callable[..., Any]:
    """GROUP or `--group GROUP` (`named_argument`), as kafka-consumer-groups names it."""
    return named_argument("group", required=True, name=name)


def one_named(
    kind: str, positional: str | None, option: str | None, *, required: bool
) -> str | None:
    """The name given once; click.UsageError when given twice, or not at all if required."""
    upper = kind.upper()
    if positional is not None and option is not None:
        raise click.UsageError(f"give the {kind} once: as {upper} or as --{kind}, not both")
    if required and positional is None and option is None:
        raise click.UsageError(f"name the {kind}: {upper} or --{kind} {upper}")
    return positional if positional is not None else option


property_option = click.option(
    "--property",
    "properties",
    multiple=True,
    metavar="KEY=VALUE",
    help="A Kafka console tool property (see below); repeat for more.",
)


def split_properties(given: tuple[str, ...]) -> dict[str, str]:
    """{key: value} of `--property KEY=VALUE`s; ClientError naming a malformed or repeated
    one."""
    found: dict[str, str] = {}
    for text in given:
        key, sep, value = text.partition("=")
        key = key.strip()
        if not sep or not key:
            raise ClientError(f"bad --property {text!r} (want KEY=VALUE)")
        if key in found:
            raise ClientError(f"--property {key} is given twice")
        found[key] = value
    return found


def boolean(key: str, value: str) -> bool:
    """A property's true or false (any case), as Kafka reads one; ClientError otherwise."""
    lowered = value.strip().lower()
    if lowered not in ("true", "false"):
        raise ClientError(f"--property {key}={value}: want true or false")
    return lowered == "true"


def unknown(key: str, known: list[str]) -> ClientError:
    return ClientError(f"unknown --property {key} (known: {', '.join(known)})")


def consumer_layout(given: tuple[str, ...]) -> dict[str, Any]:
    """The consumer's text layout fields the `--property`s set: {field: value}, separators
    and the null literal as bytes; ClientError naming a key it does not know."""
    known = [*CONSUMER_FLAGS, *CONSUMER_TEXTS]
    layout: dict[str, Any] = {}
    for key, value in split_properties(given).items():
        if key in CONSUMER_FLAGS:
            layout[CONSUMER_FLAGS[key]] = boolean(key, value)
        elif key in CONSUMER_TEXTS:
            layout[CONSUMER_TEXTS[key]] = utf8(value)
        else:
            raise unknown(key, known)
    return layout


@dataclass(frozen=True, slots=True)
class ProducerProperties:
    """What kafka-console-producer's `--property`s say, Kafka's defaults where not given."""

    parse_key: bool | None = None
    """None: not given (then --key-separator alone decides)."""
    key_separator: bytes = b"\t"
    parse_headers: bool = False
    headers_delimiter: bytes = b"\t"
    headers_separator: bytes = b","
    headers_key_separator: bytes = b":"
    ignore_error: bool = False
    key_separator_given: bool = False


def producer_properties(given: tuple[str, ...]) -> ProducerProperties:
    """The producer's `--property`s; ClientError naming an unknown key or a bad value."""
    known = [*PRODUCER_FLAGS, *PRODUCER_TEXTS]
    settings: dict[str, Any] = {}
    for key, value in split_properties(given).items():
        field_name = key.replace(".", "_")
        if key in PRODUCER_FLAGS:
            settings[field_name] = boolean(key, value)
        elif key in PRODUCER_TEXTS:
            if not value:
                raise ClientError(f"--property {key} must not be empty")
            settings[field_name] = utf8(value)
        else:
            raise unknown(key, known)
    return ProducerProperties(**settings, key_separator_given="key.separator" in settings)


def utf8(text: str) -> bytes:
    """Text from the command line as bytes: UTF-8, undecodable bytes as they were given."""
    return text.encode(errors="surrogateescape")


class KafkaVerbsGroup(click.Group):
    """A command group that takes a Kafka tool's verbs (`--create`, ...) for its commands."""

    verbs: dict[str, str] = {}

    def parse_args(self, ctx: click.Context, args: list[str]) -> list[str]:
        if args and args[0] in self.commands:  # a command named: its own options (--delete)
            return super().parse_args(ctx, args)
        verbs = [arg for arg in args if arg in self.verbs]
        if len(verbs) > 1:
            raise click.UsageError(
                f"give one of {', '.join(self.verbs)}, not {' and '.join(verbs)}"
            )
        if verbs:
            args = [self.verbs[verbs[0]], *(arg for arg in args if arg != verbs[0])]
        return super().parse_args(ctx, args)


class KafkaTopicsGroup(KafkaVerbsGroup):
    """`tidelog topics`, which takes kafka-topics' verbs."""

    verbs = TOPICS_VERBS


class KafkaGroupsGroup(KafkaVerbsGroup):
    """`tidelog groups`, which takes kafka-consumer-groups' verbs."""

    verbs = GROUPS_VERBS


def verbs_epilog(tool: str, verbs: dict[str, str], example: str) -> str:
    """One line of a group's help naming the Kafka tool's verbs it takes."""
    named = ", ".join(f"{verb} is {command}" for verb, command in verbs.items())
    return f"{tool}' verbs work too: {named}, e.g. {example}."
