//! Machine lifecycle. Creation, description and deletion of VMs come with the full
//! lifecycle; for now the plugin describes templates and refuses the rest clearly.
use crate::bindings::exports::hyperplug::provider::machine::{
    Guest, MachineRequest, MachineStatus, TemplateRequest, TemplateStatus,
};
use crate::bindings::hyperplug::provider::types::{PluginError, Progress, TerminalError};
use crate::spec::MachineSpec;
use crate::{Plugin, parse_spec};

fn not_yet() -> PluginError {
    PluginError::Terminal(TerminalError {
        reason: "NotImplemented".into(),
        message: "this build of the Proxmox plugin cannot manage VMs yet".into(),
    })
}

impl Guest for Plugin {
    fn create(_req: MachineRequest) -> Result<MachineStatus, PluginError> {
        Err(not_yet())
    }

    fn describe(_req: MachineRequest) -> Result<MachineStatus, PluginError> {
        Err(not_yet())
    }

    fn delete(_req: MachineRequest) -> Result<Option<Progress>, PluginError> {
        Err(not_yet())
    }

    fn describe_template(req: TemplateRequest) -> Result<TemplateStatus, PluginError> {
        let spec: MachineSpec = parse_spec(&req.spec, "spec.template.spec")?;
        let cpus = spec.num_sockets.unwrap_or(1) * spec.num_cores.unwrap_or(1);
        let memory = spec.memory_mib.unwrap_or(2048);
        Ok(TemplateStatus {
            capacity: vec![
                ("cpu".into(), cpus.to_string()),
                ("memory".into(), format!("{memory}Mi")),
            ],
            node_info: vec![
                ("architecture".into(), "amd64".into()),
                ("operatingSystem".into(), "linux".into()),
            ],
        })
    }
}
