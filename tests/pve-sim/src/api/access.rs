//! `/version`, `/access/ticket` and `/access/permissions`.

use serde_json::{Value, json};

use super::Call;
use crate::envelope::{ApiError, ApiResult};
use crate::state::Ticket;

/// `GET /version`.
pub fn version(c: &mut Call) -> ApiResult {
    let v = &c.shared.config.pve_version;
    let (maj, min) = c.shared.config.version_tuple();
    Ok(json!({
        "version": v,
        "release": format!("{maj}.{min}"),
        "repoid": "5ba5e9d5",
        "console": "xtermjs",
    }))
}

fn hex(w: &mut crate::state::World, n: usize) -> String {
    (0..n).map(|_| format!("{:02X}", w.rng.u8(..))).collect()
}

/// `POST /access/ticket`: username (+ realm) and password of a configured user.
pub fn ticket(c: &mut Call) -> ApiResult {
    let mut user = c.p("username").unwrap_or("").to_string();
    if !user.contains('@') {
        user = format!("{user}@{}", c.p("realm").unwrap_or("pam"));
    }
    let password = c.p("password").unwrap_or("");
    let ok = c
        .shared
        .config
        .users
        .get(&user)
        .is_some_and(|p| p == password);
    if !ok {
        return Err(ApiError::with_status(401, "authentication failure"));
    }
    let mut w = c.shared.lock();
    let now = crate::state::unix_now();
    let sig = hex(&mut w, 24);
    let ticket = format!("PVE:{user}:{now:08X}::{sig}");
    let csrf = format!("{now:08X}:{}", hex(&mut w, 16));
    w.tickets.insert(
        ticket.clone(),
        Ticket {
            user: user.clone(),
            csrf: csrf.clone(),
        },
    );
    Ok(json!({
        "username": user,
        "ticket": ticket,
        "CSRFPreventionToken": csrf,
        "clustername": c.shared.config.cluster_name,
        "cap": Value::Object(Default::default()),
    }))
}

/// `GET /access/permissions[?path=&userid=]`: the effective privileges of the caller (a
/// token's own, for a token), or of `userid`: the caller itself, one of its tokens, or
/// anyone with `Sys.Audit` on `/access`. `{"PATH": {"PRIVILEGE": PROPAGATE}}`; with
/// `path` that one path (present even when empty), else every path PVE lists (see
/// `perms::Access::effective`).
pub fn permissions(c: &mut Call) -> ApiResult {
    let w = c.shared.lock();
    let userid = c.p("userid").unwrap_or(&c.user).to_string();
    let own =
        userid == c.user || (userid.contains('!') && crate::perms::user_of(&userid) == c.user);
    if !own {
        c.require(&w, "/access", &["Sys.Audit"])?;
    }
    let access = &c.shared.access;
    let privs = |p: crate::perms::Privs| -> Value {
        p.into_iter()
            .map(|(k, flag)| (k, json!(u8::from(flag))))
            .collect::<serde_json::Map<_, _>>()
            .into()
    };
    if let Some(path) = c.p("path").filter(|p| !p.is_empty()) {
        let mut out = serde_json::Map::new();
        out.insert(
            path.to_string(),
            privs(access.privileges(&w, &userid, path)),
        );
        return Ok(Value::Object(out));
    }
    Ok(Value::Object(
        access
            .effective(&w, &userid)
            .into_iter()
            .map(|(path, p)| (path, privs(p)))
            .collect(),
    ))
}
