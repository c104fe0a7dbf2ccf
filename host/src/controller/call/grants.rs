//! Which namespaces' Secrets an InfraCluster may name as credentials: its own, and
//! those the operator grants (`--cross-namespace-credentials FROM=SECRETS`).

/// An operator's grant: InfraClusters in `from` (`*`: any namespace) may name Secrets
/// in `secrets`. Written `FROM=SECRETS`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CredentialsGrant {
    pub from: String,
    pub secrets: String,
}

impl std::str::FromStr for CredentialsGrant {
    type Err = String;
    fn from_str(s: &str) -> std::result::Result<Self, String> {
        match s.split_once('=') {
            Some((from, secrets)) if !from.is_empty() && !secrets.is_empty() => {
                Ok(CredentialsGrant {
                    from: from.into(),
                    secrets: secrets.into(),
                })
            }
            _ => Err(format!(
                "`{s}` must be CLUSTER_NAMESPACE=SECRET_NAMESPACE (CLUSTER_NAMESPACE may be `*`)"
            )),
        }
    }
}

/// Whether an InfraCluster in `own` may name a Secret in `ns`.
pub fn allowed(grants: &[CredentialsGrant], own: &str, ns: &str) -> bool {
    ns == own
        || grants
            .iter()
            .any(|g| g.secrets == ns && (g.from == "*" || g.from == own))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_the_own_namespace_unless_granted() {
        let grants: Vec<CredentialsGrant> = vec![
            "team-a=shared-a".parse().unwrap(),
            "*=infra".parse().unwrap(),
        ];
        assert!(allowed(&[], "team-a", "team-a"));
        assert!(!allowed(&[], "team-a", "team-b"));
        assert!(allowed(&grants, "team-a", "shared-a"));
        assert!(!allowed(&grants, "team-b", "shared-a"));
        assert!(allowed(&grants, "team-b", "infra"));
        assert!("nope".parse::<CredentialsGrant>().is_err());
        assert!("=x".parse::<CredentialsGrant>().is_err());
    }
}
