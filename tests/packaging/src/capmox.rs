//! CAPMOX v0.9.0's cluster template flavors (`templates/` of its Go module) and the
//! variables its docs give them beyond the seed's `capmox.env`: what the packaging test
//! applies and the end-to-end test provisions.

/// `cluster-template-<flavor>.yaml` (`""`: `cluster-template.yaml`).
pub const FLAVORS: &[&str] = &[
    "",
    "auto-image",
    "calico",
    "cilium",
    "cilium-load-balancer",
    "dual-stack",
    "external-creds",
    "flatcar",
    "multiple-vlans",
    "proxmox-labels",
];

/// What CAPMOX's docs (`docs/advanced-setups.md`, `docs/Usage.md`) set beyond the seed's
/// `capmox.env` for its flavors: secondary networks, IPv6, template tags, and the
/// load-balancer flavor's BGP and MetalLB settings (the docs leave the IPv6 ones blank:
/// documentation addresses here).
pub const FLAVOR_VARIABLES: &[(&str, &str)] = &[
    ("TEMPLATE_TAGS", "tag1,tag2"),
    ("SECONDARY_IP_RANGES", "[10.10.10.100-10.10.10.150]"),
    ("SECONDARY_IP_PREFIX", "24"),
    ("SECONDARY_GATEWAY", "10.10.10.254"),
    ("SECONDARY_DNS_SERVERS", "[8.8.8.8, 8.8.4.4]"),
    ("SECONDARY_BRIDGE", "vmbr2"),
    ("NODE_IPV6_RANGES", "[2001:db8:1::1-2001:db8:1::10]"),
    ("IPV6_PREFIX", "64"),
    ("IPV6_GATEWAY", "2001:db8:1::1"),
    ("EXT_SERVICE_BRIDGE", "vmbr2"),
    ("LOAD_BALANCER_MACHINE_COUNT", "1"),
    ("LB_BGP_IPV4_RANGES", "[172.16.4.10-172.16.4.20]"),
    ("LB_BGP_IPV4_PREFIX", "24"),
    ("LB_BGP_IPV6_RANGE", "[2001:db8:4::10-2001:db8:4::20]"),
    ("LB_BGP_IPV6_PREFIX", "64"),
    ("METALLB_IPV4_ASN", "65400"),
    ("METALLB_IPV4_BGP_PEER", "172.16.4.1"),
    ("METALLB_IPV4_BGP_PEER2", "172.16.4.2"),
    ("METALLB_IPV4_BGP_SECRET", "REDACTED"),
    ("METALLB_IPV4_BGP_PEER_ASN", "65500"),
    ("METALLB_IPV4_BGP_PEER2_ASN", "65500"),
    ("METALLB_IPV4_RANGE", "7.6.5.0/24"),
    ("METALLB_IPV6_ASN", "65400"),
    ("METALLB_IPV6_BGP_PEER", "2001:db8:4::1"),
    ("METALLB_IPV6_BGP_PEER2", "2001:db8:4::2"),
    ("METALLB_IPV6_BGP_SECRET", "REDACTED"),
    ("METALLB_IPV6_BGP_PEER_ASN", "65500"),
    ("METALLB_IPV6_BGP_PEER2_ASN", "65500"),
    ("METALLB_IPV6_RANGE", "2001:db8:5::/120"),
];

/// The file of `flavor` in CAPMOX's `templates/`.
pub fn template_file(flavor: &str) -> String {
    if flavor.is_empty() {
        "cluster-template.yaml".to_string()
    } else {
        format!("cluster-template-{flavor}.yaml")
    }
}

/// The name tests give `flavor` (`default` for the unnamed one).
pub fn flavor_name(flavor: &str) -> &str {
    if flavor.is_empty() { "default" } else { flavor }
}
