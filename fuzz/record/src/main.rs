//! Writes the fuzz targets' seed corpora into `fuzz/seeds/<target>/` (committed; run
//! again when a plugin's API calls change):
//!
//! - `pve_replies`: the Proxmox plugin's whole lifecycle recorded against pve-sim (one
//!   seed per scenario, every reply as pve-sim gave it), then variants where replies
//!   are replaced by what real Proxmox VE sends (`tests/pve-sim/reference`: captures,
//!   task status bodies, the error formats with their status lines);
//! - `specs`: the specs of the fixtures, the docs and the recorded scenarios, as JSON;
//! - `nocloud_iso`: NoCloud files as the plugins write them, and odd names and labels;
//! - `fuzz/specs.dict`: the plugins' spec field names (from their CRD schemas), a
//!   libFuzzer dictionary.
//!
//! ```sh
//! cargo run --manifest-path fuzz/Cargo.toml -p hyperplug-fuzz-seeds -- [REFERENCE_DIR]
//! ```
//! REFERENCE_DIR defaults to the repository's copy of the PVE reference data,
//! `tests/pve-sim/reference` (see its README); pass another directory with the same files
//! to record from it.
use std::cell::RefCell;
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::rc::Rc;
use std::time::Duration;

use guest_kit::fuzzing::Host;
use guest_kit::http::{HttpError, Request, Response};
use guest_kit::identity::Guest as _;
use guest_kit::log::Level;
use hyperplug_fuzz::Proxmox;
use hyperplug_fuzz::lifecycle::{self, Inputs};
use hyperplug_fuzz::script::{Reply, Script, api_path};
use serde_json::{Value, json};

fn main() {
    let fuzz = PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .expect("record/ is in fuzz/")
        .to_path_buf();
    let repo = fuzz
        .parent()
        .expect("fuzz/ is in the repository")
        .to_path_buf();
    let reference = std::env::args()
        .nth(1)
        .map(PathBuf::from)
        .unwrap_or_else(|| repo.join(REFERENCE_DIR));
    let reference = Reference::load(&reference);

    let scenarios = scenarios();
    let pve = fuzz.join("seeds/pve_replies");
    fresh(&pve);
    let runtime = tokio::runtime::Runtime::new().expect("a tokio runtime");
    for (name, headers) in &scenarios {
        let recorded = record(&runtime, headers);
        write(&pve, &format!("{name}.txt"), &recorded);
        for (variant, text) in reference.variants(&recorded) {
            write(&pve, &format!("{name}-{variant}.txt"), &text);
        }
    }

    let specs = fuzz.join("seeds/specs");
    fresh(&specs);
    for (name, headers) in &scenarios {
        let script = Script::parse(headers.as_bytes());
        write(
            &specs,
            &format!("{name}-machine.json"),
            script.header("spec").unwrap_or("{}"),
        );
        write(
            &specs,
            &format!("{name}-cluster.json"),
            script.header("cluster").unwrap_or("{}"),
        );
    }
    for (name, yaml) in fixture_specs(&repo) {
        write(&specs, &format!("{name}.json"), &yaml);
    }
    std::fs::write(fuzz.join("specs.dict"), dictionary()).expect("write specs.dict");

    let iso = fuzz.join("seeds/nocloud_iso");
    fresh(&iso);
    for (name, text) in nocloud_seeds() {
        write(&iso, &format!("{name}.txt"), &text);
    }
    println!("seeds written under {}", fuzz.join("seeds").display());
}

/// The PVE reference data, relative to the repository's root.
const REFERENCE_DIR: &str = "tests/pve-sim/reference";

