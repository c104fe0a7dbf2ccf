//! NoCloud (`cidata`) ISO images: reading the files a VM's cloud-init would read, and
//! parsing `network-config` (v1 and v2) and `meta-data`.
//!
//! The ISO 9660 reader is hand-written (no maintained crate for reading ISO 9660 from
//! memory fits): it reads the primary volume descriptor, the Joliet supplementary one if
//! present, and Rock Ridge `NM` names, which covers what genisoimage, xorriso, mkisofs and
//! hand-made writers produce. `build_cidata_iso` writes a small ISO 9660 image (with Rock
//! Ridge names) for tests.

use std::collections::BTreeMap;

use serde::Serialize;
use serde_yaml::Value as Yaml;

const SECTOR: usize = 2048;

/// What a `cidata` ISO tells the guest.
#[derive(Debug, Clone, Default, Serialize, PartialEq)]
pub struct NoCloud {
    pub volume_id: String,
    pub meta_data: Option<String>,
    pub user_data: Option<String>,
    pub network_config: Option<String>,
    pub instance_id: Option<String>,
    pub hostname: Option<String>,
    pub interfaces: Vec<NetIface>,
}

/// One interface from `network-config`.
#[derive(Debug, Clone, Default, Serialize, PartialEq)]
pub struct NetIface {
    /// Interface name (v2 key or `set-name`, v1 `name`).
    pub name: Option<String>,
    /// MAC address to match, upper-case.
    pub mac: Option<String>,
    pub dhcp4: bool,
    /// Static addresses `(address, prefix)`, IPv4 and IPv6.
    pub addresses: Vec<(String, u8)>,
    pub gateway4: Option<String>,
}

/// Reads a NoCloud ISO: `None` unless it is an ISO 9660 image labelled `cidata`.
pub fn read_cidata(iso: &[u8]) -> Option<NoCloud> {
    let files = read_root_files(iso)?;
    let label = files.0;
    if !label.eq_ignore_ascii_case("cidata") {
        return None;
    }
    let get = |n: &str| {
        files
            .1
            .get(n)
            .map(|b| String::from_utf8_lossy(b).into_owned())
    };
    let mut nc = NoCloud {
        volume_id: label,
        meta_data: get("meta-data"),
        user_data: get("user-data"),
        network_config: get("network-config"),
        ..NoCloud::default()
    };
    if let Some(md) = &nc.meta_data
        && let Ok(y) = serde_yaml::from_str::<Yaml>(md)
    {
        nc.instance_id = y["instance-id"].as_str().map(String::from);
        nc.hostname = y["local-hostname"]
            .as_str()
            .or_else(|| y["hostname"].as_str())
            .map(String::from);
    }
    if let Some(net) = &nc.network_config {
        nc.interfaces = parse_network_config(net);
    }
    Some(nc)
}

fn both_u32(b: &[u8], off: usize) -> Option<usize> {
    Some(u32::from_le_bytes(b.get(off..off + 4)?.try_into().ok()?) as usize)
}

fn normalize_name(raw: &str) -> String {
    let n = raw.split(';').next().unwrap_or(raw);
    let n = n.strip_suffix('.').unwrap_or(n);
    n.to_ascii_lowercase().replace('_', "-")
}

