#!/usr/bin/env python3
"""Extract the official schema of the endpoints pve-sim serves beyond the reference subset.

`reference/pve-api-schema-capi-subset.json` holds the official schema of ~32
endpoints. pve-sim serves a few more that real clients call (agent exec, migration, the
container list, volume attributes, ...). This script takes their entries, unchanged, from
the same source at the same commits (pve-docs `api-viewer/apidata.js`) and writes
`schema/official-extra.json` in the subset's layout. Run from the repository root with a
clone of git://git.proxmox.com/git/pve-docs.git (or its GitHub mirror):
    python3 tests/pve-sim/scripts/extract-schema.py /path/to/pve-docs
then `python3 tests/pve-sim/scripts/trim-schema.py`.
"""
import json, os, subprocess, sys

COMMITS = {"8.0.5": "ba2a819", "8.4.0": "a3479f7", "9.1.3": "e5010dc"}
ENDPOINTS = [
    "GET /cluster/status",
    "GET /pools",
    "GET /nodes/{node}/tasks",
    "POST /nodes/{node}/qemu/{vmid}/status/reboot",
    "GET /nodes/{node}/qemu/{vmid}/agent/get-osinfo",
    "GET /nodes/{node}/qemu/{vmid}/agent/get-host-name",
    "POST /nodes/{node}/qemu/{vmid}/agent/exec",
    "GET /nodes/{node}/qemu/{vmid}/agent/exec-status",
    "POST /nodes/{node}/qemu/{vmid}/migrate",
    "GET /nodes/{node}/lxc",
    "GET /nodes/{node}/storage/{storage}/content/{volume}",
    "GET /access/permissions",
]
HERE = os.path.dirname(__file__)
DST = os.path.join(HERE, "../schema/official-extra.json")


def index(tree, out):
    for node in tree:
        for method, info in (node.get("info") or {}).items():
            out[f"{method} {node['path']}"] = info
        index(node.get("children") or [], out)


def main(repo):
    res = {
        "source": "github.com/proxmox/pve-docs api-viewer/apidata.js at commits "
        + ", ".join(f"{c} ({v})" for v, c in COMMITS.items())
        + "; the endpoints pve-sim serves beyond reference/pve-api-schema-capi-subset.json,"
        " unchanged (extracted by tests/pve-sim/scripts/extract-schema.py)",
        "endpoints": {},
    }
    for version, commit in COMMITS.items():
        text = subprocess.run(
            ["git", "-C", repo, "show", f"{commit}:api-viewer/apidata.js"],
            check=True, capture_output=True, text=True,
        ).stdout
        tree = json.loads(text[text.index("["): text.rindex("]") + 1])
        eps = {}
        index(tree, eps)
        res["endpoints"][version] = {e: eps[e] for e in ENDPOINTS if e in eps}
        missing = [e for e in ENDPOINTS if e not in eps]
        if missing:
            print(f"{version}: not in the schema: {missing}", file=sys.stderr)
    with open(DST, "w") as f:
        json.dump(res, f, indent=1, sort_keys=True)
        f.write("\n")


if __name__ == "__main__":
    main(sys.argv[1] if len(sys.argv) > 1 else "pve-docs")
