"""The kinds' spec schemas, and reading a spec against them.

The schemas are structural OpenAPI v3 (the host makes CRDs of them). Reading a spec
checks what the CRD would (required properties, types, minimums) so a spec that bypassed
the API server still fails with the field named.
"""

import json
from dataclasses import dataclass
from typing import Any, Dict, Optional


class InvalidSpec(Exception):
    def __init__(self, field: str, message: str):
        super().__init__(f"{field}: {message}")
        self.field = field
        self.message = message


MACHINE_SCHEMA: Dict[str, Any] = {
    "type": "object",
    "required": ["sourceNode", "templateID"],
    "properties": {
        "sourceNode": {"type": "string", "minLength": 1, "description": "Node holding the template; the VM is cloned there."},
        "templateID": {"type": "integer", "minimum": 100, "description": "VMID of the template to clone."},
        "full": {"type": "boolean", "description": "Full clone (default) rather than a linked one."},
        "storage": {"type": "string", "description": "Storage of a full clone's disks (default: the template's)."},
        "numSockets": {"type": "integer", "minimum": 1},
        "numCores": {"type": "integer", "minimum": 1},
        "memoryMiB": {"type": "integer", "minimum": 16},
        "description": {"type": "string", "description": "Text put before hyperplug's ownership lines in the VM description."},
    },
}

CLUSTER_SCHEMA: Dict[str, Any] = {
    "type": "object",
    "properties": {
        "allowedNodes": {"type": "array", "items": {"type": "string"}, "description": "Nodes machines may be cloned to (informational)."},
    },
}

TYPES = {"string": str, "integer": int, "boolean": bool, "array": list, "object": dict}


@dataclass
class MachineSpec:
    source_node: str
    template_id: int
    full: bool = True
    storage: Optional[str] = None
    sockets: Optional[int] = None
    cores: Optional[int] = None
    memory_mib: Optional[int] = None
    description: Optional[str] = None


def check(schema: Dict[str, Any], value: Any, field: str) -> None:
    """Raise InvalidSpec naming the first field of `value` that `schema` refuses."""
    kind = schema.get("type")
    expected = TYPES.get(kind)
    wrong = expected is not None and (not isinstance(value, expected) or (kind == "integer" and isinstance(value, bool)))
    if wrong:
        raise InvalidSpec(field, f"must be {'an' if kind == 'integer' else 'a'} {kind}, not {json_type(value)}")
    if kind == "integer" and "minimum" in schema and value < schema["minimum"]:
        raise InvalidSpec(field, f"must be at least {schema['minimum']}")
    if kind == "string" and len(value) < schema.get("minLength", 0):
        raise InvalidSpec(field, "must not be empty")
    if kind == "object":
        for name in schema.get("required", []):
            if name not in value:
                raise InvalidSpec(f"{field}.{name}", "is required")
        for name, sub in schema.get("properties", {}).items():
            if name in value and value[name] is not None:
                check(sub, value[name], f"{field}.{name}")
    if kind == "array":
        for i, item in enumerate(value):
            check(schema.get("items", {}), item, f"{field}[{i}]")


def json_type(value: Any) -> str:
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "a boolean"
    for name, t in (("an integer", int), ("a number", float), ("a string", str), ("an array", list), ("an object", dict)):
        if isinstance(value, t):
            return name
    return type(value).__name__


def parse(text: str, schema: Dict[str, Any]) -> Dict[str, Any]:
    try:
        value = json.loads(text or "{}")
    except ValueError as e:
        raise InvalidSpec("spec", f"is not JSON: {e}") from None
    check(schema, value, "spec")
    return value


def machine(text: str) -> MachineSpec:
    v = parse(text, MACHINE_SCHEMA)
    return MachineSpec(
        source_node=v["sourceNode"],
        template_id=v["templateID"],
        full=v.get("full", True),
        storage=v.get("storage"),
        sockets=v.get("numSockets"),
        cores=v.get("numCores"),
        memory_mib=v.get("memoryMiB"),
        description=v.get("description"),
    )
