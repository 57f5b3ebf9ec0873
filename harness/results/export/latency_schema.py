"""The latency model's JSON Schema (shipped in the package) and validation, with one-line errors.

Besides the schema, two checks JSON Schema cannot express: every quantile grid has one value per level and
never decreases. `stampede export` writes version 2 (steps, fork versus fresh starts, the image cache); a
version-1 file is checked against the version-1 schema and reads as it always did.
"""

from __future__ import annotations

from itertools import pairwise
from typing import Any

from harness.errors import UsageError
from harness.results.export.json_schemas import check_against, load_schema

LATENCY_MODEL_VERSION = 2
SCHEMA_RESOURCES: dict[int, str] = {1: "latency_model.v1.schema.json", 2: "latency_model.v2.schema.json"}
SCHEMA_RESOURCE = SCHEMA_RESOURCES[LATENCY_MODEL_VERSION]


def latency_model_schema(version: int = LATENCY_MODEL_VERSION) -> dict[str, Any]:
    return load_schema(SCHEMA_RESOURCES[version])


def validate_latency_model(document: Any, source: str = "latency model") -> None:
    """Raise UsageError naming the first problem (its JSON path), else return; a document is checked against the
    schema of the version it declares (1 or 2; another is checked against the newest, which names the mismatch)."""
    declared = document.get("version") if isinstance(document, dict) else None
    version = declared if declared in SCHEMA_RESOURCES and not isinstance(declared, bool) else LATENCY_MODEL_VERSION
    check_against(document, SCHEMA_RESOURCES[version], f"latency_model v{version}", source)
    levels = document["quantile_levels"]
    if any(b <= a for a, b in pairwise(levels)):
        raise UsageError(f"{source}: quantile_levels must increase")
    for m, model in enumerate(document["models"]):
        for b, bucket in enumerate(model["buckets"]):
            grids = [(f"metrics/{name}", metric) for name, metric in bucket["metrics"].items()]
            grids += [(f"steps/{name}", metric) for name, metric in bucket.get("steps", {}).items()]
            grids += [(f"starts/{name}", metric) for name, metric in bucket.get("starts", {}).items()]
            for name, metric in grids:
                values = metric["quantiles"]
                where = f"models/{m}/buckets/{b}/{name}"
                if len(values) != len(levels):
                    raise UsageError(f"{source}: {where} has {len(values)} quantiles for {len(levels)} levels")
                if any(y < x for x, y in pairwise(values)):
                    raise UsageError(f"{source}: {where} quantiles decrease")
