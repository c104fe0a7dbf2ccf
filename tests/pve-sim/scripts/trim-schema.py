#!/usr/bin/env python3
"""Derive schema/params.json from the official PVE API schema subset.

Keeps, per PVE version and endpoint, only what parameter validation needs
(type, format, enum, bounds, pattern, optional, default_key, aliases), the
permission check expression, and the value types of `GET .../config` returns. Run from the repository root:
    python3 tests/pve-sim/scripts/trim-schema.py
"""
import json, os

SRC = os.path.join(os.path.dirname(__file__), "../../../../shared/reference/pve/pve-api-schema-capi-subset.json")
DST = os.path.join(os.path.dirname(__file__), "../schema/params.json")
KEEP = ["type", "enum", "minimum", "maximum", "maxLength", "minLength", "pattern",
        "optional", "default_key", "alias", "keyAlias"]

def trim(p):
    out = {k: p[k] for k in KEEP if k in p}
    f = p.get("format")
    if isinstance(f, str):
        out["format"] = f
    elif isinstance(f, dict):
        out["format"] = {k: trim(v) for k, v in f.items()}
    return out

src = json.load(open(SRC))
res = {}
for ver, eps in src["endpoints"].items():
    r = {}
    for name, ep in eps.items():
        params = ep.get("parameters", {}) or {}
        props = params.get("properties", {}) or {}
        e = {"properties": {k: trim(v) for k, v in props.items()}}
        perms = ep.get("permissions") or {}
        if "check" in perms:
            e["permission_check"] = perms["check"]
        if name == "GET /nodes/{node}/qemu/{vmid}/config":
            e["return_types"] = {k: v.get("type", "string") for k, v in ep["returns"]["properties"].items()}
        r[name] = e
    res[ver] = r
json.dump(res, open(DST, "w"), sort_keys=True, separators=(",", ":"))