/// The volume label and the root directory's files (normalized names → contents).
fn read_root_files(iso: &[u8]) -> Option<(String, BTreeMap<String, Vec<u8>>)> {
    let mut primary: Option<&[u8]> = None;
    let mut joliet: Option<&[u8]> = None;
    for i in 16..64 {
        let d = iso.get(i * SECTOR..(i + 1) * SECTOR)?;
        if &d[1..6] != b"CD001" {
            return None;
        }
        match d[0] {
            1 => primary = Some(d),
            2 if d[88] == 0x25 && d[89] == 0x2f && matches!(d[90], 0x40 | 0x43 | 0x45) => {
                joliet = Some(d)
            }
            255 => break,
            _ => {}
        }
    }
    let pvd = primary?;
    let label = String::from_utf8_lossy(&pvd[40..72]).trim().to_string();
    let (desc, is_joliet) = match joliet {
        Some(j) => (j, true),
        None => (pvd, false),
    };
    let root = &desc[156..190];
    let extent = both_u32(root, 2)?;
    let size = both_u32(root, 10)?;
    let dir = iso.get(extent * SECTOR..extent * SECTOR + size)?;
    let mut files = BTreeMap::new();
    let mut off = 0;
    while off < dir.len() {
        let len = dir[off] as usize;
        if len == 0 {
            off = (off / SECTOR + 1) * SECTOR;
            continue;
        }
        if len < 34 {
            return None; // malformed directory record
        }
        let rec = dir.get(off..off + len)?;
        off += len;
        let flags = rec[25];
        let name_len = rec[32] as usize;
        let raw_name = rec.get(33..33 + name_len)?;
        if flags & 2 != 0 || name_len == 1 && raw_name[0] <= 1 {
            continue; // directories, "." and ".."
        }
        let mut name = if is_joliet {
            let units: Vec<u16> = raw_name
                .chunks(2)
                .map(|c| u16::from_be_bytes([c[0], *c.get(1).unwrap_or(&0)]))
                .collect();
            String::from_utf16_lossy(&units)
        } else {
            String::from_utf8_lossy(raw_name).into_owned()
        };
        if !is_joliet {
            let su_start = 33 + name_len + usize::from(name_len.is_multiple_of(2));
            if let Some(nm) = rock_ridge_name(rec.get(su_start..).unwrap_or(&[])) {
                name = nm;
            }
        }
        let fext = both_u32(rec, 2)?;
        let fsize = both_u32(rec, 10)?;
        if let Some(data) = iso.get(fext * SECTOR..fext * SECTOR + fsize) {
            files.insert(normalize_name(&name), data.to_vec());
        }
    }
    Some((label, files))
}

fn rock_ridge_name(mut su: &[u8]) -> Option<String> {
    while su.len() >= 4 {
        let len = su[2] as usize;
        if len < 4 || len > su.len() {
            return None;
        }
        if &su[0..2] == b"NM" && len >= 5 {
            return Some(String::from_utf8_lossy(&su[5..len]).into_owned());
        }
        su = &su[len..];
    }
    None
}

fn yaml_str(v: &Yaml) -> Option<String> {
    match v {
        Yaml::String(s) => Some(s.clone()),
        Yaml::Number(n) => Some(n.to_string()),
        Yaml::Bool(b) => Some(b.to_string()),
        _ => None,
    }
}

fn split_cidr(a: &str, netmask: Option<&str>) -> Option<(String, u8)> {
    if let Some((ip, len)) = a.split_once('/') {
        return Some((ip.to_string(), len.parse().ok()?));
    }
    let prefix = match netmask {
        Some(m) => {
            let ip: std::net::Ipv4Addr = m.parse().ok()?;
            u32::from(ip).count_ones() as u8
        }
        None => {
            if a.contains(':') {
                64
            } else {
                24
            }
        }
    };
    Some((a.to_string(), prefix))
}

/// Parses a NoCloud `network-config` document (version 1 or 2, optionally under a
/// top-level `network:` key).
pub fn parse_network_config(text: &str) -> Vec<NetIface> {
    let Ok(doc) = serde_yaml::from_str::<Yaml>(text) else {
        return vec![];
    };
    let doc = if doc.get("network").is_some() {
        doc["network"].clone()
    } else {
        doc
    };
    let version = doc["version"].as_u64().unwrap_or(1);
    let mut out = vec![];
    if version == 2 {
        if let Some(eths) = doc["ethernets"].as_mapping() {
            for (k, e) in eths {
                let key = yaml_str(k);
                let mut ifc = NetIface {
                    name: e["set-name"].as_str().map(String::from).or(key),
                    mac: e["match"]["macaddress"].as_str().map(|m| m.to_uppercase()),
                    dhcp4: e["dhcp4"].as_bool().unwrap_or(false)
                        || e["dhcp4"].as_str() == Some("true"),
                    gateway4: e["gateway4"].as_str().map(String::from),
                    ..NetIface::default()
                };
                if let Some(addrs) = e["addresses"].as_sequence() {
                    ifc.addresses = addrs
                        .iter()
                        .filter_map(yaml_str)
                        .filter_map(|a| split_cidr(&a, None))
                        .collect();
                }
                if ifc.gateway4.is_none()
                    && let Some(routes) = e["routes"].as_sequence()
                {
                    ifc.gateway4 = routes
                        .iter()
                        .find(|r| matches!(r["to"].as_str(), Some("default" | "0.0.0.0/0")))
                        .and_then(|r| r["via"].as_str().map(String::from));
                }
                out.push(ifc);
            }
        }
    } else if let Some(items) = doc["config"].as_sequence() {
        for item in items {
            if item["type"].as_str() != Some("physical") {
                continue;
            }
            let mut ifc = NetIface {
                name: item["name"].as_str().map(String::from),
                mac: item["mac_address"].as_str().map(|m| m.to_uppercase()),
                ..NetIface::default()
            };
            for s in item["subnets"].as_sequence().into_iter().flatten() {
                match s["type"].as_str() {
                    Some("dhcp" | "dhcp4") => ifc.dhcp4 = true,
                    Some("static" | "static6") => {
                        if let Some(a) = s["address"].as_str()
                            && let Some(p) = split_cidr(a, s["netmask"].as_str())
                        {
                            ifc.addresses.push(p);
                        }
                        if ifc.gateway4.is_none() {
                            ifc.gateway4 = s["gateway"].as_str().map(String::from);
                        }
                    }
                    _ => {}
                }
            }
            out.push(ifc);
        }
    }
    out
}

