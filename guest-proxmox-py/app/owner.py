"""Which VM is this machine's: the ownership marker, and finding the VM again.

A VM is ours only when a line of its description is exactly our marker, which carries
the machine's UID (the host keeps it across `clusterctl move`). The name and the `hp-`
tag only narrow the search; anyone can set those. A VM is never touched on the strength
of its VMID alone: VMIDs are reused.
"""

import re
from dataclasses import dataclass
from typing import Optional

from errors import SHORT_MS, transient
from pve import Api, PveError, path_part


def marker(uid: str) -> str:
    return f"hyperplug.machine-uid={uid}"


def uid_tag(uid: str) -> str:
    """A PVE tag (`[a-z0-9_][a-z0-9_+.-]*`) carrying the UID, to find the VM by listing."""
    return "hp-" + re.sub(r"[^a-z0-9_-]", "-", uid.lower())


def owned_by(config: dict, uid: str) -> bool:
    text = config.get("description") or ""
    return any(line.strip() == marker(uid) for line in str(text).splitlines())


def unreadable_clone(config: dict) -> bool:
    """PVE's temporary config while a clone copies its first disk: locked, nothing else."""
    return config.get("lock") == "clone" and "name" not in config


def description(user_text: Optional[str], machine, cluster) -> str:
    head = f"{user_text.rstrip()}\n\n" if user_text else ""
    return (
        f"{head}Managed by hyperplug (proxmox-py) for machine {machine.namespace}/{machine.name} "
        f"of cluster {cluster.name}; do not edit the lines below.\n"
        f"hyperplug.cluster-uid={cluster.uid}\n{marker(machine.uid)}"
    )


@dataclass
class Found:
    """What a recorded VMID holds: `ours` (with its config), `busy` (a clone with no
    owner readable yet, or a VM between nodes: look again), `foreign`, or `gone`."""

    what: str
    node: Optional[str] = None
    config: Optional[dict] = None


def locate(api: Api, uid: str, node: str, vmid: int) -> Found:
    """The VM at `vmid`, on `node` or, when it is not there, where the cluster lists it
    (migrated, or moving)."""
    try:
        return _judge(api.config(node, vmid), uid, node)
    except PveError as e:
        if not e.not_found():
            raise
    listed = [v for v in api.vms() if v.get("vmid") == vmid and v.get("node")]
    if not listed:
        return Found("gone")
    elsewhere = listed[0]["node"]
    try:
        found = _judge(api.config(elsewhere, vmid), uid, elsewhere)
    except PveError as e:
        if e.not_found():
            # Listed yet not there: between nodes. Never "gone" while listed.
            return Found("busy", elsewhere)
        raise
    return found if found.what != "foreign" else Found("gone")


def _judge(config: dict, uid: str, node: str) -> Found:
    if owned_by(config, uid):
        return Found("ours", node, config)
    if unreadable_clone(config):
        return Found("busy", node, config)
    return Found("foreign", node, config)


def find_owned(api: Api, uid: str, name: str):
    """This machine's VM anywhere in the cluster: `(node, vmid, config)` or None."""
    tag = uid_tag(uid)
    for v in api.vms():
        if v.get("template") in (1, "1") or not v.get("node") or not isinstance(v.get("vmid"), int):
            continue
        tags = str(v.get("tags") or "").split(";")
        if v.get("name") != name and tag not in tags:
            continue
        try:
            config = api.config(v["node"], v["vmid"])
        except PveError as e:
            if e.not_found():
                # Listed yet not there: between nodes, and it may be ours. Look again.
                raise transient(f"VM {v['vmid']} is listed on {v['node']} but is not there (moving between nodes); looking again", SHORT_MS) from None
            raise
        if owned_by(config, uid):
            return v["node"], v["vmid"], config
    return None


def unreadable_clones(api: Api, node: str) -> list:
    """VMIDs of clones on `node` still in their first phase: any may be ours."""
    return [
        v["vmid"]
        for v in api.vms()
        if v.get("node") == node and v.get("lock") == "clone" and v.get("name") == f"VM {v.get('vmid')}"
    ]


def smbios_uuid(config: dict) -> Optional[str]:
    for part in str(config.get("smbios1") or "").split(","):
        key, _, value = part.partition("=")
        if key == "uuid" and value:
            return value
    return None


def vm_path(node: str, vmid: int) -> str:
    return f"/nodes/{path_part(node)}/qemu/{vmid}"
