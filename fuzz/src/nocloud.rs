//! The NoCloud image writer (`guest-nocloud`): whatever the files, an image whose every
//! view gives them back exactly, or an error; and a seed whose `meta-data` a YAML parser
//! reads back as written.
//!
//! Input: the volume label on the first line, then files, each `=NAME` on a line of its
//! own followed by its contents (which end where the next `\n=` starts).
use std::collections::BTreeMap;
use std::io::Read;

use guest_nocloud::{MetaData, SECTOR, Seed};

/// An input's label and files.
pub fn parse(input: &[u8]) -> (String, Vec<(String, Vec<u8>)>) {
    let mut parts = split(input).into_iter();
    let label = String::from_utf8_lossy(parts.next().unwrap_or_default()).into_owned();
    let files = parts
        .map(|p| {
            let end = p.iter().position(|b| *b == b'\n').unwrap_or(p.len());
            let name = String::from_utf8_lossy(&p[..end]).into_owned();
            (name, p.get(end + 1..).unwrap_or_default().to_vec())
        })
        .collect();
    (label, files)
}

fn split(input: &[u8]) -> Vec<&[u8]> {
    let mut parts = vec![];
    let mut start = 0;
    let mut i = 0;
    while i + 1 < input.len() {
        if input[i] == b'\n' && input[i + 1] == b'=' {
            parts.push(&input[start..i]);
            start = i + 2;
            i += 2;
        } else {
            i += 1;
        }
    }
    parts.push(&input[start.min(input.len())..]);
    parts
}

/// Build an image from the input and check it; build a seed from it and check that.
pub fn run(input: &[u8]) {
    let (label, files) = parse(input);
    let refs: Vec<(&str, &[u8])> = files
        .iter()
        .map(|(n, d)| (n.as_str(), d.as_slice()))
        .collect();
    if let Ok(img) = guest_nocloud::build_iso(&label, &refs) {
        image(&img, &label, &files);
    }
    seed(&label, &files);
}

/// An image holds exactly `files`, read through the Rock Ridge names of the primary
/// tree, through the Joliet tree, and by an independent reader (the `iso9660` crate).
pub fn image(img: &[u8], label: &str, files: &[(String, Vec<u8>)]) {
    let want: BTreeMap<&str, &[u8]> = files
        .iter()
        .map(|(n, d)| (n.as_str(), d.as_slice()))
        .collect();
    assert_eq!(
        want.len(),
        files.len(),
        "built an image with two files of one name"
    );
    assert_eq!(img.len() % SECTOR, 0, "the image is not whole sectors");
    let views = read(img).unwrap_or_else(|e| panic!("the image does not read back: {e}"));
    assert_eq!(views.label, label, "primary volume label");
    assert_eq!(views.joliet_label, label, "Joliet volume label");
    for (tree, got) in [("Rock Ridge", &views.rock_ridge), ("Joliet", &views.joliet)] {
        let got: BTreeMap<&str, &[u8]> = got
            .iter()
            .map(|(n, d)| (n.as_str(), d.as_slice()))
            .collect();
        assert_eq!(got, want, "the {tree} tree holds other files");
    }

    let iso = iso9660::ISO9660::new(std::io::Cursor::new(img.to_vec()))
        .unwrap_or_else(|e| panic!("the iso9660 crate cannot read the image: {e}"));
    let mut contents = vec![];
    for entry in iso.root.contents() {
        match entry {
            Ok(iso9660::DirectoryEntry::File(f)) => {
                let mut data = vec![];
                f.read().read_to_end(&mut data).expect("a file reads");
                contents.push(data);
            }
            Ok(_) => {}
            Err(e) => panic!("the iso9660 crate fails on a directory entry: {e}"),
        }
    }
    let mut want: Vec<&[u8]> = files.iter().map(|(_, d)| d.as_slice()).collect();
    let mut got: Vec<&[u8]> = contents.iter().map(Vec::as_slice).collect();
    want.sort();
    got.sort();
    assert_eq!(got, want, "the iso9660 crate reads other contents");
}

