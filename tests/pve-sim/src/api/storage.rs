//! `/nodes/{node}/storage...`: list, content, upload (multipart, directory storages only),
//! volume deletion.

use serde_json::{Value, json};
use sha2::Digest;

use super::Call;
use crate::envelope::{ApiError, ApiResult};
use crate::state::{Storage, Volume, unix_now};
use crate::tasks::{self, TaskSpec};

fn storage_entry(s: &Storage) -> Value {
    let used = s.used();
    json!({
        "storage": s.id,
        "type": s.kind.as_str(),
        "content": s.content.join(","),
        "active": 1,
        "enabled": 1,
        "shared": u8::from(s.shared),
        "total": s.total,
        "used": used,
        "avail": s.total.saturating_sub(used),
        "used_fraction": used as f64 / s.total.max(1) as f64,
    })
}

/// `GET /nodes/{node}/storage[?content=&storage=&enabled=]`.
pub fn list(c: &mut Call) -> ApiResult {
    let w = c.shared.lock();
    let wanted: Vec<&str> = c
        .p("content")
        .map(|s| s.split(',').filter(|x| !x.is_empty()).collect())
        .unwrap_or_default();
    Ok(Value::Array(
        w.node_storages(c.node())
            .into_iter()
            .filter(|s| c.p("storage").is_none_or(|id| id == s.id))
            .filter(|s| {
                let path = format!("/storage/{}", s.id);
                c.can(&w, &path, "Datastore.Audit") || c.can(&w, &path, "Datastore.AllocateSpace")
            })
            .filter(|s| wanted.iter().all(|ct| s.has_content(ct)))
            .map(storage_entry)
            .collect(),
    ))
}

fn get_storage<'w>(w: &'w crate::state::World, c: &Call) -> ApiResult<&'w Storage> {
    let sid = c.p("storage").unwrap_or("");
    w.storage(c.node(), sid)
        .ok_or_else(|| ApiError::die(format!("storage '{sid}' does not exist")))
}

fn volume_entry(sid: &str, v: &Volume) -> Value {
    let mut e = json!({
        "volid": format!("{sid}:{}", v.name),
        "content": v.content,
        "format": v.format,
        "size": v.size,
        "ctime": v.ctime,
    });
    if let Some(id) = v.vmid {
        e["vmid"] = json!(id);
    }
    if let Some(p) = &v.parent {
        e["parent"] = json!(p);
    }
    if v.content == "images" {
        e["used"] = json!(v.size);
    }
    e
}

/// `GET /nodes/{node}/storage/{storage}/content[?content=&vmid=]`.
pub fn content(c: &mut Call) -> ApiResult {
    let w = c.shared.lock();
    let st = get_storage(&w, c)?;
    let vmid: Option<u32> = c.p("vmid").and_then(|v| v.parse().ok());
    Ok(Value::Array(
        st.volumes
            .values()
            .filter(|v| c.p("content").is_none_or(|ct| v.content == ct))
            .filter(|v| vmid.is_none_or(|id| v.vmid == Some(id)))
            .map(|v| volume_entry(&st.id, v))
            .collect(),
    ))
}

fn hex(b: &[u8]) -> String {
    b.iter().map(|x| format!("{x:02x}")).collect()
}

/// `POST /nodes/{node}/storage/{storage}/upload` (multipart: `content`, then the file part
/// `filename`). Returns an `imgcopy` task; the volume appears when it ends.
pub fn upload(c: &mut Call) -> ApiResult {
    let sh = c.shared.clone();
    let mut w = sh.lock();
    let node = c.node().to_string();
    let st = get_storage(&w, c)?;
    let sid = st.id.clone();
    if !st.kind.is_file_based() {
        return Err(ApiError::die(format!(
            "can't upload to storage type '{}'",
            st.kind.as_str()
        )));
    }
    let content = c.p("content").unwrap_or("").to_string();
    let filename = c.p("filename").unwrap_or("").to_string();
    let filename = filename
        .rsplit(['/', '\\'])
        .next()
        .unwrap_or("")
        .to_string();
    let dir = match content.as_str() {
        "iso" => {
            let lower = filename.to_ascii_lowercase();
            if !(lower.ends_with(".iso") || lower.ends_with(".img")) {
                return Err(ApiError::param("filename", "wrong file extension"));
            }
            "iso"
        }
        "vztmpl" => {
            let lower = filename.to_ascii_lowercase();
            if !(lower.ends_with(".tar.gz")
                || lower.ends_with(".tar.xz")
                || lower.ends_with(".tar.zst"))
            {
                return Err(ApiError::param("filename", "wrong file extension"));
            }
            "template/cache"
        }
        "import" => "import",
        _ => {
            return Err(ApiError::param(
                "content",
                format!("upload content type '{content}' not allowed"),
            ));
        }
    };
    if !st.has_content(&content) {
        return Err(ApiError::die(format!(
            "storage '{sid}' does not support '{content}' content"
        )));
    }
    let Some((_, data)) = c.file.clone() else {
        return Err(ApiError::param("filename", "missing file upload"));
    };
    let checksum = c.p("checksum").map(str::to_lowercase);
    let algo = c.p("checksum-algorithm").unwrap_or("sha256").to_string();
    let actual = match algo.as_str() {
        "sha1" => hex(&sha1::Sha1::digest(&data)),
        "sha256" => hex(&sha2::Sha256::digest(&data)),
        "sha512" => hex(&sha2::Sha512::digest(&data)),
        "sha224" => hex(&sha2::Sha224::digest(&data)),
        "sha384" => hex(&sha2::Sha384::digest(&data)),
        _ => String::new(),
    };
    let nocloud = if content == "iso" {
        crate::nocloud::read_cidata(&data)
    } else {
        None
    };
    let name = format!("{dir}/{filename}");
    let size = data.len() as u64;
    let log = vec![
        format!(
            "starting file import from: /var/tmp/pveupload-{}",
            hex(&data[..data.len().min(8)])
        ),
        format!("target node: {node}"),
        format!("target file: /var/lib/vz/{name}"),
        format!("file size is: {size}"),
    ];
    let mut spec = TaskSpec::new(
        c,
        "imgcopy",
        "",
        Box::new(move |w, inj| {
            if let Some(e) = inj {
                return Err(e);
            }
            if let Some(expected) = checksum
                && !actual.is_empty()
                && expected != actual
            {
                return Err(format!(
                    "checksum verification failed: '{actual}' does not match expected '{expected}'"
                ));
            }
            if let Some(st) = w.storage_mut(&node, &sid) {
                st.volumes.insert(
                    name.clone(),
                    Volume {
                        name: name.clone(),
                        content: content.clone(),
                        format: if content == "iso" {
                            "iso".into()
                        } else {
                            "raw".into()
                        },
                        size,
                        vmid: None,
                        ctime: unix_now(),
                        parent: None,
                        nocloud,
                    },
                );
            }
            Ok(vec![format!(
                "copy corresponding to /var/lib/vz/{name} finished"
            )])
        }),
    );
    spec.log = log;
    let upid = tasks::start(&sh, &mut w, spec);
    Ok(json!(upid))
}

