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

/// `GET /nodes/{node}/tasks/{upid}/status`.
pub fn status(c: &mut Call) -> ApiResult {
    let w = c.shared.lock();
    Ok(find_task(&w, c)?.status_json())
}

/// `GET /nodes/{node}/tasks/{upid}/log?start=&limit=`: a page of lines, with the number
/// of lines in `total`.
pub fn log(c: &mut Call) -> ApiResult<Data> {
    let w = c.shared.lock();
    let t = find_task(&w, c)?;
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
    let upid = find_task(&w, c)?.upid.clone();
    crate::tasks::interrupt(&mut w, &upid);
    Ok(Value::Null)
}

/// `GET /nodes/{node}/tasks`: newest first, a page with the number of matches in
/// `total`.
pub fn list(c: &mut Call) -> ApiResult<Data> {
    let w = c.shared.lock();
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
/// entry shape (`endtime` and `status` once finished).
pub fn cluster(c: &mut Call) -> ApiResult {
    let w = c.shared.lock();
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
        .map(|t| t.list_json())
        .collect();
    Ok(Value::Array(list))
}
