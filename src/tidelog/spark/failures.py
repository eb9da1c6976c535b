"""How tidelog's errors in a Spark job reach the user: as one line, first.

PySpark runs the source's and sink's code in Python workers. An exception there reaches the
driver as the text `pyspark.util.handle_worker_exception` makes of it, the traceback first
and the exception's own line last, which Spark wraps: `[PYTHON_DATA_SOURCE_ERROR] Failed to
initialize Python data source reader: Traceback ...`, or a failed task's `PythonException`.
With SPARK_HIDE_TRACEBACK set in the worker's environment the text is the exception's line
alone (`tidelog.spark.options.SparkOptionError: unknown option ...`), so it follows Spark's
wrapper on the first line of what the user reads. (Spark's simplified traceback, on by
default, only drops PySpark's frames; the JVM stack trace setting only adds to the end.)

Rules of this file:
- `one_line_errors` wraps the public methods of the source's and sink's classes: in a
  PySpark worker, a TidelogError that leaves one sets SPARK_HIDE_TRACEBACK in that worker's
  environment before it goes on. Every PySpark worker exits once it has reported an
  exception, so the setting ends with it; any other exception (a bug) keeps its traceback.
  Outside a PySpark worker (a test calling the methods) nothing is set.
- On the driver, `tidelog_cause` finds that line in a PySpark exception's text, and
  `known_failures` turns such an exception into SparkJobFailed, a TidelogError whose message
  is that line, for a command's `error: ...`; an exception without one goes on unchanged.
"""

from __future__ import annotations

import functools
import inspect
import os
import re
import sys
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any, Final, TypeVar

from pyspark.errors import PySparkException

from tidelog.errors import TidelogError

HIDE_TRACEBACK_ENV: Final = "SPARK_HIDE_TRACEBACK"
"""Read by pyspark.util.handle_worker_exception when a worker reports an exception."""
PYSPARK_PACKAGE: Final = "pyspark."
TIDELOG_PACKAGE: Final = "tidelog."
CAUSE: Final = re.compile(r"\btidelog(?:\.[a-z_][a-z0-9_]*)+\.([A-Z]\w*): ([^\n]+)")
"""A tidelog exception's line as Python prints it: `tidelog.module.ErrorName: message`."""
WRAPPED_MARK: Final = "__tidelog_one_line__"

Kind = TypeVar("Kind", bound=type)


class SparkJobFailed(TidelogError):
    """A Spark job failed because tidelog's code in a worker raised a TidelogError; the
    message is that error's line."""


def in_pyspark_worker() -> bool:
    """Whether this process is a PySpark worker (its main module is one of PySpark's)."""
    spec = getattr(sys.modules.get("__main__"), "__spec__", None)
    return spec is not None and str(spec.name).startswith(PYSPARK_PACKAGE)


def hide_traceback_here() -> None:
    if in_pyspark_worker():
        os.environ[HIDE_TRACEBACK_ENV] = "1"


def one_line(method: Callable[..., Any]) -> Callable[..., Any]:
    """`method`, setting SPARK_HIDE_TRACEBACK (in a worker) when a TidelogError leaves it;
    a generator method is wrapped as a generator."""
    if inspect.isgeneratorfunction(method):

        @functools.wraps(method)
        def generating(*args: Any, **kwargs: Any) -> Iterator[Any]:
            try:
                yield from method(*args, **kwargs)
            except TidelogError:
                hide_traceback_here()
                raise

        wrapped: Callable[..., Any] = generating
    else:

        @functools.wraps(method)
        def calling(*args: Any, **kwargs: Any) -> Any:
            try:
                return method(*args, **kwargs)
            except TidelogError:
                hide_traceback_here()
                raise

        wrapped = calling
    setattr(wrapped, WRAPPED_MARK, True)
    return wrapped


def one_line_errors(cls: Kind) -> Kind:
    """The class, its public methods written in tidelog (its own and inherited) wrapped by
    `one_line`."""
    for name in dir(cls):
        value = inspect.getattr_static(cls, name)
        if name.startswith("_") or not inspect.isfunction(value):
            continue
        if value.__module__.startswith(TIDELOG_PACKAGE) and not hasattr(value, WRAPPED_MARK):
            setattr(cls, name, one_line(value))
    return cls


def tidelog_cause(error: BaseException) -> str | None:
    """The message of the tidelog error behind a Spark job's failure, or None."""
    found = CAUSE.search(str(error))
    return None if found is None else found.group(2).strip()


@contextmanager
def known_failures() -> Iterator[None]:
    """Run a Spark job: a PySparkException caused by a tidelog error is SparkJobFailed."""
    try:
        yield
    except PySparkException as error:
        cause = tidelog_cause(error)
        if cause is None:
            raise
        raise SparkJobFailed(cause) from error
