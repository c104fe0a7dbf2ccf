#!/usr/bin/env python3
"""Derive schema/params.json from the official PVE API schema.

Sources: the official subset kept in the repository
(`reference/pve-api-schema-capi-subset.json`) and `schema/official-extra.json` (the
endpoints pve-sim serves beyond it, see extract-schema.py). Keeps, per PVE version and
endpoint, only what parameter validation needs (type, format, enum, bounds, pattern,
optional, default_key, aliases, array items), the permission check expression, and the
value types of `GET .../config` returns. Run from anywhere:
    python3 tests/pve-sim/scripts/trim-schema.py
"""
import json, os

HERE = os.path.dirname(os.path.abspath(__file__))
DST = os.path.join(HERE, "../schema/params.json")
SUBSET = os.path.join(HERE, "../reference/pve-api-schema-capi-subset.json")
EXTRA = os.path.join(HERE, "../schema/official-extra.json")
KEEP = ["type", "enum", "minimum", "maximum", "maxLength", "minLength", "pattern",
        "optional", "default_key", "alias", "keyAlias"]


def trim(p):
    out = {k: p[k] for k in KEEP if k in p}
    f = p.get("format")
    if isinstance(f, str):
        out["format"] = f
    elif isinstance(f, dict):
        out["format"] = {k: trim(v) for k, v in f.items()}
    if isinstance(p.get("items"), dict):
        out["items"] = trim(p["items"])
    return out


res = {}
for src in [SUBSET, EXTRA]:
    for ver, eps in json.load(open(src))["endpoints"].items():
        r = res.setdefault(ver, {})
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
json.dump(res, open(DST, "w"), sort_keys=True, separators=(",", ":"))