/// The recorded lifecycles: header lines of a script (its specs and inputs).
fn scenarios() -> Vec<(&'static str, String)> {
    let endpoint = json!({"host": "10.20.0.5", "port": 6443});
    let pool =
        json!({"addresses": ["10.20.0.10-10.20.0.60"], "prefix": 24, "gateway": "10.20.0.1"});
    let v6 =
        json!({"addresses": ["fd00:20::10-fd00:20::60"], "prefix": 64, "gateway": "fd00:20::1"});
    let lines = |spec: Value, cluster: Value, extra: &str| {
        format!(
            "# recorded against pve-sim by fuzz/record\nspec {spec}\ncluster {cluster}\n{extra}"
        )
    };
    vec![
        (
            "dhcp",
            lines(
                json!({"templateID": 9000, "sourceNode": "pve1"}),
                json!({"controlPlaneEndpoint": endpoint}),
                "",
            ),
        ),
        (
            "static-ipv4",
            lines(
                json!({"templateID": 9000, "sourceNode": "pve1", "full": true, "storage": "local-lvm",
                       "numSockets": 1, "numCores": 2, "memoryMiB": 2048,
                       "disks": {"bootVolume": {"disk": "scsi0", "sizeGb": 20}},
                       "network": {"default": {"bridge": "vmbr0", "model": "virtio"}}}),
                json!({"allowedNodes": ["pve1"], "controlPlaneEndpoint": endpoint,
                       "dnsServers": ["10.20.0.1"], "ipv4Config": pool,
                       "schedulerHints": {"memoryAdjustment": 0}}),
                "address net0 10.20.0.11 24 10.20.0.1\n",
            ),
        ),
        (
            "dual-stack-range",
            lines(
                json!({"templateID": 9000, "sourceNode": "pve1", "vmIDRange": {"start": 1000, "end": 1099},
                       "tags": ["k8s"], "checks": {"skipCloudInitStatus": true}}),
                json!({"controlPlaneEndpoint": endpoint, "ipv4Config": pool, "ipv6Config": v6,
                       "dnsServers": ["10.20.0.1", "fd00:20::1"]}),
                "failure-domain pve1\nformat ignition\nbootstrap {\"ignition\":{\"version\":\"3.4.0\"}}\n",
            ),
        ),
        (
            "selector-no-agent",
            lines(
                json!({"templateSelector": {"matchTags": ["ubuntu", "cloudinit"]}, "full": false,
                       "checks": {"skipQemuGuestAgent": true}}),
                json!({"controlPlaneEndpoint": endpoint}),
                "",
            ),
        ),
    ]
}

/// Run a scenario against a fresh pve-sim and write down every reply it gave.
fn record(runtime: &tokio::runtime::Runtime, headers: &str) -> String {
    let sim = runtime
        .block_on(pve_sim::Simulator::start(
            pve_sim::Config {
                // The same MACs and UUIDs every time: recording again changes little.
                seed: Some(15),
                ..pve_sim::Config::fast()
            },
            pve_sim::ListenOpts {
                addr: "127.0.0.1:0".into(),
                tls: false,
            },
        ))
        .expect("pve-sim starts");
    let replies = Rc::new(RefCell::new(vec![]));
    let recorder = Recorder {
        base: sim.base_url().to_string(),
        client: reqwest::blocking::Client::new(),
        replies: replies.clone(),
    };
    let inputs = Inputs::of(&Script::parse(headers.as_bytes()));
    let reached = lifecycle::drive::<Proxmox>(&inputs, recorder, &|| {
        std::thread::sleep(Duration::from_millis(30))
    });
    assert!(
        reached.machine_ready && reached.deleted,
        "the scenario did not run through against pve-sim: {reached:?}\n{headers}"
    );
    runtime.block_on(sim.shutdown());
    let mut replies = replies.take();
    canonical_times(&mut replies);
    script_text(headers, &replies)
}

fn is_task_status(path: &str) -> bool {
    path.contains("/tasks/")
        && path
            .split('?')
            .next()
            .is_some_and(|p| p.ends_with("/status"))
}

