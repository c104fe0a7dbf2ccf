//! A plugin driven as the host drives it, against a [`Script`]'s infrastructure: the
//! cluster reconciled, then the machine created call after call (its state handed
//! back, addresses and bootstrap data given when it asks), described, described again
//! with its state lost, and deleted until it says the VM is gone. Every result is
//! checked ([`crate::checks`]).
use guest_kit::cluster::{ClusterRequest, Guest as ClusterGuest};
use guest_kit::machine::{
    AllocatedAddress, BootstrapData, Guest as MachineGuest, MachineRequest, TemplateRequest,
};
use guest_kit::testing::{allocated, credentials, machine_request, object};
use guest_kit::types::PluginError;

use crate::checks;
use guest_kit::fuzzing::Host;

use crate::script::{Script, Seen};

/// The machine's UID: the ownership marker recorded seeds carry.
pub const UID: &str = "7f3a9c2e-1b4d-4e5f-8a6b-0c1d2e3f4a5b";
/// The endpoint of the call's credentials (replies come from the script, never from it).
pub const ENDPOINT: &str = "https://pve.test:8006";
/// Calls of one kind in one input: a lifecycle takes about twenty creates.
const MAX_CALLS: usize = 48;

/// How far the machine got, for the seeds' own tests.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct Reached {
    pub cluster_ready: bool,
    pub machine_ready: bool,
    pub deleted: bool,
    /// The phase of each create call (or the error class), in order.
    pub phases: Vec<String>,
}

/// What a lifecycle starts from: the script's header lines.
#[derive(Debug, Clone)]
pub struct Inputs {
    /// The machine's and the cluster's spec (JSON).
    pub spec: String,
    pub cluster_spec: String,
    /// The state the first create call gets (`state`: lost or forged state).
    pub state: Option<String>,
    pub failure_domain: Option<String>,
    /// What the bootstrap provider hands over when the plugin asks (`bootstrap`, `\n`
    /// for a new line; `format`).
    pub bootstrap: BootstrapData,
    /// What IPAM hands over for a device (`address DEVICE ADDRESS PREFIX [GATEWAY]`);
    /// without one, an address of its own.
    pub addresses: Vec<AllocatedAddress>,
}

impl Inputs {
    pub fn of(script: &Script) -> Inputs {
        Inputs {
            spec: script.header("spec").unwrap_or("{}").to_string(),
            cluster_spec: script.header("cluster").unwrap_or("{}").to_string(),
            state: script.header("state").map(str::to_string),
            failure_domain: script.header("failure-domain").map(str::to_string),
            bootstrap: BootstrapData {
                format: script
                    .header("format")
                    .unwrap_or("cloud-config")
                    .to_string(),
                value: script
                    .header("bootstrap")
                    .unwrap_or("#cloud-config\\nruncmd: [kubeadm join]")
                    .replace("\\n", "\n")
                    .into_bytes(),
            },
            addresses: script
                .headers("address")
                .iter()
                .filter_map(|a| address(a))
                .collect(),
        }
    }
}

/// Run the whole lifecycle of plugin `P` against `input`'s script, and check that
/// nothing the plugin logged or sent carries the secret.
pub fn run<P: MachineGuest + ClusterGuest>(input: &[u8]) -> Reached {
    let script = Script::parse(input);
    let inputs = Inputs::of(&script);
    let (host, seen) = script.into_host();
    let reached = drive::<P>(&inputs, host, &|| {});
    no_secret_sent(&seen.borrow());
    reached
}