/// A seed whose meta-data carries the label as instance ID and the first file's name
/// as hostname: its image reads back, and its meta-data is YAML giving both back.
fn seed(label: &str, files: &[(String, Vec<u8>)]) {
    let hostname = files.first().map(|(n, _)| n.clone()).unwrap_or_default();
    let seed = Seed {
        user_data: files.first().map(|(_, d)| d.clone()).unwrap_or_default(),
        meta_data: MetaData {
            instance_id: label.to_string(),
            hostname: hostname.clone(),
            ..MetaData::default()
        },
        ..Seed::default()
    };
    let img = seed.iso().expect("a seed's image always builds");
    let named: Vec<(String, Vec<u8>)> = seed
        .files()
        .into_iter()
        .map(|(n, d)| (n.to_string(), d))
        .collect();
    image(&img, guest_nocloud::LABEL, &named);
    let meta = String::from_utf8(seed.meta_data.render().into_bytes()).expect("UTF-8");
    let yaml: serde_yaml::Value = serde_yaml::from_str(&meta)
        .unwrap_or_else(|e| panic!("meta-data is not YAML ({e}):\n{meta}"));
    assert_eq!(
        yaml["instance-id"].as_str(),
        Some(label),
        "instance-id in:\n{meta}"
    );
    assert_eq!(
        yaml["local-hostname"].as_str(),
        Some(hostname.as_str()),
        "local-hostname in:\n{meta}"
    );
}

/// What an image shows.
#[derive(Debug, Default)]
pub struct Views {
    pub label: String,
    pub joliet_label: String,
    /// (Rock Ridge name, contents) of the primary tree's files.
    pub rock_ridge: Vec<(String, Vec<u8>)>,
    /// (Joliet name, contents).
    pub joliet: Vec<(String, Vec<u8>)>,
}

/// Read an image strictly: every field that ISO 9660 records twice (both byte orders)
/// must agree, records stay within their sector and extents within the image.
pub fn read(img: &[u8]) -> Result<Views, String> {
    let sector = |n: usize| {
        img.get(n * SECTOR..(n + 1) * SECTOR)
            .ok_or(format!("no sector {n}"))
    };
    let total = img.len() / SECTOR;
    let pvd = sector(16)?;
    let svd = sector(17)?;
    let end = sector(18)?;
    if pvd[0] != 1 || &pvd[1..6] != b"CD001" || pvd[6] != 1 {
        return Err("sector 16 is not a primary volume descriptor".into());
    }
    if svd[0] != 2 || &svd[1..6] != b"CD001" || svd[88..91] != [0x25, 0x2F, 0x45] {
        return Err("sector 17 is not a Joliet descriptor".into());
    }
    if end[0] != 255 || &end[1..6] != b"CD001" {
        return Err("sector 18 is not the set terminator".into());
    }
    for d in [pvd, svd] {
        if both32(d, 80)? as usize != total {
            return Err(format!(
                "volume space size is not the image's {total} sectors"
            ));
        }
        if both16(d, 128)? as usize != SECTOR {
            return Err("logical block size is not 2048".into());
        }
    }
    let label = String::from_utf8_lossy(&pvd[40..72])
        .trim_end_matches(' ')
        .to_string();
    let joliet_label = ucs2(&svd[40..72])?.trim_end_matches(' ').to_string();
    Ok(Views {
        label,
        joliet_label,
        rock_ridge: directory(img, &pvd[156..190], false)?,
        joliet: directory(img, &svd[156..190], true)?,
    })
}

