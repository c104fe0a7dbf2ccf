//! A small ISO 9660 writer: one root directory of regular files, readable three ways.
//!
//! * the primary volume descriptor with ISO 9660 names (`USER_DATA.;1`), for readers that
//!   know nothing else;
//! * Rock Ridge (SUSP `SP`/`ER`, RRIP `PX`/`NM`) system-use entries carrying the real
//!   names (`user-data`) and POSIX modes, which Linux prefers when present;
//! * a Joliet supplementary volume descriptor (UCS-2 names) with its own directory tree
//!   over the same file extents.
//!
//! The output is deterministic: the same files give the same bytes (timestamps are
//! fixed), so re-uploading an image after a lost state changes nothing.
//!
//! Layout (2048-byte sectors): 0–15 system area, 16 primary descriptor, 17 Joliet
//! descriptor, 18 terminator, 19–22 path tables (primary L/M, Joliet L/M), then the
//! primary root directory, the Joliet root directory, then the file data.

/// Logical sector size.
pub const SECTOR: usize = 2048;

/// 2024-01-01 00:00:00 UTC as a directory-record time (years since 1900, ..., GMT offset).
const RECORD_TIME: [u8; 7] = [124, 1, 1, 0, 0, 0, 0];
/// The same instant as a volume-descriptor time (`YYYYMMDDHHMMSScc` + GMT offset).
const VOLUME_TIME: &[u8; 17] = b"2024010100000000\0";

/// Why an image cannot be built.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum IsoError {
    /// A file name that cannot be stored (empty, `/`, too long, duplicate).
    BadName(String),
    /// A volume label longer than 32 (16 for Joliet) characters or not printable ASCII.
    BadLabel(String),
    /// A file too large for one extent (4 GiB).
    TooLarge(String),
}

impl std::fmt::Display for IsoError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            IsoError::BadName(n) => write!(f, "file name `{n}` cannot be stored in the image"),
            IsoError::BadLabel(l) => write!(f, "volume label `{l}` cannot be stored"),
            IsoError::TooLarge(n) => write!(f, "file `{n}` is larger than 4 GiB"),
        }
    }
}

impl std::error::Error for IsoError {}

/// Builds an image labelled `label` holding `files` (name, contents) in its root.
pub fn build(label: &str, files: &[(&str, &[u8])]) -> Result<Vec<u8>, IsoError> {
    if label.is_empty() || label.len() > 16 || !label.bytes().all(|b| b.is_ascii_graphic()) {
        return Err(IsoError::BadLabel(label.into()));
    }
    let mut seen = std::collections::BTreeSet::new();
    for (name, data) in files {
        let ok = !name.is_empty()
            && name.len() <= 64
            && !name.contains('/')
            && name.bytes().all(|b| b.is_ascii_graphic())
            && *name != "."
            && *name != "..";
        if !ok || !seen.insert(iso_name(name)) {
            return Err(IsoError::BadName((*name).into()));
        }
        if data.len() > u32::MAX as usize {
            return Err(IsoError::TooLarge((*name).into()));
        }
    }

    // Directory contents first (their size decides where the data starts).
    const PATH_L: u32 = 19;
    const PATH_M: u32 = 20;
    const JPATH_L: u32 = 21;
    const JPATH_M: u32 = 22;
    const ROOT: u32 = 23;
    let primary_len = directory_sectors(files, Tree::Primary);
    let joliet_root = ROOT + primary_len;
    let joliet_len = directory_sectors(files, Tree::Joliet);
    let mut next = joliet_root + joliet_len;
    let mut extents = Vec::with_capacity(files.len());
    for (_, data) in files {
        extents.push(next);
        next += data.len().div_ceil(SECTOR) as u32;
    }
    let total = next;
    let mut img = vec![0u8; total as usize * SECTOR];

    let primary_dir = directory(files, &extents, Tree::Primary, ROOT, primary_len);
    put(&mut img, ROOT as usize * SECTOR, &primary_dir);
    let joliet_dir = directory(files, &extents, Tree::Joliet, joliet_root, joliet_len);
    put(&mut img, joliet_root as usize * SECTOR, &joliet_dir);

    for (lba_l, lba_m, root) in [(PATH_L, PATH_M, ROOT), (JPATH_L, JPATH_M, joliet_root)] {
        // One entry: the root (identifier 0x00, parent 1), padded to an even length.
        let l = lba_l as usize * SECTOR;
        img[l] = 1;
        img[l + 2..l + 6].copy_from_slice(&root.to_le_bytes());
        img[l + 6..l + 8].copy_from_slice(&1u16.to_le_bytes());
        let m = lba_m as usize * SECTOR;
        img[m] = 1;
        img[m + 2..m + 6].copy_from_slice(&root.to_be_bytes());
        img[m + 6..m + 8].copy_from_slice(&1u16.to_be_bytes());
    }

    let pvd = descriptor(
        Tree::Primary,
        label,
        total,
        (PATH_L, PATH_M),
        ROOT,
        primary_len,
    );
    put(&mut img, 16 * SECTOR, &pvd);
    let svd = descriptor(
        Tree::Joliet,
        label,
        total,
        (JPATH_L, JPATH_M),
        joliet_root,
        joliet_len,
    );
    put(&mut img, 17 * SECTOR, &svd);
    let t = 18 * SECTOR;
    img[t] = 255;
    img[t + 1..t + 6].copy_from_slice(b"CD001");
    img[t + 6] = 1;

    for ((_, data), lba) in files.iter().zip(&extents) {
        put(&mut img, *lba as usize * SECTOR, data);
    }
    Ok(img)
}

