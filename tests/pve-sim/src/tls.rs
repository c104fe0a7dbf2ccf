//! A per-start certificate authority and a leaf for the listener (rcgen, ring).
//!
//! Like a PVE cluster: a self-signed CA (`pve-root-ca.pem` there, `ca.pem` here) signs the
//! node certificate; clients trust the CA or pin the leaf's SHA-256 fingerprint.

use std::path::PathBuf;
use std::sync::Arc;

use rcgen::{
    BasicConstraints, CertificateParams, DistinguishedName, DnType, ExtendedKeyUsagePurpose, IsCa,
    Issuer, KeyPair, KeyUsagePurpose,
};
use rustls::pki_types::{PrivateKeyDer, PrivatePkcs8KeyDer};
use sha2::{Digest, Sha256};

/// Generated TLS material.
pub struct TlsMaterial {
    pub ca_pem: String,
    pub ca_path: PathBuf,
    pub leaf_pem: String,
    /// SHA-256 of the leaf certificate, `AA:BB:...`.
    pub fingerprint: String,
    pub server_config: Arc<rustls::ServerConfig>,
}

/// `AA:BB:...` upper-case hex of a SHA-256 digest.
pub fn fingerprint(der: &[u8]) -> String {
    Sha256::digest(der)
        .iter()
        .map(|b| format!("{b:02X}"))
        .collect::<Vec<_>>()
        .join(":")
}

/// Generates a CA and a leaf valid for `localhost`, `127.0.0.1`, `::1`, the node names and
/// `extra_names`; writes the CA to `ca_dir/ca.pem`.
pub fn generate(extra_names: &[String], ca_dir: &std::path::Path) -> anyhow::Result<TlsMaterial> {
    let ca_key = KeyPair::generate()?;
    let mut ca_params = CertificateParams::new(Vec::<String>::new())?;
    let mut dn = DistinguishedName::new();
    dn.push(DnType::CommonName, "Proxmox Virtual Environment (pve-sim)");
    dn.push(DnType::OrganizationalUnitName, "pve-sim");
    dn.push(DnType::OrganizationName, "PVE Cluster Manager CA");
    ca_params.distinguished_name = dn;
    ca_params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
    ca_params.key_usages = vec![
        KeyUsagePurpose::KeyCertSign,
        KeyUsagePurpose::CrlSign,
        KeyUsagePurpose::DigitalSignature,
    ];
    let ca_cert = ca_params.self_signed(&ca_key)?;
    let issuer = Issuer::new(ca_params, ca_key);

    let mut names = vec!["localhost".to_string(), "127.0.0.1".into(), "::1".into()];
    for n in extra_names {
        if !names.contains(n) {
            names.push(n.clone());
        }
    }
    let leaf_key = KeyPair::generate()?;
    let mut leaf_params = CertificateParams::new(names)?;
    let mut dn = DistinguishedName::new();
    dn.push(DnType::CommonName, "pve-sim");
    dn.push(DnType::OrganizationName, "PVE Cluster Node");
    leaf_params.distinguished_name = dn;
    leaf_params.key_usages = vec![
        KeyUsagePurpose::DigitalSignature,
        KeyUsagePurpose::KeyEncipherment,
    ];
    leaf_params.extended_key_usages = vec![ExtendedKeyUsagePurpose::ServerAuth];
    let leaf = leaf_params.signed_by(&leaf_key, &issuer)?;

    std::fs::create_dir_all(ca_dir)?;
    let ca_path = ca_dir.join("ca.pem");
    std::fs::write(&ca_path, ca_cert.pem())?;

    let chain = vec![leaf.der().clone(), ca_cert.der().clone()];
    let key = PrivateKeyDer::Pkcs8(PrivatePkcs8KeyDer::from(leaf_key.serialize_der()));
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let server_config = rustls::ServerConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()?
        .with_no_client_auth()
        .with_single_cert(chain, key)?;
    Ok(TlsMaterial {
        ca_pem: ca_cert.pem(),
        ca_path,
        leaf_pem: leaf.pem(),
        fingerprint: fingerprint(leaf.der()),
        server_config: Arc::new(server_config),
    })
}
