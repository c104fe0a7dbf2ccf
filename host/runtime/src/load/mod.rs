//! Loading a plugin: its file read, checked and compiled (`component`, cached on
//! disk), linked against the host's imports with the bindings of the contract it
//! speaks (`exports::Pre`), then asked who it is and what it serves, which must hold
//! together (`info`) before the host uses any of it.
mod component;
mod info;

use std::path::Path;
use std::sync::Arc;

pub use component::private;

use crate::engine::Runtime;
use crate::error::LoadError;
use crate::exports::Pre;
use crate::plugin::Plugin;

impl Runtime {
    /// Load, check, compile and describe a plugin.
    pub async fn load(&self, path: &Path) -> Result<Plugin, LoadError> {
        let inner = &self.inner;
        let (component, digest, major) = {
            let (engine, file, cache) = (
                inner.engine.clone(),
                path.to_path_buf(),
                inner.cache_dir.clone(),
            );
            // Compiling takes seconds of CPU: keep it off the async workers.
            tokio::task::spawn_blocking(move || {
                component::load_component(&engine, &file, cache.as_deref())
            })
            .await
            .map_err(|e| LoadError::Other {
                path: path.into(),
                detail: e.to_string(),
            })??
        };
        let other = |detail: String| LoadError::Other {
            path: path.into(),
            detail,
        };
        let pre = inner
            .linker
            .instantiate_pre(&component)
            .map_err(|e| LoadError::Invalid {
                path: path.into(),
                detail: format!("{e:#}"),
            })?;
        let pre = Pre::new(major, pre).map_err(|e| other(format!("{e:#}")))?;
        let mut plugin = Plugin::new(self.clone(), pre, path.to_path_buf(), digest);
        let info = plugin
            .identity()
            .await
            .map_err(|e| other(format!("calling identity.info: {e}")))?;
        info::validate(&info).map_err(other)?;
        plugin.name = Arc::from(info.name.as_str());
        plugin.info = Some(Arc::new(info));
        Ok(plugin)
    }
}
