//! Virtual media: find the host's virtual CD, insert the bootstrap ISO by URL, eject.

use guest_kit::types::PluginError;
use guest_kit::{terminal, transient};
use serde_json::{Value, json};

use super::{NO_HOST_MS, POWER_MS};
use crate::api::{Redfish, action_target, odata_id};

/// A virtual media device as the BMC reports it.
pub(super) struct Media {
    pub(super) path: String,
    pub(super) inserted: bool,
    /// The URL inserted; compared, never logged (it may be our blob's secret URL).
    pub(super) image: String,
    resource: Value,
}

/// The system's virtual CD: a VirtualMedia member whose `MediaTypes` include CD or
/// DVD, under the system (Redfish 1.13+) or under the manager that manages it.
pub(super) fn virtual_cd(bmc: &Redfish, system: &Value) -> Result<String, PluginError> {
    let doing = "finding the virtual CD";
    let none = || terminal("NoVirtualMedia", "the host's BMC offers no virtual media");
    let collection = match system.get("VirtualMedia").and_then(odata_id) {
        Some(c) => c,
        None => {
            let manager = system
                .pointer("/Links/ManagedBy/0")
                .and_then(odata_id)
                .ok_or_else(none)?;
            let manager = bmc.get(&manager).map_err(|e| e.classify(doing))?;
            manager
                .get("VirtualMedia")
                .and_then(odata_id)
                .ok_or_else(none)?
        }
    };
    for path in bmc.members(&collection).map_err(|e| e.classify(doing))? {
        let media = bmc.get(&path).map_err(|e| e.classify(doing))?;
        let types = media.get("MediaTypes").and_then(Value::as_array);
        if types.is_some_and(|t| t.iter().any(|t| matches!(t.as_str(), Some("CD" | "DVD")))) {
            return Ok(path);
        }
    }
    Err(terminal(
        "NoVirtualCd",
        "the host's BMC offers virtual media but no CD or DVD device",
    ))
}

pub(super) fn read_media(bmc: &Redfish, path: &str) -> Result<Media, PluginError> {
    let resource = bmc
        .get(path)
        .map_err(|e| e.classify("reading the virtual CD"))?;
    Ok(Media {
        path: path.to_string(),
        inserted: resource.get("Inserted").and_then(Value::as_bool) == Some(true),
        image: resource
            .get("Image")
            .and_then(Value::as_str)
            .unwrap_or_default()
            .to_string(),
        resource,
    })
}

/// Make the virtual CD hold `url`, and nothing else. The BMC downloads it.
pub(super) fn insert(bmc: &Redfish, path: &str, url: &str) -> Result<(), PluginError> {
    let media = read_media(bmc, path)?;
    if media.inserted && media.image == url {
        return Ok(());
    }
    if media.inserted {
        eject(bmc, &media)?;
    }
    let target = action_target(&media.resource, path, "VirtualMedia.InsertMedia");
    let body = json!({"Image": url, "Inserted": true, "WriteProtected": true});
    bmc.post(&target, &body).map_err(|e| {
        let err = match e.classify("inserting the bootstrap media") {
            // The BMC downloads the media itself: most refusals are a URL it cannot
            // reach, which the next attempt may.
            PluginError::Terminal(t) if t.reason == "BmcRefused" => transient(
                format!(
                    "{} (can the BMC reach the host's --blob-advertise-url?)",
                    t.message
                ),
                Some(NO_HOST_MS),
            ),
            other => other,
        };
        redact(err, url)
    })?;
    let after = read_media(bmc, path)?;
    if !(after.inserted && after.image == url) {
        return Err(transient(
            "the BMC accepted the bootstrap media but does not report it inserted",
            Some(POWER_MS),
        ));
    }
    Ok(())
}

pub(super) fn eject(bmc: &Redfish, media: &Media) -> Result<(), PluginError> {
    let target = action_target(&media.resource, &media.path, "VirtualMedia.EjectMedia");
    bmc.post(&target, &json!({}))
        .map_err(|e| redact(e.classify("ejecting virtual media"), &media.image))?;
    Ok(())
}

/// A BMC may quote the URL it failed to download in its error: never pass it on.
fn redact(err: PluginError, url: &str) -> PluginError {
    if url.is_empty() {
        return err;
    }
    let clean = |m: String| m.replace(url, "<bootstrap media URL>");
    match err {
        PluginError::Transient(mut t) => {
            t.message = clean(t.message);
            PluginError::Transient(t)
        }
        PluginError::Terminal(mut t) => {
            t.message = clean(t.message);
            PluginError::Terminal(t)
        }
        PluginError::InvalidSpec(mut i) => {
            i.message = clean(i.message);
            PluginError::InvalidSpec(i)
        }
    }
}

#[cfg(test)]
mod tests {
    use guest_kit::invalid;

    use super::*;

    const URL: &str = "http://10.0.0.5:8082/blobs/s3cr3t/cidata.iso";

    fn message(e: &PluginError) -> &str {
        match e {
            PluginError::Transient(t) => &t.message,
            PluginError::Terminal(t) => &t.message,
            PluginError::InvalidSpec(i) => &i.message,
        }
    }

    #[test]
    fn the_media_url_never_leaves_in_an_error() {
        let quoted = format!("cannot download {URL}: 404");
        for e in [
            transient(quoted.clone(), None),
            terminal("BmcRefused", quoted.clone()),
            invalid("spec", quoted.clone()),
        ] {
            let clean = redact(e, URL);
            assert_eq!(
                message(&clean),
                "cannot download <bootstrap media URL>: 404"
            );
        }
    }

    #[test]
    fn with_no_url_inserted_errors_pass_as_they_are() {
        let e = redact(transient("busy", Some(5)), "");
        assert_eq!(message(&e), "busy");
    }
}
