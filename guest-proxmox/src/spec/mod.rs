//! The API of the Proxmox kinds: `v1alpha2` (CAPMOX's current API plus our
//! extensions), which the plugin works on, and `v1alpha1` (the seed's manifests and
//! CAPMOX's older API), with conversion between them and their CRD schemas.
//!
//! The host serves one version today, the one `identity` declares
//! ([`SERVED`]), and passes specs in it; [`machine_spec`] and [`cluster_spec`] read
//! them into the `v1alpha2` model.
use std::collections::BTreeSet;

use guest_kit::types::PluginError;
use guest_kit::{invalid, parse_spec};

pub mod common;
pub mod convert;
pub mod schema;
pub mod v1alpha1;
pub mod v1alpha2;

pub use common::*;
pub use v1alpha2::{
    ClusterSpec, MachineSpec, Network, NetworkDevice, RouteSpec, RoutingPolicySpec, VrfDevice,
};

use convert::Version;

/// The version the host serves and passes specs in.
pub const SERVED: Version = Version::V1alpha1;

/// A ProxmoxMachine spec as the host passes it (JSON in [`SERVED`]), as `v1alpha2`.
/// Errors name the field as the user wrote it (`root` is its path, e.g. `spec`).
pub fn machine_spec(json: &str, root: &str) -> Result<MachineSpec, PluginError> {
    match SERVED {
        Version::V1alpha1 => {
            let spec: v1alpha1::MachineSpec = parse_spec(json, root)?;
            check_names(&spec, root)?;
            Ok(convert::machine_up(&spec))
        }
        Version::V1alpha2 => parse_spec(json, root),
    }
}

/// `v1alpha1`'s additional NICs are `net1` ... `net31`, each once (`net0` is `default`).
fn check_names(spec: &v1alpha1::MachineSpec, root: &str) -> Result<(), PluginError> {
    let Some(net) = &spec.network else {
        return Ok(());
    };
    let mut seen = BTreeSet::new();
    for (i, d) in net.additional_devices.iter().enumerate() {
        let number = d
            .name
            .strip_prefix("net")
            .and_then(|n| n.parse::<u32>().ok());
        if !number.is_some_and(|n| (1..=31).contains(&n)) || !seen.insert(&d.name) {
            return Err(invalid(
                &format!("{root}.network.additionalDevices[{i}].name"),
                format!("`{}` is not a free NIC name (net1 ... net31)", d.name),
            ));
        }
    }
    Ok(())
}

/// A ProxmoxCluster spec as the host passes it, as `v1alpha2`.
pub fn cluster_spec(json: &str, root: &str) -> Result<ClusterSpec, PluginError> {
    match SERVED {
        Version::V1alpha1 => Ok(convert::cluster_up(&parse_spec(json, root)?)),
        Version::V1alpha2 => parse_spec(json, root),
    }
}
