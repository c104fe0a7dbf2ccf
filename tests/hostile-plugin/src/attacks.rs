//! The attacks of `machine.create`, by `spec.attack`. Sizes and counts come from the
//! spec (`mib`, `count`), so a test can ask for a flood past any limit.
use crate::{Spec, failed, status};
use guest_kit::bindings::hyperplug::provider::log::{self, Level};
use guest_kit::machine::MachineStatus;
use guest_kit::types::PluginError;
use guest_kit::{blobs, claims};
use wasip2::http::outgoing_handler;
use wasip2::http::types::{
    Fields, FutureIncomingResponse, Method, OutgoingBody, OutgoingRequest, Scheme,
};

/// The blob `claim-and-publish` publishes.
pub const SEED: &str = "seed.iso";

pub fn run(spec: &Spec) -> Result<MachineStatus, PluginError> {
    let count = spec.num("count", 1_000_000);
    let mib = spec.num("mib", 1) as usize;
    let attack = spec.str("attack");
    if let Some(result) = crate::outputs::run(&attack, spec) {
        return result;
    }
    match attack.as_str() {
        "noop" => Ok(status("ok".into())),
        "read-file" => match std::fs::read(spec.str("path")) {
            Ok(bytes) => Ok(status(format!("read {} bytes", bytes.len()))),
            Err(e) => Err(failed(format!("read-file failed: {e}"))),
        },
        "read-env" => {
            let vars: Vec<String> = std::env::vars().map(|(k, _)| k).collect();
            Ok(status(format!(
                "saw {} environment variables: {}",
                vars.len(),
                vars.join(",")
            )))
        }
        "connect" => {
            let req = request(Method::Get, &spec.str("authority"), "/");
            match outgoing_handler::handle(req, None) {
                Err(code) => Err(failed(format!("connect failed: {code:?}"))),
                Ok(pending) => match wait(&pending) {
                    Ok(code) => Ok(status(format!("connected: HTTP {code}"))),
                    Err(e) => Err(failed(format!("connect failed: {e}"))),
                },
            }
        }
        // Hold `mib` MiB while waiting for an answer that may never come: what a
        // plugin's calls in flight together hold of its memory budget.
        "hold-memory" => {
            let hoard = std::hint::black_box(vec![1u8; mib << 20]);
            let req = request(Method::Get, &spec.str("authority"), "/");
            let answer = match outgoing_handler::handle(req, None) {
                Err(code) => format!("{code:?}"),
                Ok(pending) => format!("{:?}", wait(&pending)),
            };
            Ok(status(format!("held {} bytes; {answer}", hoard.len())))
        }
        "grow-memory" => {
            let mut hoard: Vec<Vec<u8>> = Vec::new();
            loop {
                hoard.push(vec![1u8; 16 << 20]);
                if hoard.len() > 1024 {
                    return Ok(status("memory was never capped".into()));
                }
            }
        }
        "loop" => {
            let mut n: u64 = 0;
            loop {
                n = std::hint::black_box(n.wrapping_add(1));
            }
        }
        "big-string" => Ok(status("x".repeat(8 << 20))),
        "panic" => panic!("hostile plugin panics on purpose"),
        "trap" => trap(),
        "stack-overflow" => Ok(status(format!("depth {}", recurse(0, count)))),
        "publish" => match blobs::publish(&spec.str("name"), b"content", 60) {
            Ok(_) => Ok(status("published".into())),
            Err(e) => Err(failed(format!("publish refused: {e}"))),
        },
        "claim-and-publish" => {
            let (claim, blob) = claim_and_publish(spec);
            let mut s = status(format!("claim: {claim}; blob: {blob}"));
            s.ready = false;
            Ok(s)
        }
        "blob-flood" => blob_flood(count, mib),
        "body-flood" => body_flood(&spec.str("authority")),
        "bodies" => bodies(&spec.str("authority"), count, spec.num("kib", 1) as usize),
        "alias-output" => alias_output(count, mib),
        "log-flood" => log_flood(count, spec.num("kib", 256) as usize),
        "log-inject" => {
            log::log(
                Level::Info,
                "innocent\n2030-01-01T00:00:00Z ERROR hyperplug: forged line",
                &[("key\nforged".into(), "value\r\x1b[31mred".into())],
            );
            Ok(status("logged".into()))
        }
        "denied-flood" => denied_flood(count),
        "connection-flood" => connection_flood(&spec.str("authority"), count),
        "claim-flood" => claim_flood(count),
        "host-cpu" => host_cpu(mib),
        "handle-flood" => handle_flood(count),
        "metrics-flood" => metrics_flood(&spec.str("authority"), count),
        other => Err(failed(format!("unknown attack `{other}`"))),
    }
}

