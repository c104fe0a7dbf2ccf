//! The registry side of the fetcher: a tag's digest, a manifest, the component layer.
//! Every byte read is bounded (the manifest by the client, the component by
//! `MAX_COMPONENT`) and checked against the digest that named it.
use std::time::Duration;

use futures::TryStreamExt as _;
use oci_client::client::{ClientConfig, ClientProtocol};
use oci_client::errors::OciDistributionError;
use oci_client::manifest::{OciDescriptor, OciManifest};
use oci_client::secrets::RegistryAuth;
use oci_client::{Client, Reference};

use super::auth::Basic;
use super::cache::sha256;
use super::{FetchError, OciRef};

/// Media types of a Wasm component layer: the CNCF Wasm OCI artifact layout, and the
/// one `wkg` (wasm-pkg-tools) writes.
pub const COMPONENT_MEDIA_TYPES: &[&str] = &[
    "application/wasm",
    "application/vnd.wasm.content.layer.v1+wasm",
];
/// A plugin is a few MB; an artifact claiming more is refused before it is read.
pub const MAX_COMPONENT: i64 = 64 << 20;

/// A component as pulled: its bytes and their digest (the layer's, checked).
pub struct Component {
    pub digest: String,
    pub bytes: Vec<u8>,
}

pub struct Registry {
    client: Client,
    plain_http: Vec<String>,
    credentials: Option<Basic>,
}

impl Registry {
    pub fn new(plain_http: &[String], credentials: Option<Basic>) -> Registry {
        // The registry client's TLS is rustls with the process's provider: ring, the
        // host's choice everywhere (see host/Cargo.toml on why it is the only one).
        let _ = rustls::crypto::ring::default_provider().install_default();
        let config = ClientConfig {
            protocol: ClientProtocol::HttpsExcept(plain_http.to_vec()),
            connect_timeout: Some(Duration::from_secs(10)),
            read_timeout: Some(Duration::from_secs(30)),
            // A plugin is one artifact for every platform; an index is refused below.
            platform_resolver: None,
            ..ClientConfig::default()
        };
        Registry {
            client: Client::new(config),
            plain_http: plain_http.to_vec(),
            credentials,
        }
    }

    /// The credentials for this registry, if the operator gave any.
    pub fn credentials(&self) -> Option<&Basic> {
        self.credentials.as_ref()
    }

    fn auth(&self) -> RegistryAuth {
        match &self.credentials {
            Some(b) => RegistryAuth::Basic(b.username.clone(), b.password.clone()),
            None => RegistryAuth::Anonymous,
        }
    }

    /// Registries reached over plain HTTP (the signature client reaches them alike).
    pub fn plain_http(&self) -> &[String] {
        &self.plain_http
    }

    /// The digest the reference's tag names now.
    pub async fn digest_of(&self, oci: &OciRef) -> Result<String, FetchError> {
        let digest = self
            .client
            .fetch_manifest_digest(&oci.reference, &self.auth())
            .await
            .map_err(|e| error(oci, e))?;
        if !super::is_sha256(&digest) {
            return Err(FetchError::NotAPlugin {
                reference: oci.to_string(),
                detail: format!("the registry named digest `{digest}`; only sha256 is accepted"),
            });
        }
        Ok(digest)
    }

    /// The component of the manifest at `digest`, checked against the manifest's and
    /// the layer's digests.
    pub async fn pull_component(
        &self,
        oci: &OciRef,
        digest: &str,
    ) -> Result<Component, FetchError> {
        let at = oci.at(digest);
        let (manifest, got) = self
            .client
            .pull_manifest(&at, &self.auth())
            .await
            .map_err(|e| error(oci, e))?;
        if got != digest {
            return Err(tampered(oci, "the manifest", digest, &got));
        }
        let layer = component_layer(oci, &manifest)?;
        let bytes = self.pull_layer(oci, &at, layer).await?;
        let got = sha256(&bytes);
        if got != layer.digest {
            return Err(tampered(oci, "the component layer", &layer.digest, &got));
        }
        Ok(Component { digest: got, bytes })
    }

    async fn pull_layer(
        &self,
        oci: &OciRef,
        at: &Reference,
        layer: &OciDescriptor,
    ) -> Result<Vec<u8>, FetchError> {
        let mut stream = self
            .client
            .pull_blob_stream(at, layer)
            .await
            .map_err(|e| error(oci, e))?;
        // The layer's declared size bounds what is read: a registry sending more is
        // cut off, not buffered.
        let mut bytes = Vec::with_capacity(layer.size as usize);
        let broken = |e: std::io::Error| {
            // The client checks the digest as the bytes stream in and ends the stream
            // with this error (its type is private to the crate, so its text is read).
            let text = e.to_string();
            match text.strip_prefix("Invalid digest.") {
                Some(rest) => tampered(
                    oci,
                    "the component layer",
                    &layer.digest,
                    rest.rsplit("got ").next().unwrap_or(rest).trim(),
                ),
                None => FetchError::Registry {
                    reference: oci.to_string(),
                    detail: format!("reading the component layer: {text}"),
                },
            }
        };
        while let Some(chunk) = stream.try_next().await.map_err(broken)? {
            if bytes.len() + chunk.len() > layer.size as usize {
                return Err(FetchError::NotAPlugin {
                    reference: oci.to_string(),
                    detail: format!(
                        "the registry sent more than the layer's declared {} bytes",
                        layer.size
                    ),
                });
            }
            bytes.extend_from_slice(&chunk);
        }
        Ok(bytes)
    }
}

/// The one Wasm layer of a plugin artifact, within the size bound.
fn component_layer<'m>(
    oci: &OciRef,
    manifest: &'m OciManifest,
) -> Result<&'m OciDescriptor, FetchError> {
    let not = |detail: String| FetchError::NotAPlugin {
        reference: oci.to_string(),
        detail,
    };
    let OciManifest::Image(image) = manifest else {
        return Err(not(
            "it is an image index; name the plugin artifact's own manifest".into(),
        ));
    };
    let wasm: Vec<&OciDescriptor> = image
        .layers
        .iter()
        .filter(|l| COMPONENT_MEDIA_TYPES.contains(&l.media_type.as_str()))
        .collect();
    let [layer] = wasm.as_slice() else {
        let found: Vec<&str> = image.layers.iter().map(|l| l.media_type.as_str()).collect();
        return Err(not(format!(
            "it must have exactly one layer of media type {} (push it with `oras push REF plugin.wasm:application/wasm`); its layers are [{}]",
            COMPONENT_MEDIA_TYPES.join(" or "),
            found.join(", ")
        )));
    };
    if !(0..=MAX_COMPONENT).contains(&layer.size) {
        return Err(not(format!(
            "its component layer declares {} bytes; the limit is {MAX_COMPONENT}",
            layer.size
        )));
    }
    Ok(layer)
}

fn tampered(oci: &OciRef, what: &str, expected: &str, got: &str) -> FetchError {
    FetchError::Tampered {
        reference: oci.to_string(),
        what: what.into(),
        expected: expected.into(),
        got: got.into(),
    }
}

/// A registry that cannot be reached is `Unreachable` (the cache may serve); one that
/// answers and refuses is `Registry`.
fn error(oci: &OciRef, e: OciDistributionError) -> FetchError {
    let detail = format!("{e:#}");
    match &e {
        OciDistributionError::RequestError(r) if r.is_connect() || r.is_timeout() => {
            FetchError::Unreachable {
                reference: oci.to_string(),
                detail,
            }
        }
        _ => FetchError::Registry {
            reference: oci.to_string(),
            detail,
        },
    }
}