fn put_both_u32(b: &mut [u8], off: usize, v: u32) {
    b[off..off + 4].copy_from_slice(&v.to_le_bytes());
    b[off + 4..off + 8].copy_from_slice(&v.to_be_bytes());
}

fn put_both_u16(b: &mut [u8], off: usize, v: u16) {
    b[off..off + 2].copy_from_slice(&v.to_le_bytes());
    b[off + 2..off + 4].copy_from_slice(&v.to_be_bytes());
}

fn dir_record(extent: u32, size: u32, dir: bool, name: &[u8], su: &[u8]) -> Vec<u8> {
    let pad = usize::from(name.len().is_multiple_of(2));
    let mut len = 33 + name.len() + pad + su.len();
    len += len % 2;
    let mut r = vec![0u8; len];
    r[0] = len as u8;
    put_both_u32(&mut r, 2, extent);
    put_both_u32(&mut r, 10, size);
    r[18..25].copy_from_slice(&[125, 1, 1, 0, 0, 0, 0]);
    r[25] = if dir { 2 } else { 0 };
    put_both_u16(&mut r, 28, 1);
    r[32] = name.len() as u8;
    r[33..33 + name.len()].copy_from_slice(name);
    let s = 33 + name.len() + pad;
    r[s..s + su.len()].copy_from_slice(su);
    r
}

fn pad_str(b: &mut [u8], off: usize, len: usize, s: &str) {
    for i in 0..len {
        b[off + i] = *s.as_bytes().get(i).unwrap_or(&b' ');
    }
}

/// Builds an ISO 9660 image labelled `volume_id` with `files` (name, contents) in its
/// root directory; names are kept as Rock Ridge `NM` entries (ISO names are upper-cased
/// with `-` as `_`). Enough for `cidata` images in tests.
pub fn build_iso(volume_id: &str, files: &[(&str, &[u8])]) -> Vec<u8> {
    let root_lba = 18u32;
    let lpath_lba = 19u32;
    let mpath_lba = 20u32;
    let mut next = 21u32;
    let mut placed = vec![];
    for (name, data) in files {
        placed.push((name, *data, next));
        next += (data.len().div_ceil(SECTOR)).max(1) as u32;
    }
    let total = next;
    let mut img = vec![0u8; total as usize * SECTOR];
    // root directory
    let mut dir = dir_record(root_lba, SECTOR as u32, true, &[0], &[]);
    dir.extend(dir_record(root_lba, SECTOR as u32, true, &[1], &[]));
    for (name, data, lba) in &placed {
        let iso_name = format!("{}.;1", name.to_ascii_uppercase().replace(['-', '.'], "_"));
        let mut nm = vec![b'N', b'M', (5 + name.len()) as u8, 1, 0];
        nm.extend_from_slice(name.as_bytes());
        dir.extend(dir_record(
            *lba,
            data.len() as u32,
            false,
            iso_name.as_bytes(),
            &nm,
        ));
    }
    assert!(
        dir.len() <= SECTOR,
        "too many files for one directory sector"
    );
    let r = root_lba as usize * SECTOR;
    img[r..r + dir.len()].copy_from_slice(&dir);
    // path tables: one entry for the root
    let l = lpath_lba as usize * SECTOR;
    img[l] = 1;
    img[l + 2..l + 6].copy_from_slice(&root_lba.to_le_bytes());
    img[l + 6..l + 8].copy_from_slice(&1u16.to_le_bytes());
    let m = mpath_lba as usize * SECTOR;
    img[m] = 1;
    img[m + 2..m + 6].copy_from_slice(&root_lba.to_be_bytes());
    img[m + 6..m + 8].copy_from_slice(&1u16.to_be_bytes());
    // primary volume descriptor
    let p = 16 * SECTOR;
    let pvd = &mut img[p..p + SECTOR];
    pvd[0] = 1;
    pvd[1..6].copy_from_slice(b"CD001");
    pvd[6] = 1;
    pad_str(pvd, 8, 32, "LINUX");
    pad_str(pvd, 40, 32, volume_id);
    put_both_u32(pvd, 80, total);
    put_both_u16(pvd, 120, 1);
    put_both_u16(pvd, 124, 1);
    put_both_u16(pvd, 128, SECTOR as u16);
    put_both_u32(pvd, 132, 10);
    pvd[140..144].copy_from_slice(&lpath_lba.to_le_bytes());
    pvd[148..152].copy_from_slice(&mpath_lba.to_be_bytes());
    let root = dir_record(root_lba, SECTOR as u32, true, &[0], &[]);
    pvd[156..156 + 34].copy_from_slice(&root[..34]);
    for off in [190, 318, 446, 574] {
        pad_str(pvd, off, 128, "");
    }
    for off in [813, 830, 847, 864] {
        pvd[off..off + 16].copy_from_slice(b"0000000000000000");
    }
    pvd[881] = 1;
    // terminator
    let t = 17 * SECTOR;
    img[t] = 255;
    img[t + 1..t + 6].copy_from_slice(b"CD001");
    img[t + 6] = 1;
    for (_, data, lba) in &placed {
        let o = *lba as usize * SECTOR;
        img[o..o + data.len()].copy_from_slice(data);
    }
    img
}