/// When a task started (`UPID:node:pid:PSTART:STARTTIME:...` and the status's
/// `pstart`/`starttime`) and how long nodes and VMs have been up come from the clock:
/// the same values on every recording, so recording again changes only what the
/// plugin or pve-sim changed. The n-th task seen starts at [`EPOCH`] + n seconds.
fn canonical_times(exchanges: &mut [Exchange]) {
    let mut tasks: Vec<(String, String)> = vec![];
    for (_, _, reply) in exchanges.iter() {
        if let Reply::Http { body, .. } = reply {
            let text = String::from_utf8_lossy(body);
            for (i, _) in text.match_indices("UPID:") {
                let fields: Vec<&str> = text[i..].splitn(6, ':').collect();
                if fields.len() < 6 {
                    continue;
                }
                // The pid tells tasks apart (two may start in the same tick).
                let old = format!("{}:{}:{}", fields[2], fields[3], fields[4]);
                if !tasks.iter().any(|(o, _)| *o == old) {
                    let n = tasks.len() as u64;
                    let new = format!("{}:{:08X}:{:08X}", fields[2], PSTART + n * 10, EPOCH + n);
                    tasks.push((old, new));
                }
            }
        }
    }
    let swap = |text: &str, colon: &str| {
        tasks.iter().fold(text.to_string(), |t, (old, new)| {
            t.replace(&old.replace(':', colon), &new.replace(':', colon))
        })
    };
    for (_, path, reply) in exchanges.iter_mut() {
        *path = swap(path, "%3A");
        if let Reply::Http { body, .. } = reply {
            let text = swap(&String::from_utf8_lossy(body), ":");
            *body = match serde_json::from_str::<Value>(&text) {
                Ok(mut v) => {
                    fix_times(&mut v);
                    v.to_string().into_bytes()
                }
                Err(_) => text.into_bytes(),
            };
        }
    }
}

/// The process start ticks of the first task recorded (pve-sim's start at 10 ms ticks).
const PSTART: u64 = 1_000_000;
/// When the first task recorded started: 2026-11-30T00:00:00Z.
const EPOCH: u64 = 1_796_083_200;

/// A task status takes its times from its (canonical) UPID; uptimes become a day for a
/// node, a minute for a running VM and zero for a stopped one.
fn fix_times(v: &mut Value) {
    match v {
        Value::Object(m) => {
            let from_upid = m.get("upid").and_then(Value::as_str).and_then(|u| {
                let f: Vec<&str> = u.split(':').collect();
                let hex = |s: &str| u64::from_str_radix(s, 16).ok();
                Some((hex(f.get(3)?)?, hex(f.get(4)?)?))
            });
            if let Some((pstart, starttime)) = from_upid {
                m.entry("pstart").and_modify(|x| *x = json!(pstart));
                m.entry("starttime").and_modify(|x| *x = json!(starttime));
            }
            if m.contains_key("uptime") {
                let kind = |k: &str| m.get(k).and_then(Value::as_str);
                let up = if kind("type") == Some("node") {
                    86_400
                } else if kind("status") == Some("running") {
                    60
                } else {
                    0
                };
                m.insert("uptime".into(), json!(up));
            }
            m.values_mut().for_each(fix_times);
        }
        Value::Array(a) => a.iter_mut().for_each(fix_times),
        _ => {}
    }
}

/// One recorded exchange: the request's method and path (no query), the reply.
type Exchange = (String, String, Reply);

/// A script: the headers, then one route per path in the order first asked, with the
/// replies in the order given.
fn script_text(headers: &str, exchanges: &[Exchange]) -> String {
    let mut routes: Vec<((String, String), Vec<&Reply>)> = vec![];
    for (method, path, reply) in exchanges {
        let key = (method.clone(), path.clone());
        match routes.iter_mut().find(|(k, _)| *k == key) {
            Some((_, replies)) => replies.push(reply),
            None => routes.push((key, vec![reply])),
        }
    }
    let mut out = headers.to_string();
    for ((method, path), mut replies) in routes {
        // The last reply repeats: the same ones at the end are written once.
        while replies.len() > 1 && replies[replies.len() - 1] == replies[replies.len() - 2] {
            replies.pop();
        }
        out.push_str(&format!("@ {method} {path}\n"));
        for r in replies {
            out.push_str(&r.to_line());
            out.push('\n');
        }
    }
    out
}

/// Forwards the plugin's requests to pve-sim (with its token) and keeps the replies.
struct Recorder {
    base: String,
    client: reqwest::blocking::Client,
    replies: Rc<RefCell<Vec<Exchange>>>,
}

