"""hyperplug's Proxmox plugin in Python: a small one, to show the contract is not
Rust-only. It clones VMs from a template, starts them, reports their DHCP addresses from
the guest agent and deletes them once proven its own. It speaks WIT 0.2 (no waits, no
observer: the host polls it through the requeue path) and brings no cloud-init: the
template's own first-boot setup applies. See docs/plugin-authors.md (Python).

componentize-py calls the classes below, named after the world's exports.
"""

import json

from componentize_py_types import Err
from wit_world import exports
from wit_world.exports import cluster as wit_cluster
from wit_world.exports import identity as wit_identity
from wit_world.exports import machine as wit_machine
from wit_world.imports import hyperplug_provider_types as types

import spec
import vm
from errors import classify, is_plugin_error
from pve import Api

NAME = "proxmox-py"
VERSION = "0.1.0"
GROUP = "infrastructure.cluster.x-k8s.io"
API_VERSION = "v1alpha1"


def guarded(context: str, call):
    """Run `call`, giving every failure the host's class: nothing escapes as a trap."""
    try:
        return call()
    except Err as e:
        if is_plugin_error(e):
            raise
        # A WASI import's own error that nothing below turned into one of ours.
        raise classify(RuntimeError(f"{e.value}"), context) from None
    except Exception as e:
        raise classify(e, context) from None


def kind(name: str, role, schema: dict, columns=()) -> wit_identity.KindInfo:
    return wit_identity.KindInfo(name, role, json.dumps(schema), list(columns))


class Identity(exports.Identity):
    def info(self) -> wit_identity.PluginInfo:
        role = wit_identity.KindRole
        node = wit_identity.PrinterColumn("Node", "string", ".spec.sourceNode", "Node the VM is cloned on")
        return wit_identity.PluginInfo(
            name=NAME,
            version=VERSION,
            group=GROUP,
            api_version=API_VERSION,
            kinds=[
                kind("ProxmoxCluster", role.INFRA_CLUSTER, spec.CLUSTER_SCHEMA),
                kind("ProxmoxClusterTemplate", role.INFRA_CLUSTER_TEMPLATE, spec.CLUSTER_SCHEMA),
                kind("ProxmoxMachine", role.INFRA_MACHINE, spec.MACHINE_SCHEMA, [node]),
                kind("ProxmoxMachineTemplate", role.INFRA_MACHINE_TEMPLATE, spec.MACHINE_SCHEMA),
            ],
            capabilities=["adoption"],
        )


class Cluster(exports.Cluster):
    def reconcile(self, req: wit_cluster.ClusterRequest) -> wit_cluster.ClusterStatus:
        return guarded("reconciling the cluster", lambda: self._reconcile(req))

    def _reconcile(self, req):
        raw = spec.parse(req.spec, spec.CLUSTER_SCHEMA)
        version = Api(req.credentials).get("/version") or {}
        endpoint = raw.get("controlPlaneEndpoint") or {}
        cp = None
        if endpoint.get("host"):
            cp = wit_cluster.Endpoint(str(endpoint["host"]), int(endpoint.get("port") or 6443))
        return wit_cluster.ClusterStatus(
            progress=types.Progress(req.state or "", "Ready", "the PVE API answers", None),
            ready=True,
            control_plane_endpoint=cp,
            failure_domains=[],
            ip_pools=[],
            details=[("pveVersion", str(version.get("version", "")))],
        )

    def delete(self, req: wit_cluster.ClusterRequest):
        # Nothing cluster-wide is made: the VMs belong to their machines.
        return None


class Machine(exports.Machine):
    def create(self, req: wit_machine.MachineRequest) -> wit_machine.MachineStatus:
        return guarded("creating the VM", lambda: vm.Machine(req).create())

    def describe(self, req: wit_machine.MachineRequest) -> wit_machine.MachineStatus:
        return guarded("describing the VM", lambda: vm.Machine(req).describe())

    def delete(self, req: wit_machine.MachineRequest):
        return guarded("deleting the VM", lambda: vm.Machine(req).delete())

    def describe_template(self, req: wit_machine.TemplateRequest) -> wit_machine.TemplateStatus:
        return guarded("describing the template", lambda: self._template(req))

    def _template(self, req):
        sp = spec.machine(req.spec)
        cpus = (sp.sockets or 1) * (sp.cores or 1)
        capacity = [("cpu", str(cpus))]
        if sp.memory_mib is not None:
            capacity.append(("memory", f"{sp.memory_mib}Mi"))
        return wit_machine.TemplateStatus(
            capacity=capacity,
            node_info=[("architecture", "amd64"), ("operating-system", "linux")],
        )