#[derive(Clone, Copy, PartialEq, Eq)]
enum Tree {
    Primary,
    Joliet,
}

/// The ISO 9660 name of `name`: d-characters, `NAME.EXT;1`.
fn iso_name(name: &str) -> String {
    let upper: String = name
        .chars()
        .map(|c| {
            let c = c.to_ascii_uppercase();
            if c.is_ascii_uppercase() || c.is_ascii_digit() {
                c
            } else {
                '_'
            }
        })
        .collect();
    let (stem, ext) = match name.rfind('.') {
        Some(i) if i > 0 => (&upper[..i], &upper[i + 1..]),
        _ => (upper.as_str(), ""),
    };
    let stem: String = stem.chars().take(30 - ext.len().min(8)).collect();
    let ext: String = ext.chars().take(8).collect();
    format!("{stem}.{ext};1")
}

fn ucs2(s: &str) -> Vec<u8> {
    s.encode_utf16().flat_map(u16::to_be_bytes).collect()
}

fn both32(b: &mut [u8], v: u32) {
    b[..4].copy_from_slice(&v.to_le_bytes());
    b[4..8].copy_from_slice(&v.to_be_bytes());
}

fn both16(b: &mut [u8], v: u16) {
    b[..2].copy_from_slice(&v.to_le_bytes());
    b[2..4].copy_from_slice(&v.to_be_bytes());
}

fn put(img: &mut [u8], at: usize, bytes: &[u8]) {
    img[at..at + bytes.len()].copy_from_slice(bytes);
}

/// Rock Ridge `PX`: mode, links, uid, gid (RRIP 1.10 length).
fn rr_px(mode: u32, links: u32) -> Vec<u8> {
    let mut e = vec![0u8; 36];
    e[..4].copy_from_slice(&[b'P', b'X', 36, 1]);
    both32(&mut e[4..12], mode);
    both32(&mut e[12..20], links);
    e
}

fn rr_nm(name: &str) -> Vec<u8> {
    let mut e = vec![b'N', b'M', (5 + name.len()) as u8, 1, 0];
    e.extend_from_slice(name.as_bytes());
    e
}

