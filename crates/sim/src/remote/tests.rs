use super::*;
use crate::net::NetConfig;
use engine::rng::{below, chance};
use engine::stream;

/// Registers the same tenants in a fresh registry: LC A (120 K reads), LC B (70 K, 80 %
/// reads), BE C and D — the published scenario 1.
fn scenario_one_registry() -> (qos::Registry, Vec<qos::TenantHandle>) {
    let mut reg = qos::Registry::new(
        qos::DeviceProfile::reflex_a(),
        qos::RegistryConfig::default(),
    );
    let lc = |iops, read_pct| {
        qos::TenantSpec::LatencyCritical(qos::LcSlo {
            p95_read_latency_ns: 500_000,
            iops,
            read_pct,
            request_bytes: 4096,
        })
    };
    let be = qos::TenantSpec::BestEffort(qos::BeSpec::default());
    let handles = [lc(120_000, 100), lc(70_000, 80), be, be]
        .into_iter()
        .map(|s| reg.register(s).expect("scenario 1 fits reflex-a"))
        .collect();
    (reg, handles)
}

/// One request sequence (random tenants, ops and sizes; rounds at random gaps) fed to the
/// server's scheduler adapter and to the simulator's: every round must release the same ids in
/// the same order. Both wrap the one `qos::Scheduler`; this checks neither adapter changes a
/// decision (pricing, attach order, round timing).
#[test]
fn the_simulator_and_the_server_make_the_same_grant_decisions() {
    let (server_reg, server_handles) = scenario_one_registry();
    let (sim_reg, sim_handles) = scenario_one_registry();
    let mut server = server::sched::SchedShare::new(
        server::config::SchedulerMode::On,
        server_reg.shared(),
        qos::SchedulerConfig::default(),
    )
    .expect("server scheduler");
    let mut sim = ThreadSched::new(
        SchedulerMode::On,
        sim_reg.shared(),
        qos::SchedulerConfig::default(),
    )
    .expect("sim scheduler");
    let server_flows: Vec<_> = server_handles.iter().map(|h| server.attach(h)).collect();
    let sim_flows: Vec<_> = sim_handles.iter().map(|h| sim.attach(h)).collect();
    let cost = qos::DeviceProfile::reflex_a().cost_model();
    let mut rng = stream(7, "grant-decisions");
    let (mut out_server, mut out_sim) = (Vec::new(), Vec::new());
    let mut now_ns = 1_000_000u64;
    let mut id = 0u64;
    let mut released = 0usize;
    for round in 0..20_000 {
        for _ in 0..below(&mut rng, 6) {
            let t = below(&mut rng, 4) as usize;
            let op = if chance(&mut rng, 3, 4) {
                qos::Op::Read
            } else {
                qos::Op::Write
            };
            let len = 4096 * (1 + below(&mut rng, 4));
            assert_eq!(
                server.cost_mtok(op, len),
                cost.request_cost_mtok(op, len, qos::LoadMix::Mixed)
            );
            assert_eq!(server.cost_mtok(op, len), sim.cost_mtok(op, len, &cost));
            let c = server.cost_mtok(op, len);
            server.enqueue(server_flows[t], c, qos::RequestId(id));
            sim.enqueue(sim_flows[t], c, qos::RequestId(id));
            id += 1;
        }
        now_ns += 1 + below(&mut rng, 20_000);
        out_server.clear();
        out_sim.clear();
        server.round(now_ns, &mut out_server);
        sim.round(now_ns, &mut out_sim);
        assert_eq!(out_server, out_sim, "round {round} at {now_ns} ns");
        assert_eq!(server.queued(), sim.queued(), "round {round}");
        released += out_sim.len();
    }
    // The sequence must exercise holding back as well as releasing.
    assert!(released > 1_000, "released {released}");
    assert!(
        sim.queued() > 0 || released < id as usize,
        "nothing was ever held back"
    );
}

