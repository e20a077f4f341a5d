"""Validate reports against the JSON Schemas shipped in the package (report/schema/)."""

from __future__ import annotations

import json
from functools import cache
from importlib import resources
from typing import Any

import jsonschema


@cache
def validator(name: str = "report") -> jsonschema.Draft202012Validator:
    text = resources.files("skewscope.report").joinpath(f"schema/{name}.schema.json").read_text()
    schema = json.loads(text)
    jsonschema.Draft202012Validator.check_schema(schema)
    return jsonschema.Draft202012Validator(schema)


def assert_valid(doc: Any, name: str = "report") -> None:
    """Fail with every violation listed, each with its JSON path."""
    errors = sorted(validator(name).iter_errors(doc), key=lambda e: e.json_path)
    assert not errors, "\n".join(f"{e.json_path}: {e.message}" for e in errors)