/// SUSP `SP` (the system-use area is in use, skip 0) and `ER` naming RRIP.
fn susp_root() -> Vec<u8> {
    let mut e = vec![b'S', b'P', 7, 1, 0xBE, 0xEF, 0];
    let id = b"RRIP_1991A";
    let des = b"ROCK RIDGE POSIX NAMES AND MODES";
    let src = b"SEE IEEE P1282";
    let len = 8 + id.len() + des.len() + src.len();
    e.extend_from_slice(&[
        b'E',
        b'R',
        len as u8,
        1,
        id.len() as u8,
        des.len() as u8,
        src.len() as u8,
        1,
    ]);
    e.extend_from_slice(id);
    e.extend_from_slice(des);
    e.extend_from_slice(src);
    e
}

fn record(extent: u32, size: u32, dir: bool, id: &[u8], system_use: &[u8]) -> Vec<u8> {
    let pad = usize::from(id.len().is_multiple_of(2));
    let mut len = 33 + id.len() + pad + system_use.len();
    len += len % 2;
    let mut r = vec![0u8; len];
    r[0] = len as u8;
    both32(&mut r[2..10], extent);
    both32(&mut r[10..18], size);
    r[18..25].copy_from_slice(&RECORD_TIME);
    r[25] = if dir { 2 } else { 0 };
    both16(&mut r[28..32], 1);
    r[32] = id.len() as u8;
    r[33..33 + id.len()].copy_from_slice(id);
    let s = 33 + id.len() + pad;
    r[s..s + system_use.len()].copy_from_slice(system_use);
    r
}

/// The records of a root directory, sorted as ISO 9660 requires.
fn records(
    files: &[(&str, &[u8])],
    extents: &[u32],
    tree: Tree,
    root: u32,
    root_len: u32,
) -> Vec<Vec<u8>> {
    let dir_size = root_len * SECTOR as u32;
    let (dot_su, dotdot_su) = match tree {
        Tree::Primary => {
            let mut su = susp_root();
            su.extend(rr_px(0o040555, 2));
            (su, rr_px(0o040555, 2))
        }
        Tree::Joliet => (vec![], vec![]),
    };
    let mut out = vec![
        record(root, dir_size, true, &[0], &dot_su),
        record(root, dir_size, true, &[1], &dotdot_su),
    ];
    let mut entries: Vec<(Vec<u8>, Vec<u8>)> = files
        .iter()
        .enumerate()
        .map(|(i, (name, data))| {
            let (id, su) = match tree {
                Tree::Primary => {
                    let mut su = rr_px(0o100444, 1);
                    su.extend(rr_nm(name));
                    (iso_name(name).into_bytes(), su)
                }
                Tree::Joliet => (ucs2(name), vec![]),
            };
            let extent = extents.get(i).copied().unwrap_or(0);
            let rec = record(extent, data.len() as u32, false, &id, &su);
            (id, rec)
        })
        .collect();
    entries.sort_by(|a, b| a.0.cmp(&b.0));
    out.extend(entries.into_iter().map(|(_, r)| r));
    out
}

/// Records packed into sectors: a record never crosses a sector boundary.
fn pack(records: Vec<Vec<u8>>) -> Vec<u8> {
    let mut out: Vec<u8> = Vec::new();
    for r in records {
        let used = out.len() % SECTOR;
        if used + r.len() > SECTOR {
            out.resize(out.len() + SECTOR - used, 0);
        }
        out.extend(r);
    }
    let n = out.len().div_ceil(SECTOR).max(1);
    out.resize(n * SECTOR, 0);
    out
}

fn directory_sectors(files: &[(&str, &[u8])], tree: Tree) -> u32 {
    // Extents do not change record sizes: measure with placeholders.
    let n = pack(records(files, &[], tree, 0, 1)).len() / SECTOR;
    n as u32
}

fn directory(files: &[(&str, &[u8])], extents: &[u32], tree: Tree, root: u32, len: u32) -> Vec<u8> {
    pack(records(files, extents, tree, root, len))
}

