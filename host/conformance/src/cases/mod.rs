//! The cases, in the order they run. Later cases build on what earlier ones left in
//! the kit (the main object, its provider-id); a case whose ground is missing skips and
//! says why.
mod contract;
mod failures;
mod lifecycle;

use super::Options;
use super::fixtures;
use super::kit::Kit;
use super::report::{Report, Verdict};

/// One line per case: what it shows.
pub const CASES: &[(&str, &str)] = &[
    (
        "identity",
        "identity.info names the plugin, its API and one kind per role it serves",
    ),
    (
        "schemas",
        "every kind's spec schema makes a structural CRD; printer columns are well-formed",
    ),
    (
        "conversion-round-trip",
        "every kind of several API versions converts the given specs to each other version and back unchanged",
    ),
    (
        "describe-template",
        "describe-template answers for the spec given",
    ),
    (
        "cluster-reconcile",
        "cluster.reconcile becomes ready and repeats give the same endpoint",
    ),
    (
        "describe-before-create",
        "describe of an object never created reports nothing there, without error",
    ),
    (
        "create-converges",
        "create driven to ready, then repeated N times, gives one resource (one provider-id)",
    ),
    (
        "describe-during-create",
        "describe between create calls answers without error or foreign drift",
    ),
    (
        "describe-after-ready",
        "describe after ready reports ready, the same provider-id and no drift",
    ),
    (
        "address-requests",
        "addresses are asked for only by a plugin that declares ip-pools",
    ),
    (
        "adoption-after-ready",
        "create with the state lost after ready adopts the resource",
    ),
    (
        "adoption-mid-way",
        "create with the state lost mid-way adopts instead of duplicating",
    ),
    (
        "foreign-facts",
        "an object naming another's provider-id, granted nothing, gets nothing and no fact of the other",
    ),
    (
        "delete-repeated",
        "delete confirms the resource gone, and N more deletes confirm it again",
    ),
    (
        "describe-after-delete",
        "describe after delete reports the resource missing",
    ),
    (
        "delete-never-existed",
        "delete of an object never created succeeds",
    ),
    (
        "invalid-spec-missing-required",
        "a spec without a required property gives invalid-spec naming it",
    ),
    (
        "invalid-spec-wrong-type",
        "a property of the wrong type gives invalid-spec naming it",
    ),
    (
        "transient-unreachable",
        "an endpoint refusing connections gives a transient error",
    ),
    (
        "transient-5xx",
        "an endpoint answering 503 gives a transient error",
    ),
    (
        "call-deadline",
        "against an endpoint that never answers, a call ends within its deadline",
    ),
    (
        "no-leaks",
        "everything the suite created is gone at the end",
    ),
    ("cluster-delete", "cluster.delete completes, and again"),
];

fn about(name: &str) -> &'static str {
    CASES
        .iter()
        .find(|(n, _)| *n == name)
        .map(|(_, a)| *a)
        .expect("every case is listed")
}

/// Run a case unless `--skip` names it.
async fn case(
    report: &mut Report,
    opts: &Options,
    name: &'static str,
    run: impl Future<Output = Verdict>,
) -> Verdict {
    if opts.skip.iter().any(|s| s == name) {
        let reason = "skipped by --skip".to_string();
        report.skip(name, about(name), reason.clone());
        return Verdict::Skip(reason);
    }
    report.run(name, about(name), run).await
}

pub async fn run_all(kit: &mut Kit, opts: &Options, report: &mut Report) -> anyhow::Result<()> {
    let (spec, creds) = (kit.spec.clone(), kit.creds.clone());
    kit.new_machine("main", &spec, &creds);

    contract_cases(kit, opts, report).await;
    lifecycle_cases(kit, opts, report).await;
    failure_cases(kit, opts, report).await?;
    case(report, opts, "no-leaks", lifecycle::no_leaks(kit)).await;
    case(
        report,
        opts,
        "cluster-delete",
        contract::cluster_delete(kit),
    )
    .await;
    Ok(())
}

