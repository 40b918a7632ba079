"""Typed errors. Each carries its payload; the CLI maps them to exit codes and one-line messages.

``UsageError`` subclasses mean unusable input (exit 2); ``CheckFailed`` subclasses mean a check
ran and failed (exit 1).
"""

from __future__ import annotations

import difflib
from collections.abc import Iterable, Sequence
from typing import Any

EXIT_OK = 0
EXIT_CHECK_FAILED = 1
EXIT_USAGE = 2


class EvalsentryError(Exception):
    """Base of every error evalsentry raises on purpose."""

    exit_code = EXIT_USAGE


class UsageError(EvalsentryError):
    """Unusable input: a missing file, a malformed document, a bad name. Exit code 2."""

    exit_code = EXIT_USAGE


class CheckFailed(EvalsentryError):
    """A check ran and failed: data integrity, a regression. Exit code 1."""

    exit_code = EXIT_CHECK_FAILED


def did_you_mean(value: str, choices: Iterable[str], *, cutoff: float = 0.6) -> str:
    """Return `` Did you mean 'x'?`` for the closest choice, or an empty string.

    ``cutoff`` is difflib's similarity floor (a caller expecting abbreviations such as ``acc``
    for ``accuracy`` lowers it); a choice that begins with ``value`` is the fallback when none
    is close enough.
    """
    known = list(choices)
    close = difflib.get_close_matches(value, known, n=1, cutoff=cutoff)
    close = close or ([choice for choice in known if choice.startswith(value)][:1] if value else [])
    return f" Did you mean '{close[0]}'?" if close else ""


class ConfigError(UsageError):
    """A configuration document is malformed; names the file and the field."""

    def __init__(self, path: object, field: str, problem: str) -> None:
        self.path, self.field, self.problem = str(path), field, problem
        where = f"{self.path}: {field}: " if field else f"{self.path}: "
        super().__init__(where + problem)


class InvalidName(UsageError):
    """A model, evalset or stage name that is not allowed (path tricks, odd characters)."""

    def __init__(self, kind: str, name: str, rule: str) -> None:
        self.kind, self.name = kind, name
        super().__init__(f"invalid {kind} name {name!r}: {rule}")


# --- checkpoints ------------------------------------------------------------------------------


class CheckpointError(UsageError):
    """A checkpoint cannot be used. ``path`` names the file."""

    def __init__(self, path: object, message: str) -> None:
        self.path = str(path)
        super().__init__(f"{self.path}: {message}")


class CheckpointNotFound(CheckpointError):
    """The checkpoint file does not exist."""

    def __init__(self, path: object) -> None:
        super().__init__(path, "checkpoint not found; check the path or the registry entry")


class CheckpointCorrupt(CheckpointError):
    """The file is truncated, corrupt or not a checkpoint written by ``save_checkpoint``."""

    def __init__(self, path: object, reason: str) -> None:
        self.reason = reason
        super().__init__(path, f"corrupt or truncated checkpoint ({reason}); re-save it")


class CheckpointChanged(CheckpointError):
    """The file's sha256 differs from the one pinned at registration."""

    def __init__(self, path: object, expected: str, actual: str) -> None:
        self.expected, self.actual = expected, actual
        super().__init__(
            path,
            f"checkpoint changed since registration (sha256 expected {expected[:12]}, "
            f"got {actual[:12]}); register the new file as a new version",
        )


class UnsafeCheckpoint(CheckpointError):
    """The payload asks to import or run code; refused, nothing executed."""

    def __init__(self, path: object, detail: str) -> None:
        self.detail = detail
        super().__init__(
            path,
            "refused: the payload tries to load code, not just tensors "
            f"({detail}); only checkpoints written with evalsentry.save_checkpoint are accepted",
        )


class LineageMissing(CheckpointError):
    """Lineage fields are missing; all of them are listed."""

    def __init__(self, path: object, fields: Sequence[str]) -> None:
        self.fields = list(fields)
        super().__init__(
            path,
            f"lineage is missing {', '.join(self.fields)}; save with evalsentry.save_checkpoint"
            + (" or pass --factory at registration" if self.fields == ["model.factory"] else ""),
        )


class NoLineage(CheckpointError):
    """A checkpoint that records no lineage at all (a bare state dict); both ways to add it."""

    def __init__(self, path: object, what: str) -> None:
        self.what = what
        super().__init__(
            path,
            f"{what} records no lineage (code commit, training data, config), so it is not "
            "accepted; save it with evalsentry.save_checkpoint(model, path, metrics=..., "
            "config=..., seed=..., data=...) in the training code, or register it with "
            "--factory package.module:Class --lineage FILE (JSON or YAML with git_sha, "
            "data_sha, config and a timezone-aware timestamp_utc; seed optional)",
        )


class UnknownLayout(CheckpointError):
    """The payload is readable but is neither a checkpoint layout nor a bare state dict."""

    def __init__(self, path: object, found: str) -> None:
        self.found = found
        super().__init__(
            path,
            f"not a checkpoint layout evalsentry reads (found {found}); save "
            "{'model_state_dict': ..., 'lineage': {...}} (evalsentry.save_checkpoint writes it), "
            "or a bare model.state_dict() and register it with --lineage FILE",
        )


class FactoryError(UsageError):
    """The model factory ``module:callable`` cannot be imported or called."""

    def __init__(self, factory: str, problem: str) -> None:
        self.factory = factory
        super().__init__(f"model factory {factory!r}: {problem}")