/// A trap that is no panic: Wasm's `unreachable` (natively, where nothing runs it, a
/// panic).
fn trap() -> ! {
    #[cfg(target_arch = "wasm32")]
    core::arch::wasm32::unreachable();
    #[cfg(not(target_arch = "wasm32"))]
    unreachable!("a trap")
}

/// Recursion to `limit` calls deep (by default, past any stack): the Wasm stack runs
/// out, which wasmtime reports as a trap of its own (no panic, no memory fault).
#[inline(never)]
fn recurse(depth: u64, limit: u64) -> u64 {
    if depth >= limit {
        return depth;
    }
    // black_box keeps every level a real call: no loop, no tail call.
    std::hint::black_box(recurse(depth + 1, limit)).wrapping_add(1)
}

/// Take the claim `spec.key` (default `k`) and publish [`SEED`]: what each reported.
pub fn claim_and_publish(spec: &Spec) -> (String, String) {
    let key = match spec.str("key") {
        k if k.is_empty() => "k".to_string(),
        k => k,
    };
    let claim = match claims::acquire(&key) {
        Ok(None) => "held".to_string(),
        Ok(Some(other)) => format!("held by {other}"),
        Err(e) => format!("refused: {e}"),
    };
    let blob = match blobs::publish(SEED, b"boot me", 600) {
        Ok(_) => "published".to_string(),
        Err(e) => format!("refused: {e}"),
    };
    (claim, blob)
}

fn request(method: Method, authority: &str, path: &str) -> OutgoingRequest {
    let req = OutgoingRequest::new(Fields::new());
    let _ = req.set_method(&method);
    let _ = req.set_scheme(Some(&Scheme::Http));
    let _ = req.set_authority(Some(authority));
    let _ = req.set_path_with_query(Some(path));
    req
}

/// The status code of a response, once it comes.
fn wait(pending: &FutureIncomingResponse) -> Result<u16, String> {
    pending.subscribe().block();
    match pending.get() {
        Some(Ok(Ok(resp))) => Ok(resp.status()),
        Some(Ok(Err(code))) => Err(format!("{code:?}")),
        other => Err(format!("{other:?}")),
    }
}

/// Publish `count` distinct blobs of `mib` MiB, keeping going past refusals.
fn blob_flood(count: u64, mib: usize) -> Result<MachineStatus, PluginError> {
    let content = vec![7u8; mib << 20];
    let (mut published, mut refused) = (0, None);
    for i in 0..count {
        match blobs::publish(&format!("flood-{i}.bin"), &content, 3600) {
            Ok(_) => published += 1,
            Err(e) => refused = Some(e),
        }
    }
    Err(failed(format!(
        "published {published} blobs; last refusal: {}",
        refused.unwrap_or_default()
    )))
}

/// Send a request whose body never ends.
fn body_flood(authority: &str) -> Result<MachineStatus, PluginError> {
    let req = request(Method::Post, authority, "/upload");
    let body = req.body().map_err(|_| failed("no body".into()))?;
    let out = body.write().map_err(|_| failed("no body stream".into()))?;
    let pending =
        outgoing_handler::handle(req, None).map_err(|e| failed(format!("handle: {e:?}")))?;
    let chunk = vec![b'x'; 1 << 20];
    let mut sent: u64 = 0;
    loop {
        match out.check_write() {
            Ok(0) => out.subscribe().block(),
            Ok(n) => {
                let n = (n as usize).min(chunk.len());
                if out.write(&chunk[..n]).is_err() {
                    break;
                }
                sent += n as u64;
            }
            Err(_) => break,
        }
    }
    drop(out);
    let _ = OutgoingBody::finish(body, None);
    let answer = wait(&pending);
    Err(failed(format!("sent {sent} body bytes; then {answer:?}")))
}

/// `count` requests at once, each with a body of `kib` KiB.
fn bodies(authority: &str, count: u64, kib: usize) -> Result<MachineStatus, PluginError> {
    let chunk = vec![b'y'; 4096];
    let mut pending = Vec::new();
    for i in 0..count {
        let req = request(Method::Post, authority, &format!("/upload/{i}"));
        let body = req.body().map_err(|_| failed("no body".into()))?;
        let out = body.write().map_err(|_| failed("no body stream".into()))?;
        let p = outgoing_handler::handle(req, None).map_err(|e| failed(format!("{e:?}")))?;
        let mut left = kib << 10;
        while left > 0 {
            let n = left.min(chunk.len());
            if out.blocking_write_and_flush(&chunk[..n]).is_err() {
                break;
            }
            left -= n;
        }
        drop(out);
        let _ = OutgoingBody::finish(body, None);
        pending.push(p);
    }
    let answers: Vec<_> = pending.iter().map(wait).collect();
    Err(failed(format!("sent {count} bodies: {answers:?}")))
}

