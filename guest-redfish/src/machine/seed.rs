//! The NoCloud seed of a machine: its bootstrap data, identity and (with an IPAM
//! address) static network configuration matched by the host's first NIC's MAC.

use guest_kit::machine::MachineRequest;
use guest_kit::terminal;
use guest_kit::types::PluginError;
use serde_json::Value;

use super::NIC;
use crate::api::{Redfish, odata_id};
use crate::inventory::Host;
use crate::spec::ClusterSpec;

pub(super) fn seed_iso(
    req: &MachineRequest,
    host: &Host,
    cluster: &ClusterSpec,
    bmc: &Redfish,
    system: &Value,
    user_data: &[u8],
) -> Result<Vec<u8>, PluginError> {
    let network = match req.addresses.iter().find(|a| a.device == NIC) {
        None => None,
        Some(address) => {
            let mac = first_mac(bmc, system)?.ok_or_else(|| {
                terminal(
                    "NoNetworkInterface",
                    format!(
                        "host {} reports no NIC MAC to bind its static address to",
                        host.name
                    ),
                )
            })?;
            let ip =
                guest_nocloud::Prefix::parse(&format!("{}/{}", address.address, address.prefix))
                    .map_err(|e| terminal("InvalidAddress", format!("the IPAM address: {e}")))?;
            let routes = address
                .gateway
                .as_deref()
                .and_then(|g| g.parse().ok())
                .map(|via| guest_nocloud::Route {
                    to: guest_nocloud::Prefix::default_route(ip.is_v6()),
                    via: Some(via),
                    metric: None,
                    table: None,
                })
                .into_iter()
                .collect();
            let config = guest_nocloud::NetworkConfig {
                ethernets: vec![guest_nocloud::Ethernet {
                    name: "eth0".into(),
                    mac,
                    addresses: vec![ip],
                    routes,
                    dns_servers: cluster.dns_servers.clone(),
                    ..Default::default()
                }],
                vrfs: vec![],
            };
            Some(
                config
                    .render()
                    .map_err(|e| terminal("InvalidNetwork", e.to_string()))?,
            )
        }
    };
    let seed = guest_nocloud::Seed {
        user_data: user_data.to_vec(),
        meta_data: guest_nocloud::MetaData {
            instance_id: req.machine.uid.clone(),
            hostname: req.machine.name.clone(),
            provider_id: Some(host.provider_id()),
            ..Default::default()
        },
        network_config: network,
    };
    seed.iso().map_err(|e| {
        terminal(
            "BootstrapDataTooLarge",
            format!("building the NoCloud ISO: {e}"),
        )
    })
}

/// The MAC of the system's first Ethernet interface.
fn first_mac(bmc: &Redfish, system: &Value) -> Result<Option<String>, PluginError> {
    let doing = "reading the host's network interfaces";
    let Some(collection) = system.get("EthernetInterfaces").and_then(odata_id) else {
        return Ok(None);
    };
    for path in bmc.members(&collection).map_err(|e| e.classify(doing))? {
        let nic = bmc.get(&path).map_err(|e| e.classify(doing))?;
        let mac = nic
            .get("MACAddress")
            .or_else(|| nic.get("PermanentMACAddress"))
            .and_then(Value::as_str)
            .filter(|m| !m.is_empty());
        if let Some(mac) = mac {
            return Ok(Some(mac.to_ascii_lowercase()));
        }
    }
    Ok(None)
}
