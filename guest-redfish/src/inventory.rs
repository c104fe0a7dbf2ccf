//! The inventory: every system served by the BMCs whose credentials the call carries
//! (the RedfishCluster's `credentialsRefs`), and the claim key of each.
use guest_kit::invalid;
use guest_kit::types::{Credentials, NamedCredentials, PluginError};
use serde::{Deserialize, Serialize};
use serde_json::Value;

use crate::api::Redfish;

/// Where the Systems collection is, on every Redfish service.
const SYSTEMS: &str = "/redfish/v1/Systems";

/// One BMC of the inventory.
pub struct Bmc<'a> {
    pub credentials: &'a Credentials,
}

impl Bmc<'_> {
    pub fn endpoint(&self) -> &str {
        self.credentials.endpoint.trim_end_matches('/')
    }

    pub fn client(&self) -> Redfish {
        Redfish::new(self.credentials)
    }
}

/// A host: one computer system behind one BMC.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Host {
    /// The BMC's base URL (it finds the credentials again).
    pub endpoint: String,
    /// The system's `@odata.id`.
    pub path: String,
    /// SMBIOS UUID, lower case: the provider ID and the claim key.
    pub uuid: String,
    pub name: String,
}

impl Host {
    /// The key this host is claimed under: its UUID, whichever BMC URL reaches it.
    pub fn claim_key(&self) -> String {
        claim_key(&self.uuid)
    }

    pub fn provider_id(&self) -> String {
        format!("redfish://{}", self.uuid)
    }
}

pub fn claim_key(uuid: &str) -> String {
    format!("host/{}", uuid.to_ascii_lowercase())
}

/// The BMCs of a call, each endpoint once, in the order the cluster names them.
pub fn bmcs<'a>(primary: &'a Credentials, more: &'a [NamedCredentials]) -> Vec<Bmc<'a>> {
    let mut out: Vec<Bmc<'a>> = Vec::new();
    for credentials in std::iter::once(primary).chain(more.iter().map(|n| &n.credentials)) {
        let bmc = Bmc { credentials };
        if !out.iter().any(|b| b.endpoint() == bmc.endpoint()) {
            out.push(bmc);
        }
    }
    out
}

/// The BMC at `endpoint`, if the call still carries its credentials.
pub fn bmc_at<'a, 'b>(bmcs: &'b [Bmc<'a>], endpoint: &str) -> Option<&'b Bmc<'a>> {
    bmcs.iter()
        .find(|b| b.endpoint() == endpoint.trim_end_matches('/'))
}

/// Every system a BMC serves.
pub fn hosts(bmc: &Bmc) -> Result<Vec<Host>, PluginError> {
    let client = bmc.client();
    let doing = format!("listing the systems of {}", bmc.endpoint());
    let members = client.members(SYSTEMS).map_err(|e| e.classify(&doing))?;
    let mut hosts = Vec::with_capacity(members.len());
    for path in members {
        let system = client.get(&path).map_err(|e| e.classify(&doing))?;
        if let Some(host) = host_of(bmc.endpoint(), &path, &system) {
            hosts.push(host);
        }
    }
    Ok(hosts)
}

/// A system resource as a host; systems without a UUID cannot be told apart, so they
/// are not offered.
pub fn host_of(endpoint: &str, path: &str, system: &Value) -> Option<Host> {
    let uuid = system.get("UUID")?.as_str()?.trim().to_ascii_lowercase();
    if uuid.is_empty() {
        return None;
    }
    let name = system
        .get("Name")
        .and_then(Value::as_str)
        .or_else(|| system.get("Id").and_then(Value::as_str))
        .unwrap_or(&uuid)
        .to_string();
    Some(Host {
        endpoint: endpoint.to_string(),
        path: path.to_string(),
        uuid,
        name,
    })
}

/// Refuse a call without any BMC to talk to.
pub fn require_some(bmcs: &[Bmc]) -> Result<(), PluginError> {
    if bmcs.is_empty() {
        return Err(invalid(
            "spec.credentialsRefs",
            "name at least one BMC credentials Secret",
        ));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;
    use guest_kit::testing::credentials as bmc;

    use crate::machine::testing::{host, more};

    #[test]
    fn a_host_is_claimed_and_identified_by_its_uuid_in_lower_case() {
        let h = host("https://bmc1.test", "node-1", "4c4c4544-0035");
        assert_eq!(h.claim_key(), "host/4c4c4544-0035");
        assert_eq!(claim_key("4C4C4544-0035"), "host/4c4c4544-0035");
        assert_eq!(h.provider_id(), "redfish://4c4c4544-0035");
    }

    #[test]
    fn the_bmcs_of_a_call_are_its_credentials_each_endpoint_once_in_order() {
        let primary = bmc("https://bmc1.test/");
        let more = more(&[
            "https://bmc2.test",
            "https://bmc1.test",
            "https://bmc3.test/",
        ]);
        let all = bmcs(&primary, &more);
        let endpoints: Vec<&str> = all.iter().map(Bmc::endpoint).collect();
        assert_eq!(
            endpoints,
            [
                "https://bmc1.test",
                "https://bmc2.test",
                "https://bmc3.test"
            ]
        );
    }

    #[test]
    fn a_bmc_is_found_again_by_its_endpoint_with_or_without_a_trailing_slash() {
        let primary = bmc("https://bmc1.test");
        let more = more(&["https://bmc2.test/"]);
        let all = bmcs(&primary, &more);
        let found = bmc_at(&all, "https://bmc2.test/").map(Bmc::endpoint);
        assert_eq!(found, Some("https://bmc2.test"));
        assert!(bmc_at(&all, "https://bmc9.test").is_none());
    }

    #[test]
    fn a_system_is_a_host_named_by_its_name_else_its_id_else_its_uuid() {
        let path = "/redfish/v1/Systems/1";
        let named = json!({"UUID": " 4C4C4544-0035 ", "Name": "rack1-u3", "Id": "1"});
        assert_eq!(
            host_of("https://bmc1.test", path, &named),
            Some(host("https://bmc1.test", "rack1-u3", "4c4c4544-0035")).map(|h| Host {
                path: path.into(),
                ..h
            })
        );
        let by_id = json!({"UUID": "abc", "Id": "System.Embedded.1"});
        assert_eq!(
            host_of("e", path, &by_id).unwrap().name,
            "System.Embedded.1"
        );
        let bare = json!({"UUID": "abc"});
        assert_eq!(host_of("e", path, &bare).unwrap().name, "abc");
    }

    #[test]
    fn a_system_without_a_uuid_cannot_be_told_apart_and_is_not_offered() {
        for system in [
            json!({"Name": "x"}),
            json!({"UUID": ""}),
            json!({"UUID": 7}),
        ] {
            assert_eq!(host_of("e", "/p", &system), None, "{system}");
        }
    }

    #[test]
    fn no_bmc_at_all_names_credentials_refs() {
        match require_some(&[]) {
            Err(PluginError::InvalidSpec(i)) => assert_eq!(i.field, "spec.credentialsRefs"),
            other => panic!("expected an invalid spec, got {other:?}"),
        }
        let primary = bmc("https://bmc1.test");
        assert!(require_some(&bmcs(&primary, &[])).is_ok());
    }
}
