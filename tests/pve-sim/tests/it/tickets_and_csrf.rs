//! Ticket login, the PVEAuthCookie cookie and CSRFPreventionToken on writes.

use crate::common::{assert_shape, start_fast};
use serde_json::Value;

#[tokio::test]
async fn a_ticket_logs_in_and_writes_need_the_csrf_token() {
    let s = start_fast().await;
    let r = s
        .send(
            s.http
                .post(s.url("/access/ticket"))
                .form(&[("username", "root@pam"), ("password", "wrong")]),
        )
        .await;
    assert_eq!(r.status, 401);

    let r = s
        .send(s.http.post(s.url("/access/ticket")).form(&[
            ("username", "root"),
            ("realm", "pam"),
            ("password", pve_sim::DEFAULT_ROOT_PASSWORD),
        ]))
        .await;
    let d = r.data();
    assert_shape("POST /access/ticket", &d);
    assert_eq!(d["username"], "root@pam");
    let ticket = d["ticket"].as_str().unwrap().to_string();
    let csrf = d["CSRFPreventionToken"].as_str().unwrap().to_string();
    assert!(ticket.starts_with("PVE:root@pam:"));
    let cookie = format!("PVEAuthCookie={}", crate::common::enc(&ticket));

    let r = s
        .send(s.http.get(s.url("/nodes")).header("Cookie", &cookie))
        .await;
    assert_eq!(r.status, 200);

    let clone = || {
        s.http
            .post(s.url("/nodes/pve1/qemu/9000/clone"))
            .header("Cookie", &cookie)
            .form(&[("newid", "100")])
    };
    let r = s.send(clone()).await;
    assert_eq!(r.status, 401, "a write without CSRFPreventionToken");
    let r = s.send(clone().header("CSRFPreventionToken", "bogus")).await;
    assert_eq!(r.status, 401);
    let r = s.send(clone().header("CSRFPreventionToken", &csrf)).await;
    let upid = r.data();
    assert!(
        upid.as_str().unwrap().ends_with(":qmclone:9000:root@pam:"),
        "{upid}"
    );

    let r = s
        .send(
            s.http
                .get(s.url("/nodes"))
                .header("Cookie", "PVEAuthCookie=PVE:root@pam:0::forged"),
        )
        .await;
    assert_eq!(r.status, 401);
    assert_eq!(r.text, "");
    assert_ne!(upid, Value::Null);
}