/// Several dataplane threads on one device: each server worker holds a `SchedShare` on the
/// registry's shared bucket (`server::worker::Worker::new` passes it `Shared::bucket`), each
/// simulated thread a `ThreadSched` on its registry's bucket (`remote::run`). A and B are on
/// worker 0, C on worker 1, D on both (a tenant spanning workers earns and pays once, through
/// its shared ledger). One request sequence, rounds on the workers interleaved at random and
/// run only when the worker has something queued (both loops skip empty rounds): every round
/// must release the same ids on both sides and leave the shared bucket in the same state
/// (balance, deposits, takings, discards, resets).
#[test]
fn several_workers_sharing_the_bucket_make_the_same_grant_decisions() {
    const WORKERS: usize = 2;
    let (server_reg, server_handles) = scenario_one_registry();
    let (sim_reg, sim_handles) = scenario_one_registry();
    let tuning = qos::SchedulerConfig::default();
    let mut server: Vec<_> = (0..WORKERS)
        .map(|_| {
            server::sched::SchedShare::new(
                server::config::SchedulerMode::On,
                server_reg.shared(),
                tuning,
            )
            .expect("server scheduler")
        })
        .collect();
    let mut sim: Vec<_> = (0..WORKERS)
        .map(|_| ThreadSched::new(SchedulerMode::On, sim_reg.shared(), tuning).expect("sim"))
        .collect();
    // (tenant, worker) pairs a request may arrive on: D (3) on both workers.
    let placements = [(0usize, 0usize), (1, 0), (2, 1), (3, 0), (3, 1)];
    let server_flows: Vec<_> = placements
        .iter()
        .map(|&(t, w)| server[w].attach(&server_handles[t]))
        .collect();
    let sim_flows: Vec<_> = placements
        .iter()
        .map(|&(t, w)| sim[w].attach(&sim_handles[t]))
        .collect();
    let cost = qos::DeviceProfile::reflex_a().cost_model();
    let mut rng = stream(11, "grant-decisions-workers");
    let (mut out_server, mut out_sim) = (Vec::new(), Vec::new());
    let mut now_ns = 1_000_000u64;
    let mut id = 0u64;
    let mut released = [0usize; WORKERS];
    for step in 0..40_000 {
        // Alternate heavy phases (tenants over their rates: requests held back) and light ones
        // (LC tenants under their reservations: they donate, BE tenants borrow).
        let heavy = (step / 2_000) % 2 == 0;
        let arrivals = if heavy {
            below(&mut rng, 6)
        } else {
            below(&mut rng, 2)
        };
        for _ in 0..arrivals {
            let p = below(&mut rng, placements.len() as u64) as usize;
            let w = placements[p].1;
            let op = if chance(&mut rng, 3, 4) {
                qos::Op::Read
            } else {
                qos::Op::Write
            };
            let len = 4096 * (1 + below(&mut rng, 4));
            let c = server[w].cost_mtok(op, len);
            assert_eq!(c, sim[w].cost_mtok(op, len, &cost), "price, step {step}");
            server[w].enqueue(server_flows[p], c, qos::RequestId(id));
            sim[w].enqueue(sim_flows[p], c, qos::RequestId(id));
            id += 1;
        }
        now_ns += 1 + below(&mut rng, if heavy { 10_000 } else { 60_000 });
        let w = below(&mut rng, WORKERS as u64) as usize;
        assert_eq!(
            server[w].queued(),
            sim[w].queued(),
            "step {step}, worker {w}"
        );
        if sim[w].queued() == 0 {
            continue;
        }
        out_server.clear();
        out_sim.clear();
        server[w].round(now_ns, &mut out_server);
        sim[w].round(now_ns, &mut out_sim);
        assert_eq!(
            out_server, out_sim,
            "step {step}, worker {w} at {now_ns} ns"
        );
        let (a, b) = (server_reg.shared().stats(), sim_reg.shared().stats());
        assert_eq!(a, b, "shared bucket after step {step}, worker {w}");
        released[w] += out_sim.len();
    }
    // Both workers released plenty, tokens went through the shared bucket (deposited by one
    // tenant, taken by another) and it was reset, and some requests were held back.
    assert!(released.iter().all(|&r| r > 1_000), "released {released:?}");
    let bucket = sim_reg.shared().stats();
    assert!(
        bucket.taken_mtok > 0 && bucket.resets > 0,
        "the shared bucket was never used: {bucket:?}"
    );
    let total: usize = released.iter().sum();
    assert!(
        total < id as usize || sim.iter().any(|s| s.queued() > 0),
        "nothing was ever held back"
    );
}