class StateDictMismatch(CheckpointError):
    """The weights do not fit the architecture the factory builds."""

    def __init__(
        self, path: object, missing: Sequence[str], unexpected: Sequence[str], detail: str = ""
    ) -> None:
        self.missing, self.unexpected = list(missing), list(unexpected)
        parts = [detail] if detail else []
        if self.missing:
            parts.append(f"missing keys {', '.join(self.missing[:10])}")
        if self.unexpected:
            parts.append(f"unexpected keys {', '.join(self.unexpected[:10])}")
        super().__init__(path, "weights do not fit the model factory: " + "; ".join(parts))


# --- registry ---------------------------------------------------------------------------------


class RegistryError(UsageError):
    """A registry lookup or change that cannot be done."""


class NotRegistered(RegistryError):
    """No such model, version or stage in the registry."""

    def __init__(self, what: str, name: str = "", known: Iterable[str] = ()) -> None:
        super().__init__(f"{what} is not registered.{did_you_mean(name, known)}".rstrip("."))


class VersionNotRegistered(NotRegistered):
    """The model is registered but not this version; the versions it has are listed."""

    def __init__(self, model: str, version: int, versions: Sequence[int]) -> None:
        self.model, self.version, self.versions = model, version, list(versions)
        shown = ", ".join(f"v{v}" for v in self.versions[-10:])
        more = "" if len(self.versions) <= 10 else f" (and {len(self.versions) - 10} older)"
        RegistryError.__init__(
            self, f"{model}@v{version} is not registered; {model} has {shown or 'none'}{more}"
        )


class NothingToEvaluate(RegistryError):
    """A run resolved no checkpoint: an empty registry, unknown models, or empty stages."""


# --- evalsets ---------------------------------------------------------------------------------


class EvalsetError(UsageError):
    """An evalset cannot be used as specified."""


class EvalsetTampered(CheckFailed):
    """A frozen evalset's file differs from its manifest: missing, extra or changed."""

    def __init__(self, path: object, expected: str, actual: str) -> None:
        self.path, self.expected, self.actual = str(path), expected, actual
        super().__init__(
            f"{self.path}: evalset file changed since freeze (sha256 expected {expected}, "
            f"got {actual}); restore it, or freeze a new evalset version"
        )


class EvalsetInvalid(CheckFailed):
    """The evalset's data breaks its expectation suite."""

    def __init__(self, name: str, failures: Sequence[dict[str, Any]]) -> None:
        self.name, self.failures = name, list(failures)
        listed = "; ".join(
            f"{f['expectation']}({f.get('column') or ''}) unexpected={f.get('unexpected_count')}"
            for f in self.failures[:5]
        )
        super().__init__(f"evalset {name!r} fails {len(self.failures)} expectation(s): {listed}")


# --- evaluation, history, gate ----------------------------------------------------------------


class NonFiniteOutput(CheckFailed):
    """The model produced NaN or inf; the first example ids are listed."""

    def __init__(self, example_ids: Sequence[object], count: int) -> None:
        self.example_ids, self.count = list(example_ids), count
        shown = ", ".join(str(i) for i in self.example_ids)
        super().__init__(f"model produced NaN/inf outputs for {count} example(s), first: {shown}")


class HistoryError(UsageError):
    """The history store cannot be read or written."""


# --- trust: what a checkpoint may run and how large it may be ---------------------------------


class UntrustedFactory(FactoryError):
    """A checkpoint or registry entry names a factory ``trusted_factories`` does not admit."""


class CheckpointTooLarge(CheckpointError):
    """The file, or what its archive inflates to, is over ``max_checkpoint_bytes``; nothing read."""

    def __init__(self, path: object, what: str, size: int, limit: int) -> None:
        self.size, self.limit = size, limit
        super().__init__(
            path,
            f"refused unread: {what} {readable_bytes(size)}, more than max_checkpoint_bytes: "
            f"{readable_bytes(limit)}; raise it in evalsentry.yaml only for a checkpoint you expect to "
            "be that large",
        )


class ModelMismatch(CheckpointError):
    """The checkpoint names another factory or other kwargs than the pinned ones."""

    def __init__(self, path: object, own: dict[str, Any], pinned: dict[str, Any]) -> None:
        self.own, self.pinned = own, pinned
        super().__init__(
            path,
            f"the checkpoint names model {_model(own)}, not the pinned {_model(pinned)}; "
            "what runs is what was registered: register this file as a new version",
        )


class RegistryEntryInvalid(ConfigError, RegistryError):
    """A registry entry that is malformed, or does not match its file's name; names both."""


def readable_bytes(size: int) -> str:
    """``4294967296 bytes (4.0 GiB)``: exact, and readable."""
    for unit, scale in (("GiB", 2**30), ("MiB", 2**20), ("KiB", 2**10)):
        if size >= scale:
            return f"{size} bytes ({size / scale:.1f} {unit})"
    return f"{size} bytes"


def _model(model: dict[str, Any], limit: int = 200) -> str:
    """``pkg.mod:Net(channels=16)``, cut to ``limit`` characters."""
    kwargs = ", ".join(f"{k}={v!r}" for k, v in sorted(model.get("kwargs", {}).items()))
    text = f"{model.get('factory')}({kwargs})"
    return text if len(text) <= limit else text[: limit - 1] + "…"


REASON_CHARS = 300  # of an exception's message in a failure reason: the cause, not a dump


def exception_line(exc: BaseException) -> str:
    """``Type: message`` on one line (whitespace collapsed, cut to ``REASON_CHARS``)."""
    message = " ".join(str(exc).split())
    if len(message) > REASON_CHARS:
        message = message[: REASON_CHARS - 1].rstrip() + "…"
    return f"{type(exc).__name__}: {message}" if message else type(exc).__name__
