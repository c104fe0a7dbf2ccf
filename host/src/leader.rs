//! Leader election on a `coordination.k8s.io/v1` Lease, so that of several replicas
//! only one reconciles. The holder renews every third of the lease; a replica that
//! cannot renew before the lease runs out exits, and a standby takes over.
use std::time::Duration;

use k8s_openapi::api::coordination::v1::{Lease, LeaseSpec};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::MicroTime;
use k8s_openapi::jiff::Timestamp;
use kube::api::{Api, ObjectMeta, PostParams};

pub struct Elector {
    api: Api<Lease>,
    name: String,
    identity: String,
    duration: Duration,
}

impl Elector {
    pub fn new(
        client: kube::Client,
        namespace: &str,
        name: &str,
        identity: &str,
        duration: Duration,
    ) -> Elector {
        Elector {
            api: Api::namespaced(client, namespace),
            name: name.to_string(),
            identity: identity.to_string(),
            duration,
        }
    }

    /// Wait until this replica holds the lease.
    pub async fn acquire(&self) -> Result<(), kube::Error> {
        let mut announced = false;
        loop {
            if self.try_acquire().await? {
                tracing::info!(lease = %self.name, identity = %self.identity, "became leader");
                return Ok(());
            }
            if !announced {
                tracing::info!(lease = %self.name, "another replica leads; waiting");
                announced = true;
            }
            tokio::time::sleep(self.duration / 3).await;
        }
    }

    /// Renew forever; return (so the caller can exit) once the lease is lost.
    pub async fn keep(&self) {
        let mut last_renewal = tokio::time::Instant::now();
        loop {
            tokio::time::sleep(self.duration / 3).await;
            match self.try_acquire().await {
                Ok(true) => last_renewal = tokio::time::Instant::now(),
                Ok(false) => {
                    tracing::error!(lease = %self.name, "leadership lost to another replica");
                    return;
                }
                Err(e) if last_renewal.elapsed() < self.duration => {
                    tracing::warn!(lease = %self.name, error = %e, "cannot renew the lease; retrying");
                }
                Err(e) => {
                    tracing::error!(lease = %self.name, error = %e, "lease expired without renewal");
                    return;
                }
            }
        }
    }

    /// Take or renew the lease if it is free, ours, or expired.
    async fn try_acquire(&self) -> Result<bool, kube::Error> {
        let now = Timestamp::now();
        let seconds = self.duration.as_secs().max(1) as i32;
        let Some(mut lease) = self.api.get_opt(&self.name).await? else {
            let lease = Lease {
                metadata: ObjectMeta {
                    name: Some(self.name.clone()),
                    ..Default::default()
                },
                spec: Some(LeaseSpec {
                    holder_identity: Some(self.identity.clone()),
                    lease_duration_seconds: Some(seconds),
                    acquire_time: Some(MicroTime(now)),
                    renew_time: Some(MicroTime(now)),
                    lease_transitions: Some(0),
                    ..Default::default()
                }),
            };
            return match self.api.create(&PostParams::default(), &lease).await {
                Ok(_) => Ok(true),
                Err(kube::Error::Api(e)) if e.code == 409 => Ok(false),
                Err(e) => Err(e),
            };
        };
        let spec = lease.spec.get_or_insert_with(Default::default);
        let ours = spec.holder_identity.as_deref() == Some(&self.identity);
        let expired = match (&spec.renew_time, spec.lease_duration_seconds) {
            (Some(MicroTime(renewed)), Some(d)) => {
                renewed.as_second() + i64::from(d) < now.as_second()
            }
            _ => true,
        };
        if !ours && !expired && spec.holder_identity.is_some() {
            return Ok(false);
        }
        if !ours {
            spec.acquire_time = Some(MicroTime(now));
            spec.lease_transitions = Some(spec.lease_transitions.unwrap_or(0) + 1);
            spec.holder_identity = Some(self.identity.clone());
        }
        spec.renew_time = Some(MicroTime(now));
        spec.lease_duration_seconds = Some(seconds);
        // `replace` carries the resourceVersion we read: a concurrent taker makes it a
        // conflict, and we lose the round.
        match self
            .api
            .replace(&self.name, &PostParams::default(), &lease)
            .await
        {
            Ok(_) => Ok(true),
            Err(kube::Error::Api(e)) if e.code == 409 => Ok(false),
            Err(e) => Err(e),
        }
    }
}