impl Host for Recorder {
    fn http(&mut self, request: &Request<'_>) -> Result<Response, HttpError> {
        let path = api_path(request.url);
        let method: reqwest::Method = request.method.parse().expect("an HTTP method");
        let mut call = self
            .client
            .request(method, format!("{}/api2/json{path}", self.base))
            .header(
                "authorization",
                format!("PVEAPIToken={}", pve_sim::DEFAULT_TOKEN),
            );
        for (k, v) in &request.headers {
            if *k != "authorization" {
                call = call.header(*k, v);
            }
        }
        if let Some(body) = &request.body {
            call = call.body(body.clone());
        }
        // A task pve-sim finishes at once may still read "running" for a moment: ask
        // again until it has stopped, so that every recording sees the same replies
        // (the `tasks-running` variants give the plugin running tasks).
        let task_status = request.method == "GET" && is_task_status(path);
        let (status, body) = loop {
            let attempt = call
                .try_clone()
                .expect("a request without a streamed body")
                .send()
                .map_err(|e| HttpError::Transport(e.to_string()))?;
            let status = attempt.status().as_u16();
            let body = attempt.bytes().expect("a body").to_vec();
            let running = serde_json::from_slice::<Value>(&body)
                .is_ok_and(|v| v["data"]["status"] == "running");
            if !(task_status && running) {
                break (status, body);
            }
            std::thread::sleep(Duration::from_millis(5));
        };
        // One line per reply: JSON is written compact again.
        let body = match serde_json::from_slice::<Value>(&body) {
            Ok(v) => v.to_string().into_bytes(),
            Err(_) => body,
        };
        let route = path.split('?').next().unwrap_or_default().to_string();
        let reply = Reply::Http {
            status,
            reason: None,
            body: body.clone(),
        };
        self.replies
            .borrow_mut()
            .push((request.method.to_string(), route, reply));
        Ok(Response {
            status,
            reason: None,
            body,
        })
    }

    fn log(&mut self, _: Level, _: &str, _: &[(&str, String)]) {}
}

/// What real Proxmox VE sends, from `tests/pve-sim/reference` (or the directory passed).
struct Reference {
    /// Route pattern → a real reply body for it.
    captures: Vec<(&'static str, &'static str, Value)>,
    /// The task status bodies (`running`, `stopped_ok`, `stopped_error`).
    tasks: BTreeMap<String, Value>,
    /// Error replies: name → (status, reason phrase, body).
    errors: Vec<(String, Reply)>,
}

impl Reference {
    fn load(dir: &Path) -> Reference {
        let read = |name: &str| -> Value {
            let path = dir.join(name);
            let text = std::fs::read_to_string(&path).unwrap_or_else(|e| {
                panic!("{}: {e} (pass the reference directory)", path.display())
            });
            serde_json::from_str(&text).expect("reference JSON")
        };
        let real = read("real-pve9-captures.json");
        let captures = vec![
            ("GET", "/nodes", real["GET /api2/json/nodes"].clone()),
            (
                "GET",
                "/nodes/*/storage",
                real["GET /api2/json/nodes/pve/storage"].clone(),
            ),
            (
                "GET",
                "/nodes/*/qemu",
                real["GET /api2/json/nodes/pve/qemu"].clone(),
            ),
            (
                "GET",
                "/nodes/*/qemu/*/agent/network-get-interfaces",
                real["GET /api2/json/nodes/pve/qemu/100/agent/network-get-interfaces"].clone(),
            ),
        ];
        let tasks_file = read("proxmoxer-task-status-fixtures.json");
        let tasks = ["running", "stopped_ok", "stopped_error"]
            .iter()
            .map(|k| (k.to_string(), tasks_file[*k].clone()))
            .collect();
        let mut errors = vec![];
        let formats = read("error-format-examples.derived.json");
        for (name, example) in formats.as_object().expect("an object") {
            let Some(line) = example.get("status_line").and_then(Value::as_str) else {
                continue;
            };
            // "HTTP/1.1 500 Reason phrase   (or: ...)": the first alternative.
            let line = line.trim_start_matches("HTTP/1.1 ");
            let line = line.split("  (").next().unwrap_or(line).trim();
            let (status, reason) = line.split_once(' ').unwrap_or((line, ""));
            let body = match &example["body"] {
                Value::Object(_) => example["body"].to_string().into_bytes(),
                _ => vec![], // "(empty)", "(no JSON body expected)"
            };
            errors.push((
                name.replace('_', "-"),
                Reply::Http {
                    status: status.parse().expect("a status"),
                    reason: Some(reason.to_string()),
                    body,
                },
            ));
        }
        Reference {
            captures,
            tasks,
            errors,
        }
    }