/// What the plugin declares and its cluster calls, before any machine.
async fn contract_cases(kit: &mut Kit, opts: &Options, report: &mut Report) {
    case(report, opts, "identity", contract::identity(kit)).await;
    case(report, opts, "schemas", contract::schemas(kit)).await;
    case(
        report,
        opts,
        "conversion-round-trip",
        contract::conversion_round_trip(kit),
    )
    .await;
    case(
        report,
        opts,
        "describe-template",
        contract::describe_template(kit),
    )
    .await;
    case(
        report,
        opts,
        "cluster-reconcile",
        contract::cluster_reconcile(kit),
    )
    .await;
}

/// A machine's life: describe, create, adopt, delete, in that order.
async fn lifecycle_cases(kit: &mut Kit, opts: &Options, report: &mut Report) {
    case(
        report,
        opts,
        "describe-before-create",
        lifecycle::describe_before(kit),
    )
    .await;
    case(
        report,
        opts,
        "create-converges",
        lifecycle::create_converges(kit),
    )
    .await;
    case(
        report,
        opts,
        "describe-during-create",
        lifecycle::describe_during(kit),
    )
    .await;
    case(
        report,
        opts,
        "describe-after-ready",
        lifecycle::describe_after_ready(kit),
    )
    .await;
    case(
        report,
        opts,
        "address-requests",
        lifecycle::address_requests(kit),
    )
    .await;
    case(
        report,
        opts,
        "adoption-after-ready",
        lifecycle::adoption_after_ready(kit),
    )
    .await;
    case(
        report,
        opts,
        "adoption-mid-way",
        lifecycle::adoption_mid_way(kit),
    )
    .await;
    case(report, opts, "foreign-facts", lifecycle::foreign_facts(kit)).await;
    case(
        report,
        opts,
        "delete-repeated",
        lifecycle::delete_repeated(kit),
    )
    .await;
    case(
        report,
        opts,
        "describe-after-delete",
        lifecycle::describe_after_delete(kit),
    )
    .await;
    case(
        report,
        opts,
        "delete-never-existed",
        lifecycle::delete_never_existed(kit),
    )
    .await;
}

/// Invalid specs, then an endpoint that fails (the fixtures live for these cases only).
async fn failure_cases(kit: &mut Kit, opts: &Options, report: &mut Report) -> anyhow::Result<()> {
    case(
        report,
        opts,
        "invalid-spec-missing-required",
        failures::invalid_spec(kit, failures::Breakage::MissingRequired),
    )
    .await;
    case(
        report,
        opts,
        "invalid-spec-wrong-type",
        failures::invalid_spec(kit, failures::Breakage::WrongType),
    )
    .await;
    let fixtures = fixtures::start(&kit.creds).await?;
    case(
        report,
        opts,
        "transient-unreachable",
        failures::transient(kit, "unreachable", &fixtures.closed),
    )
    .await;
    case(
        report,
        opts,
        "transient-5xx",
        failures::transient(kit, "5xx", &fixtures.unavailable),
    )
    .await;
    case(
        report,
        opts,
        "call-deadline",
        failures::deadline(kit, opts, &fixtures.black_hole),
    )
    .await;
    drop(fixtures);
    Ok(())
}

/// Delete every object on the target that is not confirmed gone; returns what failed.
pub async fn cleanup(kit: &mut Kit) -> Vec<String> {
    let keys: Vec<String> = kit
        .machines
        .iter()
        .filter(|(k, m)| !kit.is_probe(k) && !m.deleted)
        .map(|(k, _)| k.clone())
        .collect();
    let mut left = Vec::new();
    for key in keys {
        if let Err(e) = kit.drive_delete(&key).await {
            left.push(format!("{}: {e}", kit.machine(&key).req.machine.name));
        }
    }
    left
}

/// Skip reason for cases that need the main object ready.
fn needs_main(kit: &Kit) -> Option<Verdict> {
    kit.main
        .is_none()
        .then(|| Verdict::Skip("create-converges did not reach ready; nothing to check".into()))
}