fn directory(img: &[u8], root: &[u8], joliet: bool) -> Result<Vec<(String, Vec<u8>)>, String> {
    let extent = both32(root, 2)? as usize;
    let size = both32(root, 10)? as usize;
    if !size.is_multiple_of(SECTOR) {
        return Err(format!("root directory of {size} bytes"));
    }
    let dir = img
        .get(extent * SECTOR..extent * SECTOR + size)
        .ok_or("the root directory lies outside the image")?;
    let mut files = vec![];
    let mut off = 0;
    let mut index = 0;
    while off < dir.len() {
        let len = dir[off] as usize;
        if len == 0 {
            off = (off / SECTOR + 1) * SECTOR;
            continue;
        }
        if len < 34 || off % SECTOR + len > SECTOR {
            return Err(format!("a directory record of {len} bytes at {off}"));
        }
        let rec = &dir[off..off + len];
        off += len;
        let name_len = rec[32] as usize;
        let id = rec
            .get(33..33 + name_len)
            .ok_or("a name beyond its record")?;
        let (fext, fsize) = (both32(rec, 2)? as usize, both32(rec, 10)? as usize);
        if index < 2 {
            if rec[25] & 2 == 0 || id != [index as u8] || fext != extent {
                return Err(format!("record {index} is not the root's `.`/`..`"));
            }
            index += 1;
            continue;
        }
        index += 1;
        if rec[25] != 0 {
            return Err(format!("a root entry with flags {:#x}", rec[25]));
        }
        let data = img
            .get(fext * SECTOR..fext * SECTOR + fsize)
            .ok_or("a file's extent lies outside the image")?;
        let name = if joliet {
            ucs2(id)?
        } else {
            let su = rec
                .get(33 + name_len + usize::from(name_len.is_multiple_of(2))..)
                .unwrap_or_default();
            rock_ridge_name(su)?
        };
        files.push((name, data.to_vec()));
    }
    Ok(files)
}

/// The `NM` entry of a system-use area (every entry well-formed, a `PX` present).
fn rock_ridge_name(mut su: &[u8]) -> Result<String, String> {
    let (mut name, mut px) = (None, false);
    while su.len() >= 4 && su[0] != 0 {
        let len = su[2] as usize;
        if len < 4 || len > su.len() {
            return Err(format!("a system-use entry of {len} bytes"));
        }
        match &su[..2] {
            b"NM" => {
                name = Some(String::from_utf8(su[5..len].to_vec()).map_err(|e| e.to_string())?)
            }
            b"PX" => px = true,
            _ => {}
        }
        su = &su[len..];
    }
    match (name, px) {
        (Some(n), true) => Ok(n),
        _ => Err("a file without Rock Ridge NM and PX".into()),
    }
}

fn ucs2(b: &[u8]) -> Result<String, String> {
    let units: Vec<u16> = b
        .chunks_exact(2)
        .map(|c| u16::from_be_bytes([c[0], c[1]]))
        .collect();
    String::from_utf16(&units).map_err(|e| e.to_string())
}

fn both32(b: &[u8], at: usize) -> Result<u32, String> {
    let f = b.get(at..at + 8).ok_or("a record too short")?;
    let (le, be) = (
        u32::from_le_bytes(f[..4].try_into().unwrap()),
        u32::from_be_bytes(f[4..].try_into().unwrap()),
    );
    if le != be {
        return Err(format!("both-endian field at {at}: {le} ≠ {be}"));
    }
    Ok(le)
}

fn both16(b: &[u8], at: usize) -> Result<u16, String> {
    let f = b.get(at..at + 4).ok_or("a field beyond its descriptor")?;
    let (le, be) = (
        u16::from_le_bytes(f[..2].try_into().unwrap()),
        u16::from_be_bytes(f[2..].try_into().unwrap()),
    );
    if le != be {
        return Err(format!("both-endian field at {at}: {le} ≠ {be}"));
    }
    Ok(le)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_input_is_a_label_then_named_files() {
        let (label, files) = parse(b"cidata\n=user-data\n#cloud-config\nx: 1\n=meta-data\n");
        assert_eq!(label, "cidata");
        assert_eq!(
            files,
            vec![
                ("user-data".to_string(), b"#cloud-config\nx: 1".to_vec()),
                ("meta-data".to_string(), vec![]),
            ]
        );
    }

    #[test]
    fn a_seed_image_passes_every_check() {
        run(b"i-0001\n=node-1\n#cloud-config\nruncmd: [true]\n=meta-data\ninstance-id: x\n");
    }
}