    /// Variants of a recorded script with real replies in place of pve-sim's.
    fn variants(&self, recorded: &str) -> Vec<(String, String)> {
        let mut out = vec![];
        let lines: Vec<&str> = recorded.lines().collect();
        let routes: Vec<usize> = (0..lines.len())
            .filter(|i| lines[*i].starts_with("@ "))
            .collect();

        // Real captures in place of the simulator's bodies (the agent's interface
        // keeps the MAC the plugin looks for).
        let mut real = lines.iter().map(|l| l.to_string()).collect::<Vec<_>>();
        for &r in &routes {
            let Some((method, path)) = lines[r][2..].split_once(' ') else {
                continue;
            };
            for (m, pattern, body) in &self.captures {
                if *m == method && matches(pattern, path) {
                    for reply in real
                        .iter_mut()
                        .skip(r + 1)
                        .take_while(|l| !l.starts_with("@ "))
                    {
                        *reply = format!("200 {}", adapt(body, reply));
                    }
                }
            }
        }
        out.push(("real-captures".to_string(), real.join("\n") + "\n"));

        // Tasks as real PVE reports them: running first, then done; or failed.
        for (name, first, then) in [
            ("tasks-running", "running", "stopped_ok"),
            ("tasks-failed", "stopped_error", "stopped_error"),
        ] {
            let mut text = vec![];
            for (i, l) in lines.iter().enumerate() {
                text.push(l.to_string());
                if l.starts_with("@ GET /nodes/") && l.ends_with("/status") && l.contains("/tasks/")
                {
                    let upid = l.split('/').nth(4).unwrap_or_default();
                    let body = |k: &str| {
                        let mut b = self.tasks[k].clone();
                        b["data"]["upid"] = json!(upid);
                        b.to_string()
                    };
                    text.push(format!("200 {}", body(first)));
                    text.push(format!("200 {}", body(then)));
                    let _ = i;
                }
            }
            out.push((name.to_string(), strip_replaced(&text)));
        }

        // Each error format, as the first reply of one route in turn.
        for (n, (name, reply)) in self.errors.iter().enumerate() {
            if routes.is_empty() {
                break;
            }
            let at = routes[(n * 7 + 3) % routes.len()];
            let mut text: Vec<String> = lines.iter().map(|l| l.to_string()).collect();
            text.insert(at + 1, reply.to_line());
            out.push((format!("error-{name}"), text.join("\n") + "\n"));
        }
        out
    }
}

/// A task-status route in the `tasks-*` variants keeps only the two real replies.
fn strip_replaced(lines: &[String]) -> String {
    let mut out = vec![];
    let mut skip = false;
    let mut kept = 0;
    for l in lines {
        if l.starts_with("@ ") {
            skip = l.contains("/tasks/") && l.ends_with("/status");
            kept = 0;
            out.push(l.clone());
            continue;
        }
        if skip {
            kept += 1;
            if kept > 2 {
                continue;
            }
        }
        out.push(l.clone());
    }
    out.join("\n") + "\n"
}

/// The capture, with what the recorded reply ties to the machine kept: the MAC of
/// the interface the plugin reads (the second of the capture).
fn adapt(capture: &Value, recorded_line: &str) -> String {
    let mut body = capture.clone();
    let recorded: Value = recorded_line
        .split_once(' ')
        .and_then(|(_, b)| serde_json::from_str(b).ok())
        .unwrap_or(Value::Null);
    if let Some(result) = recorded["data"]["result"].as_array() {
        let mac = result
            .iter()
            .filter_map(|i| i["hardware-address"].as_str())
            .find(|m| *m != "00:00:00:00:00:00");
        if let (Some(mac), Some(list)) = (mac, body["data"]["result"].as_array_mut())
            && let Some(nic) = list.get_mut(1)
        {
            nic["hardware-address"] = json!(mac);
        }
    }
    body.to_string()
}