fn descriptor(
    tree: Tree,
    label: &str,
    total: u32,
    (path_l, path_m): (u32, u32),
    root: u32,
    root_len: u32,
) -> Vec<u8> {
    let mut d = vec![0u8; SECTOR];
    d[0] = if tree == Tree::Primary { 1 } else { 2 };
    d[1..6].copy_from_slice(b"CD001");
    d[6] = 1;
    let text = |d: &mut [u8], off: usize, len: usize, s: &str| match tree {
        Tree::Primary => {
            for i in 0..len {
                d[off + i] = *s.as_bytes().get(i).unwrap_or(&b' ');
            }
        }
        Tree::Joliet => {
            let u = ucs2(s);
            for i in (0..len).step_by(2) {
                let pair = [*u.get(i).unwrap_or(&0), *u.get(i + 1).unwrap_or(&b' ')];
                d[off + i] = pair[0];
                if i + 1 < len {
                    d[off + i + 1] = pair[1];
                }
            }
        }
    };
    text(&mut d, 8, 32, "LINUX");
    text(&mut d, 40, 32, label);
    both32(&mut d[80..88], total);
    if tree == Tree::Joliet {
        d[88..91].copy_from_slice(&[0x25, 0x2F, 0x45]); // UCS-2 level 3
    }
    both16(&mut d[120..124], 1);
    both16(&mut d[124..128], 1);
    both16(&mut d[128..132], SECTOR as u16);
    both32(&mut d[132..140], 10);
    d[140..144].copy_from_slice(&path_l.to_le_bytes());
    d[148..152].copy_from_slice(&path_m.to_be_bytes());
    let root_record = record(root, root_len * SECTOR as u32, true, &[0], &[]);
    d[156..190].copy_from_slice(&root_record[..34]);
    for (off, len) in [(190, 128), (318, 128), (446, 128), (574, 128)] {
        text(&mut d, off, len, "");
    }
    text(&mut d, 574, 128, "HYPERPLUG");
    for (off, len) in [(702, 37), (739, 37), (776, 37)] {
        text(&mut d, off, len, "");
    }
    for off in [813, 830] {
        d[off..off + 17].copy_from_slice(VOLUME_TIME);
    }
    for off in [847, 864] {
        d[off..off + 16].copy_from_slice(b"0000000000000000");
    }
    d[881] = 1;
    d
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn iso_names_are_d_characters() {
        assert_eq!(iso_name("user-data"), "USER_DATA.;1");
        assert_eq!(iso_name("network-config"), "NETWORK_CONFIG.;1");
        assert_eq!(iso_name("a.json"), "A.JSON;1");
    }

    #[test]
    fn bad_names_and_labels_are_refused() {
        assert!(matches!(
            build("cidata", &[("a/b", b"")]),
            Err(IsoError::BadName(_))
        ));
        assert!(matches!(
            build("cidata", &[("a-b", b""), ("a_b", b"")]),
            Err(IsoError::BadName(_))
        ));
        assert!(matches!(build("", &[]), Err(IsoError::BadLabel(_))));
        assert!(matches!(
            build("this label is far too long", &[]),
            Err(IsoError::BadLabel(_))
        ));
    }

    #[test]
    fn output_is_deterministic_and_sector_aligned() {
        let a = build("cidata", &[("user-data", b"#cloud-config\n")]).unwrap();
        let b = build("cidata", &[("user-data", b"#cloud-config\n")]).unwrap();
        assert_eq!(a, b);
        assert_eq!(a.len() % SECTOR, 0);
        assert_eq!(&a[16 * SECTOR + 1..16 * SECTOR + 6], b"CD001");
        assert_eq!(&a[16 * SECTOR + 40..16 * SECTOR + 46], b"cidata");
    }

    #[test]
    fn many_files_spill_into_more_directory_sectors() {
        let names: Vec<String> = (0..60).map(|i| format!("file-number-{i:03}")).collect();
        let files: Vec<(&str, &[u8])> = names.iter().map(|n| (n.as_str(), &b"x"[..])).collect();
        let img = build("many", &files).unwrap();
        let iso = iso9660::ISO9660::new(std::io::Cursor::new(img)).unwrap();
        let count = iso.root.contents().filter(|e| e.is_ok()).count();
        assert_eq!(count, 62, "60 files plus . and ..");
    }
}
