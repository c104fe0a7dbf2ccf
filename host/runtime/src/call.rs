//! One call of a plugin, whichever export: a slot (fair by tenant, or an offline
//! one), a fresh store and instance with the limits armed, the call's egress gate and
//! services, then what stopped it told apart (`failure`) and its result checked.
use std::sync::{Arc, Mutex};
use std::time::Duration;

use tokio::sync::Semaphore;
use wasmtime::{Store, UpdateDeadline};

use crate::bindings::types::{Credentials, ObjectRef};
use crate::egress::{self, Egress};
use crate::engine::OFFLINE_WALL_PER_CPU;
use crate::error::CallError;
use crate::exports::Instance;
use crate::failure;
use crate::meter::{CallMeter, Metered, Stop};
use crate::plugin::{Plugin, Subject};
use crate::reservations;
use crate::state::{CallLog, CallState, Grants, Services};

impl Plugin {
    /// One call with nothing granted (see [`Plugin::invoke_granted`]).
    pub(crate) async fn invoke<R: serde::Serialize>(
        &self,
        call: &'static str,
        credentials: &[&Credentials],
        subject: Subject<'_>,
        f: impl AsyncFnOnce(&mut Store<CallState>, &Instance) -> wasmtime::Result<R>,
    ) -> Result<R, CallError> {
        self.invoke_granted(call, credentials, subject, Grants::default(), f)
            .await
    }

    /// One call: a fresh store and instance, the limits armed, the result checked.
    pub(crate) async fn invoke_granted<R: serde::Serialize>(
        &self,
        call: &'static str,
        credentials: &[&Credentials],
        subject: Subject<'_>,
        grants: Grants,
        f: impl AsyncFnOnce(&mut Store<CallState>, &Instance) -> wasmtime::Result<R>,
    ) -> Result<R, CallError> {
        let inner = &self.runtime.inner;
        let limits = &inner.limits;
        let plugin = self.name.to_string();
        // A call given no credentials reaches nothing outside its sandbox: it only
        // computes, in a slot of its own, within a wall-clock limit of a few times its
        // CPU budget (it has nothing to wait for but the CPU, which other work shares),
        // so it cannot hold an offline slot for long.
        let offline = credentials.is_empty();
        let timeout_ms = if offline {
            limits
                .timeout_ms
                .min(limits.cpu_ms.saturating_mul(OFFLINE_WALL_PER_CPU))
        } else {
            limits.timeout_ms
        };
        // Held until the call's store is dropped, at the end of this function. A call
        // with credentials waits its tenant's turn (`slots`): its object's namespace,
        // else its endpoint.
        let (_fair, _offline) = if offline {
            let permit = inner.offline_slots.clone().acquire_owned().await;
            (
                None,
                Some(permit.expect("the slot semaphore is never closed")),
            )
        } else {
            let tenant = match &subject {
                Subject::Owner(o) | Subject::Named(o) => o.namespace.as_str(),
                Subject::None => credentials.first().map_or("", |c| c.endpoint.as_str()),
            };
            match inner.slots.acquire(tenant).await {
                Ok(slot) => (Some(slot), None),
                Err(refused) => {
                    return Err(CallError::TenantAtShare {
                        plugin,
                        call,
                        tenant: tenant.to_string(),
                        held: refused.held,
                        share: refused.share,
                    });
                }
            }
        };
        let meter = CallMeter::new(limits.cpu());
        let egress = self.egress_for(credentials, &meter)?;
        let denied = egress.denied.clone();
        let mut store = self.store(call, subject, grants, offline, egress, &meter);
        let run = async {
            // Marked, so a failure here is told from the call's by type (`failure`).
            let instance = self
                .pre
                .instantiate(&mut store)
                .await
                .map_err(failure::instantiating)?;
            f(&mut store, &instance).await
        };
        let outcome =
            tokio::time::timeout(Duration::from_millis(timeout_ms), Metered::call(run, meter))
                .await;
        let result = self.result(call, outcome, timeout_ms, &store)?;
        let refused = denied.lock().expect("denied list").clone();
        if !refused.is_empty() {
            tracing::warn!(plugin = %self.name, call, refused = ?refused, "plugin tried to reach hosts outside its endpoint");
        }
        Ok(result)
    }

