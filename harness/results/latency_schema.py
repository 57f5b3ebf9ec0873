"""The latency model's JSON Schema (shipped in the package) and validation, with one-line errors.

Besides the schema, two checks JSON Schema cannot express: every quantile grid has one value per level and
never decreases.
"""

from __future__ import annotations

import json
from functools import cache
from importlib import resources
from itertools import pairwise
from typing import Any

from harness.errors import UsageError

SCHEMA_RESOURCE = "latency_model.v1.schema.json"


@cache
def latency_model_schema() -> dict[str, Any]:
    text = resources.files("harness.results").joinpath("schemas", SCHEMA_RESOURCE).read_text()
    schema: dict[str, Any] = json.loads(text)
    return schema


def validate_latency_model(document: Any, source: str = "latency model") -> None:
    """Raise UsageError naming the first problem (its JSON path), else return."""
    import jsonschema

    validator = jsonschema.Draft202012Validator(latency_model_schema())
    error = jsonschema.exceptions.best_match(validator.iter_errors(document))
    if error is not None:
        where = "/".join(str(part) for part in error.absolute_path) or "(top)"
        raise UsageError(f"{source} does not match latency_model v1 at {where}: {error.message[:200]}")
    levels = document["quantile_levels"]
    if any(b <= a for a, b in pairwise(levels)):
        raise UsageError(f"{source}: quantile_levels must increase")
    for m, model in enumerate(document["models"]):
        for b, bucket in enumerate(model["buckets"]):
            for name, metric in bucket["metrics"].items():
                values = metric["quantiles"]
                where = f"models/{m}/buckets/{b}/metrics/{name}"
                if len(values) != len(levels):
                    raise UsageError(f"{source}: {where} has {len(values)} quantiles for {len(levels)} levels")
                if any(y < x for x, y in pairwise(values)):
                    raise UsageError(f"{source}: {where} quantiles decrease")
