"""The three failure classes the host's retry policy branches on, and how PVE's errors
map to them: retry what may pass by itself (network trouble, 5xx, locks), stop on what
will not until someone changes something (auth, permissions, bad parameters)."""

from typing import Optional

from componentize_py_types import Err
from wit_world.imports import hyperplug_provider_types as types

import spec
import wasi_http
from pve import BadReply, PveError

# Retry hints (the host adds backoff and jitter).
SHORT_MS = 1_000
RETRY_MS = 5_000


def transient(message: str, retry_after_ms: Optional[int] = None) -> Err:
    return Err(types.PluginError_Transient(types.TransientError(message, retry_after_ms)))


def terminal(reason: str, message: str) -> Err:
    return Err(types.PluginError_Terminal(types.TerminalError(reason, message)))


# PVE texts (500s, task exit statuses) that name a configuration retrying will not fix.
CONFIGURATION = ("storage '", "pool '", "does not support", "can't clone", "not a template", "protection mode")


def terminal_reason(message: str) -> Optional[str]:
    """The terminal reason for a PVE error text, or None when it may pass by itself."""
    m = message.lower()
    if "got timeout" in m or "is locked" in m:
        return None
    if "permission check failed" in m or "permission denied" in m:
        return "PermissionDenied"
    if any(c in m for c in CONFIGURATION):
        return "InvalidConfiguration"
    return None


def is_plugin_error(e: Err) -> bool:
    return isinstance(e.value, (types.PluginError_Transient, types.PluginError_Terminal, types.PluginError_InvalidSpec))


def classify(e: Exception, context: str) -> Err:
    """The host's class for an error raised while `context`."""
    text = f"{context}: {e}"
    if isinstance(e, spec.InvalidSpec):
        return Err(types.PluginError_InvalidSpec(types.InvalidSpec(e.field, e.message)))
    if isinstance(e, wasi_http.BadRequest):
        return terminal("InvalidEndpoint", text)
    if isinstance(e, (wasi_http.TransportError, BadReply)):
        return transient(text)
    if isinstance(e, PveError):
        if e.status == 401:
            return terminal("AuthenticationFailed", text)
        if e.status == 403 or "permission check failed" in e.message.lower():
            return terminal("PermissionDenied", text)
        if e.status == 400:
            return terminal("InvalidConfiguration", text)
        if e.status == 501:
            return terminal("UnsupportedAPI", text)
        reason = terminal_reason(e.message)
        return terminal(reason, text) if reason else transient(text)
    # A bug of this plugin: reported, and retried in case it depends on timing.
    return transient(f"{context}: unexpected {type(e).__name__}: {e}", RETRY_MS)
