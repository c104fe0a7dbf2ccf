//! How the host verifies the TLS of a plugin's endpoint: system roots by default, a
//! custom CA bundle, a pinned leaf fingerprint, or (asked for explicitly) nothing.
use std::sync::Arc;

use rustls::client::danger::{HandshakeSignatureValid, ServerCertVerified, ServerCertVerifier};
use rustls::crypto::{CryptoProvider, WebPkiSupportedAlgorithms};
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, ServerName, UnixTime};
use rustls::{DigitallySignedStruct, SignatureScheme};
use sha2::{Digest, Sha256};

/// The TLS part of a call's credentials.
#[derive(Debug, Clone, PartialEq, Eq, Hash, Default)]
pub struct TlsPolicy {
    pub ca_bundle: Option<String>,
    pub fingerprint: Option<String>,
    pub insecure: bool,
}

/// Parse `AA:BB:..` (or plain hex) into the 32 bytes of a SHA-256 digest.
pub fn parse_fingerprint(text: &str) -> Result<[u8; 32], String> {
    let hex: String = text
        .chars()
        .filter(|c| *c != ':' && !c.is_whitespace())
        .collect();
    let bytes = hex::decode(&hex).map_err(|e| format!("fingerprint `{text}` is not hex: {e}"))?;
    bytes.try_into().map_err(|b: Vec<u8>| {
        format!(
            "fingerprint `{text}` has {} bytes; a SHA-256 fingerprint has 32",
            b.len()
        )
    })
}

/// Format a digest the way most tools print it: `AA:BB:...`.
pub fn format_fingerprint(digest: &[u8]) -> String {
    digest
        .iter()
        .map(|b| format!("{b:02X}"))
        .collect::<Vec<_>>()
        .join(":")
}

fn provider() -> Arc<CryptoProvider> {
    Arc::new(rustls::crypto::ring::default_provider())
}

/// Build the rustls client configuration for a policy.
pub fn client_config(policy: &TlsPolicy) -> Result<rustls::ClientConfig, String> {
    let provider = provider();
    let builder = rustls::ClientConfig::builder_with_provider(provider.clone())
        .with_safe_default_protocol_versions()
        .map_err(|e| e.to_string())?;
    let config = if policy.insecure || policy.fingerprint.is_some() {
        let pinned = match &policy.fingerprint {
            Some(fp) => Some(parse_fingerprint(fp)?),
            None => None,
        };
        builder
            .dangerous()
            .with_custom_certificate_verifier(Arc::new(PinnedLeaf {
                pinned,
                algorithms: provider.signature_verification_algorithms,
            }))
            .with_no_client_auth()
    } else {
        let mut roots = rustls::RootCertStore::empty();
        match &policy.ca_bundle {
            Some(pem) => {
                for cert in CertificateDer::pem_slice_iter(pem.as_bytes()) {
                    let cert = cert.map_err(|e| format!("CA bundle is not valid PEM: {e}"))?;
                    roots
                        .add(cert)
                        .map_err(|e| format!("CA bundle holds an unusable certificate: {e}"))?;
                }
                if roots.is_empty() {
                    return Err("CA bundle holds no certificate".into());
                }
            }
            None => roots.extend(webpki_roots::TLS_SERVER_ROOTS.iter().cloned()),
        }
        builder.with_root_certificates(roots).with_no_client_auth()
    };
    Ok(config)
}

/// Accepts exactly one leaf certificate, by SHA-256 fingerprint, whatever signed it; or
/// any certificate when no fingerprint is pinned (the explicit insecure mode). Handshake
/// signatures are still verified, so the peer must hold the certificate's key.
#[derive(Debug)]
struct PinnedLeaf {
    pinned: Option<[u8; 32]>,
    algorithms: WebPkiSupportedAlgorithms,
}

impl ServerCertVerifier for PinnedLeaf {
    fn verify_server_cert(
        &self,
        end_entity: &CertificateDer<'_>,
        _intermediates: &[CertificateDer<'_>],
        _server_name: &ServerName<'_>,
        _ocsp_response: &[u8],
        _now: UnixTime,
    ) -> Result<ServerCertVerified, rustls::Error> {
        let Some(pinned) = self.pinned else {
            return Ok(ServerCertVerified::assertion());
        };
        let seen: [u8; 32] = Sha256::digest(end_entity.as_ref()).into();
        if seen == pinned {
            Ok(ServerCertVerified::assertion())
        } else {
            Err(rustls::Error::General(format!(
                "server certificate fingerprint {} does not match the pinned {}",
                format_fingerprint(&seen),
                format_fingerprint(&pinned)
            )))
        }
    }

    fn verify_tls12_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        rustls::crypto::verify_tls12_signature(message, cert, dss, &self.algorithms)
    }

    fn verify_tls13_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        rustls::crypto::verify_tls13_signature(message, cert, dss, &self.algorithms)
    }

    fn supported_verify_schemes(&self) -> Vec<SignatureScheme> {
        self.algorithms.supported_schemes()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn fingerprint_round_trips_through_colon_hex() {
        let digest = [0xABu8; 32];
        let text = format_fingerprint(&digest);
        assert_eq!(parse_fingerprint(&text).unwrap(), digest);
    }

    #[test]
    fn short_fingerprint_is_rejected_with_its_length() {
        let err = parse_fingerprint("AA:BB").unwrap_err();
        assert!(err.contains("2 bytes"), "{err}");
    }

    #[test]
    fn empty_ca_bundle_is_an_error() {
        let policy = TlsPolicy {
            ca_bundle: Some("nothing here".into()),
            ..Default::default()
        };
        assert!(
            client_config(&policy)
                .unwrap_err()
                .contains("no certificate")
        );
    }
}
