"""The PVE API: token auth, the `{"data": ...}` envelope, PVE's error shapes, tasks.

Errors keep what callers branch on: the HTTP status and PVE's message (`message` since
PVE 8.3, else the reason phrase the host passes in `x-hyperplug-reason-phrase`, plus the
per-parameter `errors` of a 400).
"""

import json
from typing import Any, Dict, Optional
from urllib.parse import quote, urlencode

import wasi_http


class PveError(Exception):
    def __init__(self, status: int, message: str):
        super().__init__(f"{status} {message}")
        self.status = status
        self.message = message

    def not_found(self) -> bool:
        """PVE answers a missing VM with 500 "... does not exist", not 404."""
        return self.status == 500 and "does not exist" in self.message

    def already_exists(self) -> bool:
        """`newid` taken between nextid and the clone (nextid reserves nothing)."""
        return "already exists" in self.message


class BadReply(Exception):
    """A reply that is not the JSON envelope PVE sends."""


def path_part(value: Any) -> str:
    return quote(str(value), safe="")


class Api:
    def __init__(self, credentials):
        base = credentials.endpoint.rstrip("/")
        if not base.endswith("/api2/json"):
            base += "/api2/json"
        self.base = base
        self.auth = f"PVEAPIToken={credentials.token}={credentials.secret}"
        self._vms: Optional[list] = None

    def call(self, method: str, path: str, params: Optional[Dict[str, Any]] = None) -> Any:
        headers = [("authorization", self.auth), ("accept", "application/json")]
        body = None
        query = urlencode(_form(params)) if params else ""
        url = self.base + path
        if method in ("GET", "DELETE"):
            url += f"?{query}" if query else ""
        elif query:
            body = query.encode()
            headers.append(("content-type", "application/x-www-form-urlencoded"))
        reply = wasi_http.request(method, url, headers, body)
        try:
            envelope = json.loads(reply.body) if reply.body else {}
        except ValueError:
            envelope = None
        if reply.status >= 300:
            raise PveError(reply.status, _message(reply, envelope))
        if not isinstance(envelope, dict):
            raise BadReply(f"{method} {path}: {reply.status} with a body that is not PVE's JSON envelope")
        return envelope.get("data")

    def get(self, path: str, params: Optional[Dict[str, Any]] = None) -> Any:
        return self.call("GET", path, params)

    def post(self, path: str, params: Optional[Dict[str, Any]] = None) -> Any:
        return self.call("POST", path, params)

    def put(self, path: str, params: Optional[Dict[str, Any]] = None) -> Any:
        return self.call("PUT", path, params)

    def delete(self, path: str, params: Optional[Dict[str, Any]] = None) -> Any:
        return self.call("DELETE", path, params)

    def vms(self) -> list:
        """Every VM of the PVE cluster, with node, status, name, tags and lock: one call,
        read once per plugin call (an `Api` lives for one). Every judgment of a call sees
        the same moment: a clone that shows no owner in one look and its name in the next
        would otherwise be neither waited for nor adopted, and be cloned twice."""
        if self._vms is not None:
            return self._vms
        listed = self.get("/cluster/resources", {"type": "vm"}) or []
        vms = [v for v in listed if isinstance(v, dict) and v.get("type", "qemu") == "qemu"]
        for v in vms:
            # Numbers may come as strings (PVE's API is Perl underneath).
            if isinstance(v.get("vmid"), str) and v["vmid"].isdigit():
                v["vmid"] = int(v["vmid"])
        self._vms = vms
        return vms

    def config(self, node: str, vmid: int) -> dict:
        return self.get(f"/nodes/{path_part(node)}/qemu/{vmid}/config") or {}

    def task(self, upid: str) -> dict:
        """A task's status (`status` running|stopped, `exitstatus`), on the node its UPID names."""
        node = upid.split(":")[1]
        return self.get(f"/nodes/{path_part(node)}/tasks/{path_part(upid)}/status") or {}


def task_ok(status: dict) -> bool:
    exit = str(status.get("exitstatus", ""))
    return exit == "OK" or exit.startswith("WARNINGS")


def _form(params: Dict[str, Any]) -> Dict[str, str]:
    out = {}
    for k, v in params.items():
        if v is None:
            continue
        out[k] = ("1" if v else "0") if isinstance(v, bool) else str(v)
    return out


def _message(reply: "wasi_http.Response", envelope: Any) -> str:
    parts = []
    if isinstance(envelope, dict):
        if envelope.get("message"):
            parts.append(str(envelope["message"]).strip())
        errors = envelope.get("errors")
        if isinstance(errors, dict):
            parts.extend(f"{k}: {str(v).strip()}" for k, v in sorted(errors.items()))
    if not parts:
        parts.append(reply.headers.get("x-hyperplug-reason-phrase", "").strip() or "(no message)")
    return "; ".join(parts)
