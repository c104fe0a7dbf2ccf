"""Blocking HTTP requests over wasi:http, the only way out of the sandbox.

The host sends a request only to the endpoints of the call's credentials and applies
their TLS settings (CA bundle, pinned fingerprint); a request anywhere else fails with an
error code, like a connection that cannot be made. Resources are dropped explicitly, each
child before its parent (an input stream before its body, a body before its response),
because the component model traps on a parent dropped with children alive.
"""

from dataclasses import dataclass
from typing import Dict, List, Optional, Tuple

from componentize_py_types import Err
from wit_world.imports import outgoing_handler, streams
from wit_world.imports import wasi_http_types as http

# Bytes written per call: wasi:io output streams accept at most 4096 at once.
WRITE_CHUNK = 4096
READ_CHUNK = 64 * 1024

METHODS = {
    "GET": http.Method_Get(),
    "POST": http.Method_Post(),
    "PUT": http.Method_Put(),
    "DELETE": http.Method_Delete(),
}


class TransportError(Exception):
    """No response: refused, unreachable, TLS failure, timeout, or denied by the host."""


class BadRequest(Exception):
    """The request cannot be made as given (a malformed endpoint or header value)."""


@dataclass
class Response:
    status: int
    headers: Dict[str, str]
    body: bytes


def request(method: str, url: str, headers: List[Tuple[str, str]], body: Optional[bytes] = None) -> Response:
    scheme, _, rest = url.partition("://")
    authority, slash, path = rest.partition("/")
    try:
        outgoing = http.OutgoingRequest(http.Fields.from_list([(k, v.encode()) for k, v in headers]))
        outgoing.set_method(METHODS[method])
        outgoing.set_scheme(http.Scheme_Https() if scheme == "https" else http.Scheme_Http())
        outgoing.set_authority(authority)
        outgoing.set_path_with_query(slash + path)
    except Err as e:
        raise BadRequest(f"{method} {url}: {e.value}") from None
    out_body = outgoing.body()
    try:
        future = outgoing_handler.handle(outgoing, None)
    except Err as e:
        out_body.__exit__(None, None, None)
        raise TransportError(f"{method} {url}: {e.value}") from None
    with future:
        try:
            if body:
                with out_body.write() as stream:
                    for start in range(0, len(body), WRITE_CHUNK):
                        stream.blocking_write_and_flush(body[start : start + WRITE_CHUNK])
            http.OutgoingBody.finish(out_body, None)
        except Err as e:
            raise TransportError(f"{method} {url}: sending the body: {e.value}") from None
        with future.subscribe() as ready:
            ready.block()
        got = future.get()
    if got is None or isinstance(got, Err):
        raise TransportError(f"{method} {url}: no response")
    if isinstance(got.value, Err):
        raise TransportError(f"{method} {url}: {got.value.value}")
    return _read(got.value.value)


def _read(response: http.IncomingResponse) -> Response:
    with response:
        status = response.status()
        with response.headers() as fields:
            headers = {k.lower(): v.decode(errors="replace") for k, v in fields.entries()}
        # The body (and its stream) must be gone before the response is dropped, also
        # when reading fails.
        with response.consume() as incoming:
            body = _drain(incoming)
    return Response(status, headers, body)


def _drain(incoming: http.IncomingBody) -> bytes:
    chunks = []
    with incoming.stream() as stream:
        while True:
            try:
                chunks.append(stream.blocking_read(READ_CHUNK))
            except Err as e:
                if isinstance(e.value, streams.StreamError_Closed):
                    break
                raise TransportError(f"reading the response body: {e.value}") from None
    return b"".join(chunks)
