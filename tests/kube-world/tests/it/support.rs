//! What kube-world's tests share.
use std::cell::RefCell;
use std::time::Duration;

use anyhow::{Result, anyhow};
use kube::api::{Api, DynamicObject};
use kube_world::Plane;

/// Poll the object `name` until `ok` holds, 90 s at most and failing early if a plane
/// process died (the plane's one poller); the object.
pub async fn wait_until(
    plane: &Plane,
    api: &Api<DynamicObject>,
    name: &str,
    what: &str,
    ok: impl Fn(&DynamicObject) -> bool,
) -> Result<DynamicObject> {
    let seen = RefCell::new(None);
    let waited = plane
        .wait_for(what, Duration::from_secs(90), || async {
            let obj = api.get_opt(name).await?;
            let done = obj.as_ref().is_some_and(&ok);
            *seen.borrow_mut() = obj;
            Ok(done)
        })
        .await;
    let seen = seen.into_inner();
    match waited {
        Ok(()) => Ok(seen.expect("the object that passed")),
        Err(e) => Err(anyhow!(
            "{e:#}; {name} now: {:?}",
            seen.map(|o| o.data.to_string())
        )),
    }
}
