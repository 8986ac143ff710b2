"""Errors of the retriever: each carries one line that names the culprit (file, row, field)."""

from __future__ import annotations

from turnrl.errors import TurnrlInputError


class RetrieverError(TurnrlInputError):
    """Base class; `str(err)` is a single line fit for a command-line error message."""


class CorpusError(RetrieverError):
    """A corpus file is missing, unreadable, or has a bad row."""


class IndexLoadError(RetrieverError):
    """An index directory is missing, incomplete or corrupt."""


class MissingExtraError(RetrieverError):
    """An optional dependency (the `dense` extra) is not installed."""


class RetrieverUnavailable(RetrieverError):
    """A retriever server could not be reached or kept failing."""


class RetrieverRequestError(RetrieverError):
    """The retriever server rejected a request (4xx): retrying would not help."""