/// A result whose `count` details all point at one `mib` MiB string: small in the
/// sandbox, `count` × `mib` MiB once copied out.
fn alias_output(count: u64, mib: usize) -> Result<MachineStatus, PluginError> {
    let big = "\u{1}".repeat(mib << 20);
    let (ptr, len) = (big.as_ptr() as *mut u8, big.len());
    std::mem::forget(big);
    let mut s = status("aliased".into());
    s.details = (0..count)
        // SAFETY: deliberately unsound aliasing; the host copies the result out before
        // anything frees it, and a trap afterwards is the host's to contain.
        .map(|_| {
            ("k".to_string(), unsafe {
                String::from_raw_parts(ptr, len, len)
            })
        })
        .collect();
    Ok(s)
}

/// `count` lines of 16 fields of `kib` KiB each.
fn log_flood(count: u64, kib: usize) -> Result<MachineStatus, PluginError> {
    let value = "v".repeat(kib << 10);
    let fields: Vec<(String, String)> = (0..16).map(|i| (format!("f{i}"), value.clone())).collect();
    for _ in 0..count {
        log::log(Level::Info, "flood", &fields);
    }
    Ok(status("logged".into()))
}

/// `count` requests to a host outside the call's endpoints.
fn denied_flood(count: u64) -> Result<MachineStatus, PluginError> {
    let mut denied = 0;
    for i in 0..count {
        let req = request(Method::Get, "denied.invalid:1", &format!("/{i}"));
        if let Ok(pending) = outgoing_handler::handle(req, None) {
            if wait(&pending).is_err() {
                denied += 1;
            }
        } else {
            denied += 1;
        }
    }
    Err(failed(format!("{denied} requests denied")))
}

/// `count` requests at once to an endpoint that never answers.
fn connection_flood(authority: &str, count: u64) -> Result<MachineStatus, PluginError> {
    let mut pending = Vec::new();
    for i in 0..count {
        let req = request(Method::Get, authority, &format!("/{i}"));
        match outgoing_handler::handle(req, None) {
            Ok(p) => pending.push(p),
            Err(e) => return Err(failed(format!("request {i}: {e:?}"))),
        }
    }
    for p in &pending {
        let _ = wait(p);
    }
    Err(failed(format!("{} requests sent", pending.len())))
}

/// Claim `count` distinct keys, keeping going past refusals.
fn claim_flood(count: u64) -> Result<MachineStatus, PluginError> {
    let (mut held, mut refused) = (0, None);
    for i in 0..count {
        match claims::acquire(&format!("flood/{i}")) {
            Ok(None) => held += 1,
            Ok(Some(_)) => {}
            Err(e) => refused = Some(e),
        }
    }
    Err(failed(format!(
        "holding {held} claims; last refusal: {}",
        refused.unwrap_or_default()
    )))
}

/// Make the host copy `mib` MiB over and over while the plugin itself does nothing.
fn host_cpu(mib: usize) -> Result<MachineStatus, PluginError> {
    let content = vec![1u8; mib << 20];
    loop {
        let _ = blobs::publish("cpu.bin", &content, 1);
    }
}

/// `count` host handles (pollables of a far-off instant), all kept.
fn handle_flood(count: u64) -> Result<MachineStatus, PluginError> {
    let held: Vec<_> = (0..count)
        .map(|_| wasip2::clocks::monotonic_clock::subscribe_duration(3_600_000_000_000))
        .collect();
    Ok(status(format!("held {} handles", held.len())))
}

/// `count` requests, each with a new method and path, to an endpoint that answers.
fn metrics_flood(authority: &str, count: u64) -> Result<MachineStatus, PluginError> {
    let mut answered = 0;
    for i in 0..count {
        let req = request(
            Method::Other(format!("M{i}")),
            authority,
            &format!("/words/w{i}x"),
        );
        let pending = outgoing_handler::handle(req, None).map_err(|e| failed(format!("{e:?}")))?;
        if wait(&pending).is_ok() {
            answered += 1;
        }
    }
    Ok(status(format!("{answered} answered")))
}