    /// The call's store: its state (the egress gate, the log, the services on behalf
    /// of its object) with the memory, transfer and CPU limits armed.
    fn store(
        &self,
        call: &'static str,
        subject: Subject<'_>,
        grants: Grants,
        offline: bool,
        egress: Egress,
        meter: &Arc<CallMeter>,
    ) -> Store<CallState> {
        let inner = &self.runtime.inner;
        let limits = &inner.limits;
        let (named, owner) = match subject {
            Subject::None => (None, None),
            Subject::Owner(o) => (Some(o), Some(o)),
            Subject::Named(o) => (Some(o), None),
        };
        let log = CallLog {
            plugin: self.name.clone(),
            call,
            object: named.map(object_name).unwrap_or_default(),
            remaining: limits.log_lines,
            bytes_left: limits.log_bytes(),
            bytes_limit: limits.log_bytes(),
            lines: None,
        };
        let blobs = self.runtime.blobs();
        // Every transfer out of the sandbox (an import's arguments, the result) is
        // copied within this budget, so aliased strings cannot make the host allocate
        // more than the plugin could legitimately send.
        let transfer = limits.output_bytes().max(blobs.max_blob_bytes()) + TRANSFER_SLACK;
        let services = Services {
            plugin: self.name.clone(),
            subject: owner.cloned(),
            blobs,
            claims: self.runtime.claims(),
            claims_per_object: limits.claims_per_object,
            claim_calls_left: limits.claim_calls,
            claim_calls: limits.claim_calls,
            reservations: inner.reservations.clone(),
            reservation_calls_left: reservations::MAX_CALLS_PER_CALL,
            offline,
            grants,
        };
        let state = CallState::new(
            limits,
            egress,
            log,
            services,
            meter.clone(),
            self.memory.clone(),
        );
        let mut store = Store::new(&inner.engine, state);
        store.limiter(|state| &mut state.limiter);
        store.set_hostcall_fuel(transfer);
        store.set_epoch_deadline(1);
        store.epoch_deadline_callback(move |ctx| {
            // Give the tokio worker back every tick: a busy plugin never starves others.
            failure::at_epoch(&ctx.data().meter).map(|()| UpdateDeadline::Yield(1))
        });
        store
    }

    /// What the call came to: its result, within the output limit, or what stopped it.
    fn result<R: serde::Serialize>(
        &self,
        call: &'static str,
        outcome: Result<Result<wasmtime::Result<R>, Stop>, tokio::time::error::Elapsed>,
        timeout_ms: u64,
        store: &Store<CallState>,
    ) -> Result<R, CallError> {
        let limits = &self.runtime.inner.limits;
        let plugin = self.name.to_string();
        let result = match outcome {
            Err(_) => {
                return Err(CallError::Timeout {
                    plugin,
                    call,
                    limit_ms: timeout_ms,
                });
            }
            Ok(Err(Stop::Cpu)) => {
                return Err(CallError::CpuBudget {
                    plugin,
                    call,
                    limit_ms: limits.cpu_ms,
                });
            }
            Ok(Err(Stop::Breach(breach))) => {
                return Err(CallError::Limit {
                    plugin,
                    call,
                    breach,
                });
            }
            Ok(Ok(Err(e))) => {
                return Err(failure::classify(&self.name, limits, call, e, store));
            }
            Ok(Ok(Ok(r))) => r,
        };
        if let Err(size) = failure::json_size_within(&result, limits.output_bytes()) {
            return Err(CallError::OutputTooLarge {
                plugin,
                call,
                size,
                limit: limits.output_bytes(),
            });
        }
        Ok(result)
    }

    fn egress_for(
        &self,
        credentials: &[&Credentials],
        meter: &Arc<CallMeter>,
    ) -> Result<Egress, CallError> {
        let inner = &self.runtime.inner;
        let limits = &inner.limits;
        let allowed = credentials
            .iter()
            .map(|c| {
                inner
                    .endpoints
                    .endpoint(c)
                    .map_err(|message| CallError::Credentials {
                        plugin: self.name.to_string(),
                        message,
                    })
            })
            .collect::<Result<Vec<_>, _>>()?;
        Ok(Egress {
            allowed,
            max_body: limits.http_body_bytes(),
            request_bodies: egress::RequestBodies::new(
                limits.request_body_bytes(),
                self.request_bodies.clone(),
            ),
            in_flight: Arc::new(Semaphore::new(limits.http_in_flight as usize)),
            in_flight_limit: limits.http_in_flight,
            plugin_in_flight: self.in_flight.clone(),
            denials_left: limits.egress_denials,
            denials_limit: limits.egress_denials,
            denied: Arc::new(Mutex::new(Vec::new())),
            observer: inner.observer.clone(),
            plugin: self.name.clone(),
            meter: meter.clone(),
        })
    }
}

/// Room in a transfer for what comes with the largest blob or result (a blob's name,
/// a result's other fields).
const TRANSFER_SLACK: usize = 64 << 10;

fn object_name(r: &ObjectRef) -> String {
    format!("{}/{}", r.namespace, r.name)
}
