"""One exception tree for MIRAGE-KG. Every message says what went wrong, where, and what to do.

    MirageError
     +-- InputError            bad user input: a file, line and problem (``path``, ``line``)
     +-- UnknownEntityError    an id or name that is not in the graph
     +-- AmbiguousNameError    a name that stands for several different concepts (lists their ids)
     +-- StoreError            the store cannot be opened, read or written
     |    +-- EndpointError    a remote SPARQL endpoint failed (``retryable`` says whether a retry may help)
     +-- QueryError            a SPARQL query is invalid, not read-only, or timed out
     |    +-- UpdateRefusedError  an update (INSERT, DELETE, LOAD, ...) where only a query is allowed
     +-- MissingExtraError     an optional dependency is not installed (names the pip command)

    StoreStateWarning (a UserWarning): a store changed outside mirage-kg, so the caches built from it are rebuilt
"""

from __future__ import annotations

from pathlib import Path


class MirageError(Exception):
    """Root of all MIRAGE-KG errors."""


class InputError(MirageError):
    """Bad input data, located by file and line when known."""

    def __init__(self, problem: str, path: str | Path | None = None, line: int | None = None) -> None:
        self.problem = problem
        self.path = str(path) if path is not None else None
        self.line = line
        where = ""
        if self.path is not None:
            where = f"{self.path}:{line}: " if line is not None else f"{self.path}: "
        super().__init__(f"{where}{problem}")


class UnknownEntityError(MirageError):
    """An entity id or name that the graph does not hold."""

    def __init__(self, entity: str, hint: str = "") -> None:
        self.entity = entity
        msg = f"unknown entity {entity!r}"
        super().__init__(f"{msg}: {hint}" if hint else f"{msg}; try `mirage-kg link` to find its id")


class AmbiguousNameError(MirageError):
    """A name that stands for several different concepts: the message lists their ids to choose from."""

    def __init__(self, name: str, listing: str) -> None:
        self.name = name
        super().__init__(f"{name!r} is ambiguous: {listing}. Give one of these ids instead.")


class StoreError(MirageError):
    """The store cannot be opened, read or written."""


class EndpointError(StoreError):
    """A remote SPARQL endpoint failed."""

    def __init__(self, message: str, endpoint: str, retryable: bool = False) -> None:
        self.endpoint = endpoint
        self.retryable = retryable
        super().__init__(f"SPARQL endpoint {endpoint}: {message}")


class QueryError(MirageError):
    """A query is invalid, not allowed, or took too long."""


class UpdateRefusedError(QueryError):
    """A SPARQL update sent where only read-only queries are allowed."""


class UpdateInterrupted(KeyboardInterrupt):
    """Ctrl-C during an update that commits in one step: ``applied`` says whether it committed (True), did not and
    never will (False), or cannot be known here (None: an endpoint was applying it). ``abandoned``: the
    uncommitted transaction still runs in this process, which must end now (its rollback is recorded on disk)."""

    def __init__(self, message: str, applied: bool | None, abandoned: bool = False) -> None:
        super().__init__(message)
        self.applied = applied
        self.abandoned = abandoned


class MissingExtraError(MirageError):
    """An optional dependency is missing."""

    def __init__(self, package: str, extra: str) -> None:
        self.package = package
        self.extra = extra
        super().__init__(f"{package} is not installed; run: pip install 'mirage-kg[{extra}]'")


class StoreStateWarning(UserWarning):
    """A store was changed outside mirage-kg (or is being written): the caches built from it are rebuilt, or it is
    counted whole to key them. Not an error: every answer stays right; the message says what it costs."""
