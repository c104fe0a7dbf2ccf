"""A machine's VM, step by step: clone the template, start it, wait for the guest agent to
report addresses; and delete it, stopping it first, only once it is proven ours.

Every call observes first and acts only on what it saw, so repeated calls converge: the
state records the VM (node, VMID) and a task in flight, nothing that cannot be looked up
again. Lost state is recovered by the ownership marker (adoption).
"""

import json
from dataclasses import asdict, dataclass
from typing import List, Optional

from wit_world.exports import machine as wit
from wit_world.imports import hyperplug_provider_types as types

import owner
import spec
from errors import RETRY_MS, SHORT_MS, terminal, terminal_reason, transient
from pve import Api, PveError, task_ok

# The layout of the state this plugin writes; a newer one is refused, not misread.
LAYOUT = 1
# How often to look again while PVE works (a task, the boot, the agent).
POLL_MS = 1_000
# How long to wait after a task failed for a reason that may not pass by itself.
FAILED_MS = 30_000


@dataclass
class State:
    layout: int = LAYOUT
    node: Optional[str] = None
    vmid: Optional[int] = None
    upid: Optional[str] = None
    # The phase of the task in flight (Cloning, Starting, Stopping, Deleting).
    step: Optional[str] = None
    ready: bool = False

    @staticmethod
    def load(text: Optional[str]) -> "State":
        if not text:
            return State()
        try:
            raw = json.loads(text)
        except ValueError:
            raise terminal("StateUnreadable", "the machine's plugin state is not JSON") from None
        if raw.get("layout", 0) > LAYOUT:
            raise terminal(
                "StateIncompatible",
                f"the machine's state has layout {raw.get('layout')}, written by a newer plugin; "
                f"this one reads up to {LAYOUT}: run the newer plugin again",
            )
        fields = State.__dataclass_fields__
        return State(**{k: v for k, v in raw.items() if k in fields})

    def dump(self) -> str:
        return json.dumps(asdict(self), separators=(",", ":"))


def progress(st: State, phase: str, message: str, requeue_ms: Optional[int] = POLL_MS) -> types.Progress:
    return types.Progress(st.dump(), phase, message, requeue_ms)


def status(st: State, phase: str, message: str, **kw) -> wit.MachineStatus:
    requeue = kw.pop("requeue_ms", POLL_MS)
    return wit.MachineStatus(
        progress=progress(st, phase, message, requeue),
        ready=kw.get("ready", False),
        provider_id=kw.get("provider_id"),
        addresses=kw.get("addresses", []),
        failure_domain=None,
        address_requests=[],
        needs_bootstrap=False,
        drift=kw.get("drift"),
        details=kw.get("details", []),
    )


