//! The one place a machine's step reaches its status, whether the call's report
//! (`persist`) or a deletion's progress (`delete`): written now, or held to be written
//! with a later step (`coalesce` decides).
use super::super::context::MachineContext;
use super::observe::Observed;
use crate::controller::error::Result;
use crate::status::InfraMachineStatus;

/// Write `next` as the machine's status now, or hold it (`coalesce` decides); whether
/// it was written.
pub async fn write_or_hold(
    ctx: &MachineContext,
    o: &Observed,
    next: &InfraMachineStatus,
    durable: bool,
    has_events: bool,
) -> Result<bool> {
    if !ctx.coalescer.write_now(
        &o.uid,
        &o.stored,
        next,
        durable,
        has_events,
        o.obj.metadata.deletion_timestamp.is_some(),
    ) {
        return Ok(false);
    }
    ctx.writes.status(&o.own, &o.obj, next).await?;
    ctx.coalescer.written(&o.uid);
    Ok(true)
}