/// PVE's `real_volume_id`: `STORAGE:NAME` (whose storage must be the path's) or a bare
/// name on the path's storage; `(storage, name)`.
fn real_volume_id(sid: &str, volume: &str) -> ApiResult<(String, String)> {
    match volume.split_once(':') {
        Some((s, n)) if s == sid => Ok((s.to_string(), n.to_string())),
        Some((s, _)) => Err(ApiError::param(
            "volume",
            format!("storage ID mismatch ({s} != {sid})"),
        )),
        None => Ok((sid.to_string(), volume.to_string())),
    }
}

/// Where PVE keeps a volume: under the directory storage's path, or a block device.
fn volume_path(st: &Storage, name: &str) -> String {
    match st.kind {
        crate::config::StorageType::Dir => {
            let root = if st.id == "local" {
                "/var/lib/vz".to_string()
            } else {
                format!("/mnt/pve/{}", st.id)
            };
            match name.split_once('/') {
                Some(("iso", f)) => format!("{root}/template/iso/{f}"),
                Some(("template", _)) | Some(("import", _)) => format!("{root}/{name}"),
                _ => format!("{root}/images/{name}"),
            }
        }
        crate::config::StorageType::Lvmthin => format!("/dev/pve/{name}"),
        crate::config::StorageType::Zfspool => format!("/dev/zvol/rpool/data/{name}"),
    }
}

/// `GET /nodes/{node}/storage/{storage}/content/{volume}`: the volume's attributes.
pub fn volume_info(c: &mut Call) -> ApiResult {
    let w = c.shared.lock();
    let st = get_storage(&w, c)?;
    let (sid, name) = real_volume_id(&st.id, c.p("volume").unwrap_or(""))?;
    let volid = format!("{sid}:{name}");
    crate::api::qemu::access::check_volume(c, &w, c.node(), None, &volid)?;
    let Some(v) = st.volumes.get(&name) else {
        return Err(ApiError::die(format!(
            "volume_size_info on '{volid}' failed - no format"
        )));
    };
    Ok(json!({
        "path": volume_path(st, &name),
        "size": v.size,
        "used": v.size,
        "format": v.format,
    }))
}

/// `DELETE /nodes/{node}/storage/{storage}/content/{volume}`: an `imgdel` task.
pub fn delete_volume(c: &mut Call) -> ApiResult {
    let sh = c.shared.clone();
    let mut w = sh.lock();
    let node = c.node().to_string();
    let st = get_storage(&w, c)?;
    let (sid, name) = real_volume_id(&st.id, c.p("volume").unwrap_or(""))?;
    let Some(vol) = st.volumes.get(&name) else {
        return Err(ApiError::die(format!(
            "volume '{sid}:{name}' does not exist"
        )));
    };
    // backups of a VM: AllocateSpace and VM.Backup on it; anything else: Allocate
    let path = format!("/storage/{sid}");
    match vol.vmid.filter(|_| vol.content == "backup") {
        Some(owner) => {
            c.require(&w, &path, &["Datastore.AllocateSpace"])?;
            c.require(&w, &format!("/vms/{owner}"), &["VM.Backup"])?;
        }
        None => c.require(&w, &path, &["Datastore.Allocate"])?,
    }
    let spec = TaskSpec::new(
        c,
        "imgdel",
        &format!("{sid}:{name}"),
        Box::new(move |w, inj| {
            if let Some(e) = inj {
                return Err(e);
            }
            if let Some(st) = w.storage_mut(&node, &sid) {
                st.volumes.remove(&name);
            }
            Ok(vec![format!("Removed volume '{sid}:{name}'")])
        }),
    );
    let upid = tasks::start(&sh, &mut w, spec);
    Ok(json!(upid))
}
