//! kube-world's integration tests, one binary: each module was a test file of its own,
//! and its tests keep their names (`cargo test -p kube-world --test it kubeadm_`).
mod support;

mod built_tools_report_their_pinned_versions;
mod capi_core_manager_reconciles_a_cluster;
mod dropping_a_plane_leaves_no_process_behind;
mod ipam_and_cert_manager_run_as_processes;
mod kubeadm_providers_serve_their_webhooks;
mod plane_stores_capi_objects_and_collects_their_garbage;