/// A `cidata` ISO with `meta-data`, `user-data` and (optionally) `network-config`.
pub fn build_cidata_iso(meta_data: &str, user_data: &str, network_config: Option<&str>) -> Vec<u8> {
    let mut files: Vec<(&str, &[u8])> = vec![
        ("meta-data", meta_data.as_bytes()),
        ("user-data", user_data.as_bytes()),
    ];
    if let Some(n) = network_config {
        files.push(("network-config", n.as_bytes()));
    }
    build_iso("cidata", &files)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn built_iso_reads_back_with_v2_network_config() {
        let net = "version: 2\nethernets:\n  eth0:\n    match:\n      macaddress: 'bc:24:11:aa:bb:cc'\n    set-name: eth0\n    addresses: [10.1.2.3/24]\n    gateway4: 10.1.2.1\n";
        let iso = build_cidata_iso(
            "instance-id: i-1\nlocal-hostname: w1\n",
            "#cloud-config\n",
            Some(net),
        );
        let nc = read_cidata(&iso).expect("cidata");
        assert_eq!(nc.hostname.as_deref(), Some("w1"));
        assert_eq!(nc.interfaces.len(), 1);
        assert_eq!(nc.interfaces[0].mac.as_deref(), Some("BC:24:11:AA:BB:CC"));
        assert_eq!(
            nc.interfaces[0].addresses,
            vec![("10.1.2.3".to_string(), 24)]
        );
    }

    #[test]
    fn v1_network_config_with_netmask() {
        let net = "version: 1\nconfig:\n  - type: physical\n    name: eth0\n    mac_address: 'bc:24:11:00:00:01'\n    subnets:\n      - type: static\n        address: 192.168.5.9\n        netmask: 255.255.255.0\n        gateway: 192.168.5.1\n";
        let i = parse_network_config(net);
        assert_eq!(i[0].addresses, vec![("192.168.5.9".to_string(), 24)]);
        assert_eq!(i[0].gateway4.as_deref(), Some("192.168.5.1"));
    }

    #[test]
    fn garbage_and_truncated_images_do_not_panic() {
        let mut rng = fastrand::Rng::with_seed(1);
        let iso = build_cidata_iso("a: b\n", "", Some("version: 2\n"));
        for n in [0, 10, 2048 * 16 + 7, 2048 * 17, 2048 * 19, iso.len() - 1] {
            let _ = read_cidata(&iso[..n]);
        }
        for _ in 0..200 {
            let mut img = iso.clone();
            for _ in 0..32 {
                let i = rng.usize(16 * 2048..img.len());
                img[i] = rng.u8(..);
            }
            let _ = read_cidata(&img);
        }
    }

    #[test]
    fn non_cidata_label_is_ignored() {
        let iso = build_iso("OTHER", &[("meta-data", b"x")]);
        assert!(read_cidata(&iso).is_none());
    }
}