fn matches(pattern: &str, path: &str) -> bool {
    let p: Vec<&str> = pattern.split('/').collect();
    let s: Vec<&str> = path.split('/').collect();
    p.len() == s.len() && p.iter().zip(&s).all(|(p, s)| *p == "*" || p == s)
}

/// The conformance fixtures' specs (YAML) as JSON.
fn fixture_specs(repo: &Path) -> Vec<(String, String)> {
    let mut out = vec![];
    for plugin in ["proxmox", "redfish"] {
        for kind in ["machine", "cluster"] {
            let path = repo.join(format!("tests/conformance/{plugin}/{kind}.yaml"));
            let Ok(text) = std::fs::read_to_string(&path) else {
                continue;
            };
            let value: Value = serde_yaml::from_str(&text).expect("fixture YAML");
            out.push((format!("conformance-{plugin}-{kind}"), value.to_string()));
        }
    }
    out
}

/// Every property name in the plugins' spec schemas, quoted as JSON keys.
fn dictionary() -> String {
    let mut names = std::collections::BTreeSet::new();
    let infos = [Proxmox::info(), hyperplug_fuzz::Redfish::info()];
    for info in &infos {
        for kind in &info.kinds {
            let schema: Value =
                serde_json::from_str(&kind.versions[0].spec_schema).expect("a JSON schema");
            collect_properties(&schema, &mut names);
        }
    }
    let mut out = String::from("# Spec field names of the bundled plugins (fuzz/record)\n");
    for n in names {
        out.push_str(&format!("\"\\\"{n}\\\":\"\n"));
    }
    out
}

fn collect_properties(v: &Value, names: &mut std::collections::BTreeSet<String>) {
    match v {
        Value::Object(m) => {
            if let Some(Value::Object(props)) = m.get("properties") {
                names.extend(props.keys().cloned());
            }
            m.values().for_each(|x| collect_properties(x, names));
        }
        Value::Array(a) => a.iter().for_each(|x| collect_properties(x, names)),
        _ => {}
    }
}

/// NoCloud files as the plugins write them, and names and labels at the limits.
fn nocloud_seeds() -> Vec<(&'static str, String)> {
    let long = "n".repeat(64);
    vec![
        (
            "cloud-init",
            "cidata\n=meta-data\ninstance-id: \"4c4c4544-0042-3510-8052-b4c04f4d3232\"\nlocal-hostname: \"cp-0\"\n=user-data\n#cloud-config\nruncmd: [kubeadm init]\n=network-config\nversion: 2\nethernets:\n  \"eth0\":\n    match:\n      macaddress: \"bc:24:11:11:75:0e\"\n    dhcp4: true\n".to_string(),
        ),
        ("ignition", "cidata\n=user-data\n{\"ignition\":{\"version\":\"3.4.0\"}}\n=meta-data\ninstance-id: x\n".to_string()),
        ("names-that-map-alike", "CIDATA\n=a.b.c\nx\n=a_b.c\ny\n=.hidden\nz\n".to_string()),
        ("longest-name", format!("cidata16charsxxx\n={long}\n{long}\n")),
        ("empty", "cidata\n".to_string()),
        ("many-files", {
            let mut s = "cidata\n".to_string();
            for i in 0..40 {
                s.push_str(&format!("=file-{i:03}-with-a-long-name\n{}\n", "x".repeat(i * 97)));
            }
            s
        }),
    ]
}

fn fresh(dir: &Path) {
    let _ = std::fs::remove_dir_all(dir);
    std::fs::create_dir_all(dir).expect("create a seed directory");
}

fn write(dir: &Path, name: &str, text: &str) {
    std::fs::write(dir.join(name), text).expect("write a seed");
}