/// The lifecycle of plugin `P` from `inputs` with `host` answering its imports;
/// `pause` runs between two calls (a recording against a live simulator waits there).
pub fn drive<P: MachineGuest + ClusterGuest>(
    inputs: &Inputs,
    host: impl Host + 'static,
    pause: &dyn Fn(),
) -> Reached {
    let _installed = guest_kit::fuzzing::install(host);
    let mut req = machine_request(UID, &inputs.spec, &inputs.cluster_spec, ENDPOINT);
    req.state = inputs.state.clone();
    req.failure_domain = inputs.failure_domain.clone();
    let (bootstrap, given) = (&inputs.bootstrap, &inputs.addresses);
    let cluster_spec = &inputs.cluster_spec;
    let spec = &inputs.spec;

    let mut reached = Reached {
        cluster_ready: cluster::<P>(cluster_spec),
        ..Reached::default()
    };
    template::<P>(spec);
    let roots = ["spec", "cluster.spec"];

    for _ in 0..MAX_CALLS {
        pause();
        match P::create(req.clone()) {
            Ok(s) => {
                checks::machine_status(&s);
                reached.phases.push(s.progress.phase.clone());
                req.state = Some(s.progress.state.clone());
                if s.needs_bootstrap {
                    req.bootstrap = Some(bootstrap.clone());
                }
                for r in &s.address_requests {
                    give_address(&mut req, given, &r.device, &checks::pool_name(&r.pool));
                }
                if s.ready {
                    reached.machine_ready = true;
                    break;
                }
            }
            Err(e) => {
                checks::error(&e, &roots);
                reached.phases.push(class(&e).into());
                // The host stops on anything but a transient error until the spec
                // changes; the user then deletes the machine.
                if !matches!(e, PluginError::Transient(_)) {
                    break;
                }
            }
        }
    }
    for state in [req.state.clone(), None] {
        match P::describe(MachineRequest {
            state,
            ..req.clone()
        }) {
            Ok(s) => checks::machine_status(&s),
            Err(e) => checks::error(&e, &roots),
        }
    }
    for _ in 0..MAX_CALLS {
        pause();
        match <P as MachineGuest>::delete(req.clone()) {
            Ok(None) => {
                reached.deleted = true;
                break;
            }
            Ok(Some(p)) => {
                checks::progress(&p);
                req.state = Some(p.state);
            }
            Err(e) => {
                checks::error(&e, &roots);
                if !matches!(e, PluginError::Transient(_)) {
                    break;
                }
            }
        }
    }
    reached
}

fn cluster<P: ClusterGuest>(spec: &str) -> bool {
    let req = ClusterRequest {
        cluster: object("c1", "c1-uid"),
        spec: spec.to_string(),
        plugin_status: None,
        state: None,
        credentials: credentials(ENDPOINT),
        more_credentials: vec![],
    };
    match P::reconcile(req) {
        Ok(s) => {
            checks::progress(&s.progress);
            checks::entries("cluster details", &s.details);
            assert!(s.failure_domains.len() <= checks::bounds::MAX_ENTRIES);
            assert!(s.ip_pools.len() <= checks::bounds::MAX_ENTRIES);
            s.ready
        }
        Err(e) => {
            checks::error(&e, &["spec"]);
            false
        }
    }
}

fn template<P: MachineGuest>(spec: &str) {
    let req = TemplateRequest {
        template: object("t1", "t1-uid"),
        spec: spec.to_string(),
        credentials: Some(credentials(ENDPOINT)),
    };
    match P::describe_template(req) {
        Ok(s) => {
            checks::entries("capacity", &s.capacity);
            checks::entries("node info", &s.node_info);
        }
        Err(e) => checks::error(&e, &["spec.template.spec"]),
    }
}

/// `address DEVICE ADDRESS PREFIX [GATEWAY]`.
fn address(line: &str) -> Option<AllocatedAddress> {
    let mut words = line.split_whitespace();
    let (device, addr, prefix) = (words.next()?, words.next()?, words.next()?.parse().ok()?);
    Some(allocated(device, addr, prefix, words.next()))
}

/// What the host's IPAM gives a request: the script's address for the device (of the
/// pool's family) if it has one, else one of its own.
fn give_address(req: &mut MachineRequest, given: &[AllocatedAddress], device: &str, pool: &str) {
    let v6 = pool.contains('6');
    if req
        .addresses
        .iter()
        .any(|a| a.device == device && a.address.contains(':') == v6)
    {
        return;
    }
    let from_script = given
        .iter()
        .find(|a| a.device == device && a.address.contains(':') == v6)
        .cloned();
    let n = req.addresses.len() + 10;
    req.addresses.push(from_script.unwrap_or_else(|| {
        if v6 {
            allocated(device, &format!("fd00::{n:x}"), 64, Some("fd00::1"))
        } else {
            allocated(device, &format!("10.0.0.{n}"), 24, Some("10.0.0.1"))
        }
    }));
}

fn class(e: &PluginError) -> &'static str {
    match e {
        PluginError::Transient(_) => "transient",
        PluginError::Terminal(_) => "terminal",
        PluginError::InvalidSpec(_) => "invalid",
    }
}

/// Nothing the plugin logged or sent (URLs, bodies) carries the secret (the
/// `authorization` header is the one place it belongs, and is not recorded).
fn no_secret_sent(seen: &Seen) {
    for line in &seen.logs {
        checks::no_secret("log line", line);
    }
    for r in &seen.requests {
        checks::no_secret("request URL", r);
    }
    for b in &seen.bodies {
        checks::no_secret("request body", &String::from_utf8_lossy(b));
    }
}
