"""JSON Schema of the spec, for editors and CI systems."""

from __future__ import annotations

from typing import Any

from gpuclus.spec.models import ClusterSpec

SCHEMA_ID = "https://gpuclus.dev/schema/gpuclus-v1.json"


def spec_json_schema() -> dict[str, Any]:
    schema = ClusterSpec.model_json_schema(by_alias=True, mode="validation")
    schema["$schema"] = "https://json-schema.org/draft/2020-12/schema"
    schema["$id"] = SCHEMA_ID
    schema["title"] = "gpuclus cluster spec (apiVersion gpuclus/v1)"
    return schema
