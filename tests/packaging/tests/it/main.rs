//! The packaging tests, one binary: each module was a test file of its own, and its
//! tests keep their names (`cargo test -p packaging --test it clusterctl_`).
mod clusterctl_generate_provider_accepts_the_release_folder;
mod every_capmox_flavor_is_accepted_as_is_by_the_api_server;
mod every_flavor_generated_from_capmox_env_is_accepted_as_is_by_the_api_server;
mod metadata_yaml_maps_the_release_series_to_contract_v1beta2;
mod the_provider_components_are_accepted_as_is_by_the_api_server;
