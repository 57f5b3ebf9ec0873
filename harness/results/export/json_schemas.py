"""The JSON Schemas stampede ships (harness/results/schemas/) and the one way a document is checked against one.

The latency model, summary.json and compare.json are read by other people's programs; each is validated before it
is written (and the latency model when read), and a mismatch is one line naming its JSON path.
"""

from __future__ import annotations

import json
from functools import cache
from importlib import resources
from typing import Any

from harness.errors import UsageError


@cache
def load_schema(resource: str) -> dict[str, Any]:
    """A schema file under harness/results/schemas/, parsed once."""
    text = resources.files("harness.results").joinpath("schemas", resource).read_text()
    schema: dict[str, Any] = json.loads(text)
    return schema


class SchemaMismatch(UsageError):
    """A document departs from its schema: one line naming the JSON path. Bad input when the user gave the
    document; stampede's own bug when stampede built it (a writer may tell the two apart by catching this)."""


def check_against(document: Any, resource: str, what: str, source: str) -> None:
    """Raise SchemaMismatch `{source} does not match {what} at {path}: {message}` for the best-matching error."""
    import jsonschema  # deferred: a run that writes no document never pays for it

    validator = jsonschema.Draft202012Validator(load_schema(resource))
    error = jsonschema.exceptions.best_match(validator.iter_errors(document))
    if error is not None:
        where = "/".join(str(part) for part in error.absolute_path) or "(top)"
        raise SchemaMismatch(f"{source} does not match {what} at {where}: {error.message[:200]}")


__all__ = ["SchemaMismatch", "check_against", "load_schema"]
