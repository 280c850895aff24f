# SPDX-License-Identifier: LGPL-2.1-or-later
"""A small JSON Schema validator (stdlib only), for the schemas in docs/schema/: the tests must
validate on any machine, never skip because a pip package is missing."""
import json
import os
import re

from prtest import check, check_eq, source_root

SCHEMA_DIR = os.path.join(source_root(), "docs", "schema")


class SchemaError(Exception):
    pass


# Keywords that only describe; everything else must be understood or the test fails, so that a
# schema using more than this validator knows can never pass unchecked.
ANNOTATIONS = {"$schema", "$id", "$comment", "title", "description", "examples", "default", "format",
               "$defs", "definitions", "readOnly", "writeOnly", "deprecated"}
TYPES = {
    "object": lambda v: isinstance(v, dict),
    "array": lambda v: isinstance(v, list),
    "string": lambda v: isinstance(v, str),
    "integer": lambda v: isinstance(v, int) and not isinstance(v, bool),
    "number": lambda v: isinstance(v, (int, float)) and not isinstance(v, bool),
    "boolean": lambda v: isinstance(v, bool),
    "null": lambda v: v is None,
}


class Validator:
    """Draft 2020-12 / draft-07 subset: type, enum, const, properties, required,
    additionalProperties, items, min/max (Length, Items, imum), pattern, allOf/anyOf/oneOf, and
    $ref to "#/..." or to another file of the same directory."""

    def __init__(self, directory):
        self.directory = directory
        self.files = {}

    def load(self, name):
        if name not in self.files:
            with open(os.path.join(self.directory, name)) as f:
                self.files[name] = json.load(f)
        return self.files[name]

    def resolve(self, ref, base):
        name, _, pointer = ref.partition("#")
        name = name or base
        node = self.load(name)
        for part in [p for p in pointer.split("/") if p]:
            node = node[part.replace("~1", "/").replace("~0", "~")]
        return node, name

    def errors(self, value, schema, base, path="$"):
        if schema is True:
            return []
        if schema is False:
            return [f"{path}: no value allowed"]
        errs = []
        for key in schema:
            if key in ANNOTATIONS or key in ("properties", "required", "additionalProperties", "items", "type",
                                             "enum", "const", "minimum", "maximum", "minLength", "maxLength",
                                             "minItems", "maxItems", "pattern", "allOf", "anyOf", "oneOf", "$ref"):
                continue
            raise SchemaError(f"{base}: keyword {key!r} is not supported by the test's validator")
        if "$ref" in schema:
            target, target_base = self.resolve(schema["$ref"], base)
            errs += self.errors(value, target, target_base, path)
        if "type" in schema:
            types = schema["type"] if isinstance(schema["type"], list) else [schema["type"]]
            if not any(TYPES[t](value) for t in types):
                return errs + [f"{path}: {value!r} is not of type {schema['type']}"]
        if "enum" in schema and value not in schema["enum"]:
            errs.append(f"{path}: {value!r} not in {schema['enum']}")
        if "const" in schema and value != schema["const"]:
            errs.append(f"{path}: {value!r} is not {schema['const']!r}")
        if TYPES["number"](value):
            if "minimum" in schema and value < schema["minimum"]:
                errs.append(f"{path}: {value} < minimum {schema['minimum']}")
            if "maximum" in schema and value > schema["maximum"]:
                errs.append(f"{path}: {value} > maximum {schema['maximum']}")
        if isinstance(value, str):
            if "minLength" in schema and len(value) < schema["minLength"]:
                errs.append(f"{path}: shorter than {schema['minLength']}")
            if "maxLength" in schema and len(value) > schema["maxLength"]:
                errs.append(f"{path}: longer than {schema['maxLength']}")
            if "pattern" in schema and not re.search(schema["pattern"], value):
                errs.append(f"{path}: {value!r} does not match {schema['pattern']!r}")
        if isinstance(value, dict):
            props = schema.get("properties", {})
            for name in schema.get("required", []):
                if name not in value:
                    errs.append(f"{path}: required property {name!r} missing")
            for name, v in value.items():
                if name in props:
                    errs += self.errors(v, props[name], base, f"{path}.{name}")
                elif "additionalProperties" in schema:
                    errs += self.errors(v, schema["additionalProperties"], base, f"{path}.{name}")
        if isinstance(value, list):
            if "items" in schema:
                for i, v in enumerate(value):
                    errs += self.errors(v, schema["items"], base, f"{path}[{i}]")
            if "minItems" in schema and len(value) < schema["minItems"]:
                errs.append(f"{path}: fewer than {schema['minItems']} items")
            if "maxItems" in schema and len(value) > schema["maxItems"]:
                errs.append(f"{path}: more than {schema['maxItems']} items")
        for sub in schema.get("allOf", []):
            errs += self.errors(value, sub, base, path)
        if "anyOf" in schema and all(self.errors(value, s, base, path) for s in schema["anyOf"]):
            errs.append(f"{path}: matches none of anyOf")
        if "oneOf" in schema:
            matching = sum(1 for s in schema["oneOf"] if not self.errors(value, s, base, path))
            if matching != 1:
                errs.append(f"{path}: matches {matching} of oneOf, want exactly 1")
        return errs


