"""The shape of a frozen evalset's stored suite, ``expectations.json``, checked without GX.

Reading a suite (:func:`evalsentry.evalsets.evalset.read_suite`) checks its shape only; building
and running it is :mod:`evalsentry.evalsets.validation`'s, which is imported where an evalset is
validated, not where one is only read (the gate).
"""

from __future__ import annotations

from typing import Any

from pydantic import AliasChoices, BaseModel, ConfigDict, Field

#: How to repair a stored suite that GX cannot build.
SUITE_FIX = (
    "restore the file as frozen (e.g. from version control), or freeze a new evalset version"
)


class SuiteExpectation(BaseModel):
    """One expectation of a stored suite: GX's own fields beyond these are GX's to check."""

    model_config = ConfigDict(extra="ignore", frozen=True, defer_build=True)
    type: str = Field(min_length=1)
    # Read from "kwargs", a name pydantic's mypy plugin keeps for the constructor's **kwargs.
    arguments: dict[str, Any] = Field(validation_alias=AliasChoices("kwargs"))


class SuiteDocument(BaseModel):
    """The shape of ``expectations.json`` (a Great Expectations suite, as GX writes it)."""

    model_config = ConfigDict(extra="forbid", frozen=True, defer_build=True)
    name: str = Field(min_length=1)
    expectations: list[SuiteExpectation]
    id: str | None = None
    meta: dict[str, Any] | None = None
    notes: str | list[str] | None = None
    suite_parameters: dict[str, Any] | None = None
