//! A bounded load run on loopback: the simulator on ONE core (a current-thread runtime on
//! its own OS thread), clients on another runtime.
//!
//!     cargo run --release -p pve-sim --example load [-- SECONDS [CONNECTIONS [BULK_VMS]]]
//!
//! Prints clones/s through the API and requests/s for a mix of reads, and for
//! `/cluster/resources?type=vm` over thousands of VMs.

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use pve_sim::{Config, ListenOpts, Simulator, VmSet};

const TOKEN: &str = "PVEAPIToken=capmox@pve!capi=REDACTED-SIM-SECRET";

fn main() {
    let args: Vec<u64> = std::env::args()
        .skip(1)
        .filter_map(|a| a.parse().ok())
        .collect();
    let secs = *args.first().unwrap_or(&5);
    let conns = *args.get(1).unwrap_or(&32) as usize;
    let bulk = *args.get(2).unwrap_or(&3000) as u32;

    let (tx, rx) = std::sync::mpsc::channel();
    let (stop_tx, stop_rx) = tokio::sync::oneshot::channel::<()>();
    let server = std::thread::spawn(move || {
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .unwrap();
        rt.block_on(async move {
            let mut cfg = Config::fast();
            cfg.vm_sets.push(VmSet {
                count: bulk,
                first_vmid: 10_000,
                running: true,
                ..VmSet::default()
            });
            let sim = Simulator::start(
                cfg,
                ListenOpts {
                    addr: "127.0.0.1:0".into(),
                    tls: true,
                },
            )
            .await
            .unwrap();
            tx.send((sim.base_url().to_string(), sim.ca_pem().to_string()))
                .unwrap();
            let _ = stop_rx.await;
            sim.shutdown().await;
        });
    });
    let (base, ca) = rx.recv().unwrap();
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(1)
        .enable_all()
        .build()
        .unwrap();
    rt.block_on(async move {
        let http = reqwest::Client::builder()
            .add_root_certificate(reqwest::Certificate::from_pem(ca.as_bytes()).unwrap())
            .pool_max_idle_per_host(conns)
            .build()
            .unwrap();
        let api = format!("{base}/api2/json");
        println!("simulator: {base}, {bulk} bulk VMs, {conns} connections, {secs}s per phase");

        // phase 1: clones through the API
        let t = Instant::now();
        let n_clones = 500u32;
        let next = Arc::new(AtomicU64::new(0));
        let mut js = tokio::task::JoinSet::new();
        for _ in 0..conns {
            let (http, api, next) = (http.clone(), api.clone(), next.clone());
            js.spawn(async move {
                loop {
                    let i = next.fetch_add(1, Ordering::Relaxed) as u32;
                    if i >= n_clones {
                        break;
                    }
                    let r = http
                        .post(format!("{api}/nodes/pve1/qemu/9000/clone"))
                        .header("Authorization", TOKEN)
                        .form(&[("newid", (1000 + i).to_string())])
                        .send()
                        .await
                        .unwrap();
                    assert!(r.status().is_success());
                }
            });
        }
        while js.join_next().await.is_some() {}
        let el = t.elapsed().as_secs_f64();
        println!(
            "clone:        {n_clones} clones in {el:.2}s = {:.0}/s",
            n_clones as f64 / el
        );

        let run = |name: &'static str, paths: Vec<String>| {
            let (http, api) = (http.clone(), api.clone());
            async move {
                let count = Arc::new(AtomicU64::new(0));
                let deadline = Instant::now() + Duration::from_secs(secs);
                let paths = Arc::new(paths);
                let mut js = tokio::task::JoinSet::new();
                for c in 0..conns {
                    let (http, api, count, paths) =
                        (http.clone(), api.clone(), count.clone(), paths.clone());
                    js.spawn(async move {
                        let mut i = c;
                        while Instant::now() < deadline {
                            let p = &paths[i % paths.len()];
                            i += 1;
                            let r = http
                                .get(format!("{api}{p}"))
                                .header("Authorization", TOKEN)
                                .send()
                                .await
                                .unwrap();
                            assert!(r.status().is_success(), "{p}: {}", r.status());
                            let _ = r.bytes().await.unwrap();
                            count.fetch_add(1, Ordering::Relaxed);
                        }
                    });
                }
                while js.join_next().await.is_some() {}
                let n = count.load(Ordering::Relaxed);
                println!(
                    "{name:<13} {n} requests in {secs}s = {:.0} req/s",
                    n as f64 / secs as f64
                );
            }
        };
        let mut mix = vec![];
        for i in 0..200u32 {
            mix.push(format!("/nodes/pve1/qemu/{}/config", 1000 + i));
            mix.push(format!("/nodes/pve1/qemu/{}/status/current", 1000 + i));
            mix.push("/cluster/nextid".to_string());
            mix.push("/nodes/pve2/status".to_string());
        }
        run("read mix:", mix).await;
        run("resources:", vec!["/cluster/resources?type=vm".to_string()]).await;
    });
    let _ = stop_tx.send(());
    server.join().unwrap();
}