def declared_type(schema, validator, base):
    """The event type a schema is for: its properties.type const (or single-value enum)."""
    if "$ref" in schema and "properties" not in schema:
        schema, base = validator.resolve(schema["$ref"], base)
    t = schema.get("properties", {}).get("type", {})
    if "const" in t:
        return t["const"]
    if len(t.get("enum", [])) == 1:
        return t["enum"][0]
    for sub in schema.get("allOf", []):
        found = declared_type(sub, validator, base)
        if found:
            return found
    return None


def schemas_by_type():
    validator = Validator(SCHEMA_DIR)
    check(os.path.isdir(SCHEMA_DIR), f"{SCHEMA_DIR} exists")
    by_type = {}
    for name in sorted(os.listdir(SCHEMA_DIR)):
        if name.endswith(".json"):
            t = declared_type(validator.load(name), validator, name)
            if t:
                check(t not in by_type, f"one schema for type {t} ({by_type.get(t)} and {name})")
                by_type[t] = name
    return validator, by_type


def validator_self_test():
    """The validator rejects what it must: a validator that accepts everything proves nothing."""
    v = Validator(SCHEMA_DIR)
    schema = {"type": "object", "required": ["type", "pid"], "additionalProperties": False,
              "properties": {"type": {"const": "exec"}, "pid": {"type": "integer", "minimum": 0},
                             "argv": {"type": "array", "items": {"type": "string"}},
                             "flag": {"type": "boolean"}, "kind": {"enum": ["a", "b"]}}}
    check_eq(v.errors({"type": "exec", "pid": 1, "argv": ["x"], "flag": True, "kind": "a"}, schema, "-"), [],
             "validator accepts a valid object")
    for bad in ({"type": "exec"}, {"type": "exit", "pid": 1}, {"type": "exec", "pid": -1},
                {"type": "exec", "pid": True}, {"type": "exec", "pid": 1, "argv": [1]},
                {"type": "exec", "pid": 1, "extra": 0}, {"type": "exec", "pid": 1, "kind": "c"},
                {"type": "exec", "pid": 1.5}, [], "x"):
        check(v.errors(bad, schema, "-"), f"validator rejects {bad!r}")


_checked = None  # (validator, by_type), made once: the validator tested, the schemas loaded


def validate(msg):
    """Every line a client gets (events, hello and error lines) matches the published schema of
    its type; a Failure naming the differences if not."""
    global _checked
    if _checked is None:
        validator_self_test()
        _checked = schemas_by_type()
    validator, by_type = _checked
    name = by_type.get(msg.get("type"))
    check(name is not None, f"a schema for type {msg.get('type')!r}")
    check_eq(validator.errors(msg, validator.load(name), name), [], f"schema errors of {msg}")
