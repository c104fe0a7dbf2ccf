//! `/nodes/{node}/tasks...`: list, status, log, stop; `/cluster/tasks`: every node's at once.

use serde_json::{Value, json};

use super::Call;
use crate::envelope::{ApiError, ApiResult, Data};
use crate::tasks::{CLUSTER_TASKS_FINISHED_PER_NODE, parse_upid};

fn find_task<'w>(w: &'w crate::state::World, c: &Call) -> ApiResult<&'w crate::tasks::Task> {
    let upid = c.p("upid").unwrap_or("");
    let Some(parsed) = parse_upid(upid) else {
        return Err(ApiError::die(format!(
            "unable to parse worker upid '{upid}'"
        )));
    };
    if parsed.node != c.node() {
        return Err(ApiError::die(format!(
            "no such task ('{upid}' is on node '{}')",
            parsed.node
        )));
    }
    w.tasks
        .get(upid)
        .ok_or_else(|| ApiError::die(format!("no such task: {upid}")))
}

/// Whether the caller owns the task (PVE's `check_task_user`): a token its own tasks, a
/// user its own and its tokens'.
fn owns(task_user: &str, caller: &str) -> bool {
    task_user == caller || (task_user.contains('!') && crate::perms::user_of(task_user) == caller)
}

/// A task of someone else needs `privilege` on `/nodes/<node>`.
fn check_owner(
    w: &crate::state::World,
    c: &Call,
    t: &crate::tasks::Task,
    privilege: &str,
) -> ApiResult<()> {
    if owns(&t.user, &c.user) {
        return Ok(());
    }
    c.require(w, &format!("/nodes/{}", c.node()), &[privilege])
}

/// `GET /nodes/{node}/tasks/{upid}/status`.
pub fn status(c: &mut Call) -> ApiResult {
    let w = c.shared.lock();
    let t = find_task(&w, c)?;
    check_owner(&w, c, t, "Sys.Audit")?;
    Ok(t.status_json())
}

/// `GET /nodes/{node}/tasks/{upid}/log?start=&limit=`: a page of lines, with the number
/// of lines in `total`.
pub fn log(c: &mut Call) -> ApiResult<Data> {
    let w = c.shared.lock();
    let t = find_task(&w, c)?;
    check_owner(&w, c, t, "Sys.Audit")?;
    let start: usize = c.p("start").and_then(|s| s.parse().ok()).unwrap_or(0);
    let limit: usize = c.p("limit").and_then(|s| s.parse().ok()).unwrap_or(50);
    let data = Value::Array(
        t.log
            .iter()
            .enumerate()
            .skip(start)
            .take(limit)
            .map(|(i, l)| json!({"n": i + 1, "t": l}))
            .collect(),
    );
    Ok(Data::Page {
        data,
        total: t.log.len(),
    })
}

/// `DELETE /nodes/{node}/tasks/{upid}`: stops a running task.
pub fn stop(c: &mut Call) -> ApiResult {
    let mut w = c.shared.lock();
    let t = find_task(&w, c)?;
    check_owner(&w, c, t, "Sys.Modify")?;
    let upid = t.upid.clone();
    crate::tasks::interrupt(&mut w, &upid);
    Ok(Value::Null)
}

/// `GET /nodes/{node}/tasks`: newest first, a page with the number of matches in
/// `total`; the caller's own tasks only, unless it has `Sys.Audit` on `/nodes/<node>`.
pub fn list(c: &mut Call) -> ApiResult<Data> {
    let w = c.shared.lock();
    let auditor = c.can(&w, &format!("/nodes/{}", c.node()), "Sys.Audit");
    let vmid = c.p("vmid");
    let limit: usize = c.p("limit").and_then(|s| s.parse().ok()).unwrap_or(50);
    let start: usize = c.p("start").and_then(|s| s.parse().ok()).unwrap_or(0);
    let source = c.p("source").unwrap_or("archive");
    let matching: Vec<&crate::tasks::Task> = w
        .task_order
        .iter()
        .rev()
        .filter_map(|u| w.tasks.get(u))
        .filter(|t| t.node == c.node())
        .filter(|t| auditor || owns(&t.user, &c.user))
        .filter(|t| vmid.is_none_or(|v| t.id == v))
        .filter(|t| c.p("typefilter").is_none_or(|f| t.kind == f))
        .filter(|t| c.p("userfilter").is_none_or(|u| t.user.contains(u)))
        .filter(|t| match source {
            "active" => t.running(),
            "all" => true,
            _ => !t.running(),
        })
        .collect();
    let data = Value::Array(
        matching
            .iter()
            .skip(start)
            .take(limit)
            .map(|t| t.list_json())
            .collect(),
    );
    Ok(Data::Page {
        data,
        total: matching.len(),
    })
}

/// `GET /cluster/tasks`: every node's running tasks and its newest finished ones
/// ([`CLUSTER_TASKS_FINISHED_PER_NODE`]), newest first, in the `/nodes/{node}/tasks`
/// entry shape (`endtime` and `status` once finished). A token's task shows its user in
/// `user` and the token's name in `tokenid`. Callers without `Sys.Audit` on `/` see only
/// the tasks whose `user` is them: as in PVE, that is never the case for a token, whose
/// ID is compared with its tasks' user part.
pub fn cluster(c: &mut Call) -> ApiResult {
    let w = c.shared.lock();
    let all = c.can(&w, "/", "Sys.Audit");
    let mut finished: std::collections::HashMap<&str, usize> = Default::default();
    let list = w
        .task_order
        .iter()
        .rev()
        .filter_map(|u| w.tasks.get(u))
        .filter(|t| {
            if t.running() {
                return true;
            }
            let n = finished.entry(t.node.as_str()).or_default();
            *n += 1;
            *n <= CLUSTER_TASKS_FINISHED_PER_NODE
        })
        .map(|t| {
            let mut v = t.list_json();
            if let Some((user, token)) = t.user.split_once('!') {
                v["user"] = json!(user);
                v["tokenid"] = json!(token);
            }
            v
        })
        .filter(|v| all || v["user"].as_str() == Some(c.user.as_str()))
        .collect();
    Ok(Value::Array(list))
}