class Machine:
    def __init__(self, req):
        self.req = req
        self.api = Api(req.credentials)
        self.uid = req.machine.uid
        self.st = State.load(req.state)

    # ---- create -------------------------------------------------------------------

    def create(self) -> wit.MachineStatus:
        sp = spec.machine(self.req.spec)
        waiting = self.finish_task()
        if waiting:
            return waiting
        st = self.st
        if st.vmid is None and not self.adopt():
            return self.clone(sp)
        found = owner.locate(self.api, self.uid, st.node, st.vmid)
        if found.what == "busy":
            return status(st, "Cloning", f"VM {st.vmid} is being cloned")
        if found.what in ("foreign", "gone") and not st.ready:
            # Our clone never made it (its task failed out of sight, or another client's
            # VM took the VMID): look for ours by marker, else clone again.
            lost = st.vmid
            st.vmid = st.node = None
            return status(st, "Cloning", f"VM {lost} is not this machine's; looking again", requeue_ms=0)
        if found.what == "foreign":
            raise terminal("VMNotOwned", f"VM {st.vmid} on {found.node} does not carry this machine's marker; not touching it")
        if found.what == "gone":
            raise transient(f"VM {st.vmid} is gone from {st.node} and not found on another node", RETRY_MS)
        st.node = found.node
        config = found.config
        if config.get("lock"):
            return status(st, "Locked", f"VM {st.vmid} is locked ({config['lock']})")
        self.configure(sp, config)
        current = self.api.get(owner.vm_path(st.node, st.vmid) + "/status/current") or {}
        if current.get("status") != "running":
            st.upid, st.step = self.api.post(owner.vm_path(st.node, st.vmid) + "/status/start"), "Starting"
            return status(st, "Starting", f"starting VM {st.vmid} on {st.node}")
        addresses = self.addresses()
        provider_id = self.provider_id(config)
        if not addresses:
            return status(st, "WaitingForAddresses", "waiting for the guest agent to report an address", provider_id=provider_id)
        st.ready = True
        return status(st, "Ready", f"VM {st.vmid} on {st.node} is running", ready=True, provider_id=provider_id,
                      addresses=addresses, requeue_ms=None, details=self.details())

    def finish_task(self) -> Optional[wit.MachineStatus]:
        """The task in flight: still running (look again), done (go on), or failed."""
        st = self.st
        if not st.upid:
            return None
        task = self.task()
        if task.get("status") == "running":
            return status(st, st.step or "Waiting", f"{st.step} VM {st.vmid}: task running")
        step, exit = st.step, str(task.get("exitstatus", ""))
        st.upid = st.step = None
        # A start that found the VM running (another start, from before a lost state, got
        # there first) or a stop that found it stopped did what was asked; what is there
        # is looked at next either way.
        done = ("already running", "not running")
        if task_ok(task) or exit == "gone from the task list" or any(d in exit for d in done):
            return None
        if step == "Cloning" and "already exists" in exit:
            # Another client took the VMID inside its task: clone again with a new one.
            st.vmid = st.node = None
            return status(st, "Cloning", "lost the VMID to another clone; cloning again", requeue_ms=0)
        if "got timeout" in exit or "locked" in exit:
            return status(st, step or "Waiting", f"{step} VM {st.vmid}: {exit}; trying again")
        # Failed for a reason that may not pass by itself. The state is saved without the
        # task (an error would leave it there, failing every later call the same way),
        # and the next call judges what is there after a longer wait.
        reason = terminal_reason(exit) or f"{step or 'Task'}Failed"
        return status(st, reason, f"{step} VM {st.vmid} failed: {exit}", requeue_ms=FAILED_MS)

    def task(self) -> dict:
        """The status of the task in flight; one PVE no longer knows counts as done (what
        it did is looked at again)."""
        try:
            return self.api.task(self.st.upid)
        except PveError as e:
            if "no such task" not in e.message:
                raise
            return {"status": "stopped", "exitstatus": "gone from the task list"}

    def adopt(self) -> bool:
        """Find this machine's VM by its marker after the state was lost."""
        found = owner.find_owned(self.api, self.uid, self.req.machine.name)
        if found:
            self.st.node, self.st.vmid, _ = found
            return True
        return False

    def clone(self, sp: spec.MachineSpec) -> wit.MachineStatus:
        st = self.st
        # A clone still copying its first disk shows no owner: it may be ours, from a
        # state that was lost. Wait until it can be read rather than clone twice.
        busy = owner.unreadable_clones(self.api, sp.source_node)
        if busy:
            raise transient(f"waiting for clones on {sp.source_node} to show their owner (VMIDs {busy})", SHORT_MS)
        vmid = int(self.api.get("/cluster/nextid"))
        params = {
            "newid": vmid,
            "name": self.req.machine.name,
            "full": sp.full,
            "storage": sp.storage if sp.full else None,
            "description": owner.description(sp.description, self.req.machine, self.req.cluster),
        }
        try:
            upid = self.api.post(f"{owner.vm_path(sp.source_node, sp.template_id)}/clone", params)
        except PveError as e:
            if e.already_exists():
                raise transient(f"VMID {vmid} was taken before the clone; trying another", 0) from None
            raise
        st.node, st.vmid, st.upid, st.step = sp.source_node, vmid, upid, "Cloning"
        return status(st, "Cloning", f"cloning template {sp.template_id} to VM {vmid} on {sp.source_node}")

    def configure(self, sp: spec.MachineSpec, config: dict) -> None:
        """Size the VM as the spec says and tag it for listing; once (compared first)."""
        want = {"sockets": sp.sockets, "cores": sp.cores, "memory": sp.memory_mib}
        changes = {k: v for k, v in want.items() if v is not None and str(config.get(k)) != str(v)}
        tag = owner.uid_tag(self.uid)
        tags = [t for t in str(config.get("tags") or "").split(";") if t]
        if tag not in tags:
            changes["tags"] = ";".join(sorted(tags + [tag]))
        if changes:
            self.api.put(owner.vm_path(self.st.node, self.st.vmid) + "/config", changes)

    def addresses(self) -> List[wit.MachineAddress]:
        try:
            reply = self.api.get(owner.vm_path(self.st.node, self.st.vmid) + "/agent/network-get-interfaces") or {}
        except PveError as e:
            if e.status == 500:  # no agent (yet), VM not running, agent not answering
                return []
            raise
        out = []
        for iface in reply.get("result", []):
            if iface.get("name") == "lo":
                continue
            for ip in iface.get("ip-addresses", []):
                address = ip.get("ip-address", "")
                if ip.get("ip-address-type") == "ipv4" and address and not address.startswith("127."):
                    out.append(wit.MachineAddress(wit.AddressType.INTERNAL_IP, address))
        return out

    def provider_id(self, config: dict) -> Optional[str]:
        uuid = owner.smbios_uuid(config)
        return f"proxmox://{uuid}" if uuid else None

    def details(self) -> list:
        return [("node", self.st.node or ""), ("vmid", str(self.st.vmid))]

    # ---- describe -----------------------------------------------------------------

    def describe(self) -> wit.MachineStatus:
        st = self.st
        if st.vmid is None:
            found = owner.find_owned(self.api, self.uid, self.req.machine.name)
            if not found:
                return status(st, "NotCreated", "no VM carries this machine's marker", requeue_ms=None)
            st.node, st.vmid, config = found
            return status(st, "Found", f"VM {st.vmid} on {st.node} carries this machine's marker",
                          provider_id=self.provider_id(config), requeue_ms=None)
        found = owner.locate(self.api, self.uid, st.node, st.vmid)
        if found.what == "gone":
            return status(st, "Missing", f"VM {st.vmid} is gone", drift=wit.Drift_Missing(f"VM {st.vmid} no longer exists"))
        if found.what == "foreign":
            return status(st, "Foreign", f"VM {st.vmid} is not ours",
                          drift=wit.Drift_Foreign(f"VM {st.vmid} on {found.node} does not carry this machine's marker"))
        if found.what == "busy":
            return status(st, "Cloning", f"VM {st.vmid} is being cloned")
        st.node = found.node
        provider_id = self.provider_id(found.config)
        current = self.api.get(owner.vm_path(st.node, st.vmid) + "/status/current") or {}
        running = current.get("status") == "running"
        if st.ready and not running:
            return status(st, "PoweredOff", f"VM {st.vmid} is {current.get('status')}", provider_id=provider_id,
                          drift=wit.Drift_Changed(f"VM {st.vmid} is {current.get('status')}, not running"))
        addresses = self.addresses() if running else []
        ready = running and bool(addresses)
        return status(st, "Ready" if ready else "Provisioning", f"VM {st.vmid} on {st.node} is {current.get('status')}",
                      ready=ready, provider_id=provider_id, addresses=addresses, requeue_ms=None, details=self.details())

    # ---- delete -------------------------------------------------------------------

    def delete(self) -> Optional[types.Progress]:
        st = self.st
        if st.upid:
            task = self.task()
            if task.get("status") == "running":
                return progress(st, st.step or "Deleting", f"{st.step} VM {st.vmid}: task running")
            st.upid = st.step = None  # done either way: what is there is looked at again
        if st.vmid is None:
            if not self.adopt():
                source = self.source_node()
                busy = owner.unreadable_clones(self.api, source) if source else []
                if busy:
                    return progress(st, "Deleting", f"waiting for clones on {source} to show their owner")
                return None
        found = owner.locate(self.api, self.uid, st.node, st.vmid)
        if found.what == "busy":
            return progress(st, "Deleting", f"VM {st.vmid} is being cloned; deleting once it is done")
        if found.what != "ours":
            # Gone, or the VMID holds someone else's VM now: ours may have moved; never
            # touch a VM that is not proven ours.
            st.vmid = st.node = None
            if self.adopt():
                return progress(st, "Deleting", f"found VM {st.vmid} on {st.node} again", 0)
            return None
        st.node = found.node
        if found.config.get("lock"):
            return progress(st, "Deleting", f"VM {st.vmid} is locked ({found.config['lock']}); waiting")
        current = self.api.get(owner.vm_path(st.node, st.vmid) + "/status/current") or {}
        if current.get("status") == "running":
            st.upid, st.step = self.api.post(owner.vm_path(st.node, st.vmid) + "/status/stop"), "Stopping"
            return progress(st, "Stopping", f"stopping VM {st.vmid} on {st.node}")
        st.upid = self.api.delete(owner.vm_path(st.node, st.vmid), {"purge": 1, "destroy-unreferenced-disks": 1})
        st.step = "Deleting"
        return progress(st, "Deleting", f"destroying VM {st.vmid} on {st.node}")

    def source_node(self) -> Optional[str]:
        try:
            return spec.machine(self.req.spec).source_node
        except spec.InvalidSpec:
            return None
