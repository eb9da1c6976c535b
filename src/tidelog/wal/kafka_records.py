"""kafka-python's record batch codec, imported once for the whole layer.

Importing `kafka` loads its admin client, whose schema loader calls a deprecated
importlib.resources function; the warning is about kafka-python, not us, so it is silenced
here and only here (the tests turn every other warning into an error).
"""

from __future__ import annotations

import warnings

with warnings.catch_warnings():
    warnings.simplefilter("ignore", DeprecationWarning)
    from kafka.record.default_records import DefaultRecordBatch, DefaultRecordBatchBuilder

__all__ = ["DefaultRecordBatch", "DefaultRecordBatchBuilder"]
