"""A rule weakened for the span of a `with` block, for the tests that show a model's walk
catches each weakening (tests/test_isr_core.py, tests/test_membership_model.py)."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any


@contextmanager
def patched(target: object, name: str, value: Callable[..., Any]) -> Iterator[None]:
    """`target.name` is `value` inside the block, and what it was again after it."""
    old = getattr(target, name)
    setattr(target, name, value)
    try:
        yield
    finally:
        setattr(target, name, old)
