//! `/nodes/{node}/lxc`: containers are not simulated, so every node lists none (what PVE
//! answers on a node without containers).

use serde_json::{Value, json};

use super::Call;
use crate::envelope::ApiResult;

/// `GET /nodes/{node}/lxc`: `[]`.
pub fn list(_c: &mut Call) -> ApiResult<Value> {
    Ok(json!([]))
}