fn qd1_reader(net: NetConfig) -> RemoteRunConfig {
    let text = r#"
duration = "20ms"
warmup = "1ms"
seed = 3
[[tenant]]
name = "r"
qd = 1
read = 100
[sim]
device = "zssd"
workers = 1
"#;
    let mut cfg = RemoteRunConfig::parse(text, "qd1.toml").expect("valid scenario");
    cfg.server.net = net;
    cfg
}

/// At QD1 nothing queues: the client-observed latency is the device's and the dataplane's time
/// plus exactly the link's propagation both ways and the two messages' wire time.
#[test]
fn the_network_adds_its_latency_and_no_more_at_qd1() {
    let free = NetConfig {
        latency_ns: 0,
        bandwidth_bytes_per_sec: 0,
        client_message_ns: 0,
        server_message_ns: 0,
    };
    let wire = NetConfig {
        latency_ns: 7_000,
        bandwidth_bytes_per_sec: 1_250_000_000,
        ..free
    };
    let base = run(&qd1_reader(free)).expect("runs");
    let with = run(&qd1_reader(wire)).expect("runs");
    let (b, w) = (&base.tenants[0], &with.tenants[0]);
    assert!(b.reads > 500, "{} reads", b.reads);
    // Request 32 B (26 ns at 1.25 GB/s, rounded up) and reply 4128 B (3303 ns), 7 µs each way.
    let added_ns = 2 * 7_000 + 26 + 3_303;
    let diff = w.read_latency_ns_mean as i64 - b.read_latency_ns_mean as i64;
    assert!(
        (diff - added_ns as i64).abs() <= 100,
        "mean {} → {} ns: added {diff} ns, expected {added_ns}",
        b.read_latency_ns_mean,
        w.read_latency_ns_mean
    );
    // Fewer reads fit in the window by the added latency, and no more than that.
    let expected_reads =
        b.reads as f64 * b.read_latency_ns_mean as f64 / (b.read_latency_ns_mean + added_ns) as f64;
    assert!(
        (w.reads as f64 - expected_reads).abs() <= expected_reads * 0.02 + 2.0,
        "{} reads, expected about {expected_reads:.0}",
        w.reads
    );
}

#[test]
fn the_same_seed_gives_the_same_run() {
    let cfg = qd1_reader(NetConfig::default());
    let a = run(&cfg).expect("runs");
    let b = run(&cfg).expect("runs");
    let strip = |s: &RemoteSummary| {
        let mut v = serde_json::to_value(s).expect("json");
        v.as_object_mut().expect("object").remove("wall_ms");
        v
    };
    assert_eq!(strip(&a), strip(&b));
}

#[test]
fn a_scenario_beyond_the_profile_is_refused_naming_the_tenant() {
    let text = r#"
[[tenant]]
name = "greedy"
class = "lc"
iops = 600000
read = 50
p95 = "500us"
"#;
    let cfg = RemoteRunConfig::parse(text, "g.toml").expect("parses");
    let err = run(&cfg).unwrap_err().to_string();
    assert!(err.contains("greedy"), "{err}");
}

#[test]
fn bad_sim_keys_are_named() {
    let err = RemoteRunConfig::parse("[[tenant]]\nname = \"a\"\n[sim]\nworkerz = 2\n", "x.toml")
        .unwrap_err()
        .to_string();
    assert!(err.contains("workerz"), "{err}");
    let err = RemoteRunConfig::parse("[[tenant]]\nname = \"a\"\n[sim]\nworkers = 0\n", "x.toml")
        .unwrap_err()
        .to_string();
    assert!(err.contains("workers = 0"), "{err}");
}
