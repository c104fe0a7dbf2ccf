//! hyperplug's fuzz targets, as library functions the targets (`fuzz_targets/`) call
//! and the seeds' own tests (`cargo test` here) run on stable Rust:
//!
//! - [`lifecycle`]: the Proxmox plugin through a cluster and a machine's whole life,
//!   against PVE replies a [`script`] makes up (target `pve_replies`);
//! - [`specs`]: both plugins' spec parsing (target `specs`);
//! - [`nocloud`]: the NoCloud image writer and seed (target `nocloud_iso`);
//! - [`checks`]: what every result must be, whatever the input.
pub mod checks;
pub mod lifecycle;
pub mod nocloud;
pub mod script;
pub mod specs;

/// The Proxmox plugin, as the host calls it.
pub type Proxmox = guest_proxmox::ExportedPlugin;

/// The Redfish plugin, as the host calls it.
pub type Redfish = guest_redfish::ExportedPlugin;

/// The committed seeds (`record/` writes them) still do what they were made
/// for: the recorded lifecycles run through, and no seed trips a check.
#[cfg(test)]
mod seeds {
    use std::path::PathBuf;

    fn seeds(target: &str) -> Vec<(String, Vec<u8>)> {
        let dir = PathBuf::from(env!("CARGO_MANIFEST_DIR"))
            .join("seeds")
            .join(target);
        let mut out: Vec<(String, Vec<u8>)> = std::fs::read_dir(&dir)
            .unwrap_or_else(|e| panic!("{}: {e}", dir.display()))
            .map(|e| {
                let path = e.expect("a directory entry").path();
                let name = path.file_name().unwrap().to_string_lossy().into_owned();
                (name, std::fs::read(&path).expect("a seed"))
            })
            .collect();
        out.sort();
        assert!(!out.is_empty(), "no seeds in {}", dir.display());
        out
    }

    #[test]
    fn recorded_lifecycles_replay_to_a_ready_machine_and_its_deletion() {
        for (name, input) in seeds("pve_replies") {
            let reached = super::lifecycle::run::<super::Proxmox>(&input);
            let whole = !name.contains("-error-") && !name.contains("-tasks-failed");
            if whole {
                assert!(
                    reached.cluster_ready && reached.machine_ready && reached.deleted,
                    "{name} no longer runs through: {reached:?} (record the seeds again: fuzz/README.md)"
                );
            }
        }
    }

    #[test]
    fn spec_and_image_seeds_pass_their_checks() {
        for (_, input) in seeds("specs") {
            super::specs::run(&input);
        }
        for (_, input) in seeds("nocloud_iso") {
            super::nocloud::run(&input);
        }
    }
}
