"""The latency model's JSON Schema (shipped in the package) and validation, with one-line errors.

Besides the schema, two checks JSON Schema cannot express: every quantile grid has one value per level and
never decreases.
"""

from __future__ import annotations

from itertools import pairwise
from typing import Any

from harness.errors import UsageError
from harness.results.export.json_schemas import check_against, load_schema

SCHEMA_RESOURCE = "latency_model.v1.schema.json"


def latency_model_schema() -> dict[str, Any]:
    return load_schema(SCHEMA_RESOURCE)


def validate_latency_model(document: Any, source: str = "latency model") -> None:
    """Raise UsageError naming the first problem (its JSON path), else return."""
    check_against(document, SCHEMA_RESOURCE, "latency_model v1", source)
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
