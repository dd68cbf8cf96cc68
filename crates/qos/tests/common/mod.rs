//! A deterministic test driver for the scheduler: tenants with synthetic loads, workers with
//! their own schedulers, a simulated clock advanced round by round. It stands in for the
//! server's dataplane loop (or the simulator): everything the scheduler releases counts as
//! submitted to the device at that instant.

#![allow(dead_code)]

use std::collections::VecDeque;

use qos::{
    DeviceProfile, LocalTenant, Op, Registry, RegistryConfig, RequestId, Scheduler,
    SchedulerConfig, TenantHandle, TenantSpec,
};

/// splitmix64: a tiny seeded generator for test loads (one stream per tenant).
#[derive(Clone, Debug)]
pub struct Rng(u64);

impl Rng {
    pub fn new(seed: u64) -> Self {
        Rng(seed)
    }
    pub fn next_u64(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    }
    /// Uniform in 0..n.
    pub fn below(&mut self, n: u64) -> u64 {
        self.next_u64() % n
    }
    /// An exponentially distributed gap with the given mean, ns (at least 1).
    pub fn exp_ns(&mut self, mean_ns: f64) -> u64 {
        // 53 random bits, uniform in (0, 1].
        let u = ((self.next_u64() >> 11) + 1) as f64 / (1u64 << 53) as f64;
        ((-u.ln() * mean_ns) as u64).max(1)
    }
}

/// What a tenant issues.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum Load {
    /// Open loop: evenly spaced arrivals at `iops`.
    Open { iops: u64, read_pct: u8, bytes: u64 },
    /// Keeps `depth` requests queued at all times.
    Flood {
        depth: u32,
        read_pct: u8,
        bytes: u64,
    },
    /// `count` requests at once every `every_ns`.
    Burst {
        every_ns: u64,
        count: u32,
        read_pct: u8,
        bytes: u64,
    },
    /// Open loop with Poisson arrivals at mean rate `iops`, each a read with probability
    /// `read_pct` % (like `ullstack bench`'s open loop).
    Poisson { iops: u64, read_pct: u8, bytes: u64 },
    /// Nothing.
    Idle,
}

#[derive(Debug)]
pub struct Driven {
    pub handle: TenantHandle,
    /// (worker, local key) for each worker this tenant is attached to.
    pub attachments: Vec<(usize, LocalTenant)>,
    pub load: Load,
    rng: Rng,
    arrivals: u64,
    /// Arrival times of outstanding requests (and whether each is a read), by sequence number.
    pending: VecDeque<(u64, u64, bool)>,
    /// Poisson loads: the next arrival time, ns.
    next_arrival_ns: u64,
    /// Waits of the reads released since the last reset, ns (arrival to release).
    pub read_waits_ns: Vec<u64>,
    pub submitted: u64,
    pub submitted_mtok: u64,
    pub max_wait_ns: u64,
    pub total_wait_ns: u128,
    next_seq: u64,
    outstanding: u64,
}

impl Driven {
    /// Requests enqueued and not yet released.
    pub fn outstanding(&self) -> u64 {
        self.outstanding
    }
}

pub struct Harness {
    pub registry: Registry,
    pub workers: Vec<Scheduler>,
    pub tenants: Vec<Driven>,
    pub now_ns: u64,
    pub round_ns: u64,
    start_ns: u64,
    out: Vec<RequestId>,
    costs: std::collections::HashMap<u64, u64>,
}

const SEQ_BITS: u32 = 40;

impl Harness {
    /// A harness on the published configuration: no LC surge and no LC borrowing from the
    /// bucket (whatever `config` says), so LC tenants spend exactly what their reservations
    /// earn and the arithmetic of the behavioural tests is the published one (`tests/surge.rs`
    /// runs the default configuration through [`Self::with_registry`]).
    pub fn new(workers: usize, round_ns: u64, config: SchedulerConfig) -> Self {
        let published = RegistryConfig {
            lc_surge_pct: 0,
            ..RegistryConfig::default()
        };
        let config = SchedulerConfig {
            lc_borrows_spare: false,
            ..config
        };
        Self::with_registry(workers, round_ns, config, published)
    }

    pub fn with_registry(
        workers: usize,
        round_ns: u64,
        config: SchedulerConfig,
        registry_config: RegistryConfig,
    ) -> Self {
        Self::with_profile(
            DeviceProfile::reflex_a(),
            workers,
            round_ns,
            config,
            registry_config,
        )
    }

    /// As [`Self::with_registry`], on another device profile.
    pub fn with_profile(
        profile: DeviceProfile,
        workers: usize,
        round_ns: u64,
        config: SchedulerConfig,
        registry_config: RegistryConfig,
    ) -> Self {
        let registry = Registry::new(profile, registry_config);
        let workers = (0..workers)
            .map(|_| Scheduler::new(registry.shared(), config).expect("valid config"))
            .collect();
        Harness {
            registry,
            workers,
            tenants: Vec::new(),
            now_ns: 1_000_000,
            round_ns,
            start_ns: 1_000_000,
            out: Vec::new(),
            costs: std::collections::HashMap::new(),
        }
    }

    /// Registers a tenant and attaches it to the given workers. Panics on refusal (tests that
    /// expect refusals call the registry directly).
    pub fn add(&mut self, spec: TenantSpec, load: Load, on_workers: &[usize]) -> usize {
        let handle = self.registry.register(spec).expect("admitted");
        let attachments = on_workers
            .iter()
            .map(|&w| (w, self.workers[w].attach(&handle)))
            .collect();
        let idx = self.tenants.len();
        self.tenants.push(Driven {
            handle,
            attachments,
            load,
            rng: Rng::new(0x5eed_0000 + idx as u64),
            arrivals: 0,
            pending: VecDeque::new(),
            next_arrival_ns: 0,
            read_waits_ns: Vec::new(),
            submitted: 0,
            submitted_mtok: 0,
            max_wait_ns: 0,
            total_wait_ns: 0,
            next_seq: 0,
            outstanding: 0,
        });
        idx
    }

    pub fn elapsed_ns(&self) -> u64 {
        self.now_ns - self.start_ns
    }

    fn enqueue_one(&mut self, t: usize, read_pct: u8, bytes: u64) {
        // Exactly read_pct % reads, evenly spread (request k is a read iff the running count of
        // reads steps up at k), so a tenant's token demand has no random excursions.
        let k = self.tenants[t].next_seq;
        let r = u64::from(read_pct);
        let op = if (k + 1) * r / 100 > k * r / 100 {
            Op::Read
        } else {
            Op::Write
        };
        let now = self.now_ns;
        self.enqueue_op(t, op, bytes, now);
    }

    /// Queues one request of `op` that arrived at `arrived_ns` (≤ now).
    fn enqueue_op(&mut self, t: usize, op: Op, bytes: u64, arrived_ns: u64) {
        let tenant = &mut self.tenants[t];
        // Spread over the tenant's workers round-robin.
        let (w, local) = tenant.attachments[(tenant.next_seq as usize) % tenant.attachments.len()];
        let seq = tenant.next_seq;
        tenant.next_seq += 1;
        tenant.outstanding += 1;
        tenant
            .pending
            .push_back((seq, arrived_ns, matches!(op, Op::Read)));
        let id = ((t as u64) << SEQ_BITS) | seq;
        let cost = self.workers[w].cost_mtok(op, bytes);
        self.costs.insert(id, cost);
        self.workers[w]
            .enqueue(local, cost, RequestId(id))
            .expect("attached");
    }

    fn generate(&mut self) {
        let now = self.now_ns;
        let elapsed = now - self.start_ns;
        for t in 0..self.tenants.len() {
            match self.tenants[t].load {
                Load::Open {
                    iops,
                    read_pct,
                    bytes,
                } => {
                    // Arrival k at start + k × 1e9 / iops.
                    let due = u64::try_from(u128::from(elapsed) * u128::from(iops) / 1_000_000_000)
                        .unwrap()
                        + 1;
                    while self.tenants[t].arrivals < due {
                        self.tenants[t].arrivals += 1;
                        self.enqueue_one(t, read_pct, bytes);
                    }
                }
                Load::Flood {
                    depth,
                    read_pct,
                    bytes,
                } => {
                    while self.tenants[t].outstanding < u64::from(depth) {
                        self.enqueue_one(t, read_pct, bytes);
                    }
                }
                Load::Burst {
                    every_ns,
                    count,
                    read_pct,
                    bytes,
                } => {
                    let due = elapsed / every_ns + 1;
                    while self.tenants[t].arrivals < due {
                        self.tenants[t].arrivals += 1;
                        for _ in 0..count {
                            self.enqueue_one(t, read_pct, bytes);
                        }
                    }
                }
                Load::Poisson {
                    iops,
                    read_pct,
                    bytes,
                } => {
                    let mean_ns = 1e9 / iops as f64;
                    if self.tenants[t].next_arrival_ns == 0 {
                        let gap = self.tenants[t].rng.exp_ns(mean_ns);
                        self.tenants[t].next_arrival_ns = now + gap;
                    }
                    while self.tenants[t].next_arrival_ns <= now {
                        let at = self.tenants[t].next_arrival_ns;
                        let tenant = &mut self.tenants[t];
                        let op = if tenant.rng.below(100) < u64::from(read_pct) {
                            Op::Read
                        } else {
                            Op::Write
                        };
                        tenant.next_arrival_ns = at + tenant.rng.exp_ns(mean_ns);
                        tenant.arrivals += 1;
                        self.enqueue_op(t, op, bytes, at);
                    }
                }
                Load::Idle => {}
            }
        }
    }

    /// One round on every worker at the current time, then the clock advances.
    pub fn step(&mut self) {
        self.generate();
        for w in 0..self.workers.len() {
            self.out.clear();
            let mut out = std::mem::take(&mut self.out);
            self.workers[w].round(self.now_ns, &mut out);
            for id in &out {
                let t = (id.0 >> SEQ_BITS) as usize;
                let seq = id.0 & ((1 << SEQ_BITS) - 1);
                let cost = self
                    .costs
                    .remove(&id.0)
                    .expect("released once, and only what was queued");
                let tenant = &mut self.tenants[t];
                let pos = tenant
                    .pending
                    .iter()
                    .position(|&(s, _, _)| s == seq)
                    .expect("pending");
                let (_, at, is_read) = tenant.pending.remove(pos).expect("pending");
                let wait = self.now_ns - at;
                if is_read {
                    tenant.read_waits_ns.push(wait);
                }
                tenant.max_wait_ns = tenant.max_wait_ns.max(wait);
                tenant.total_wait_ns += u128::from(wait);
                tenant.submitted += 1;
                tenant.submitted_mtok += cost;
                tenant.outstanding -= 1;
            }
            self.out = out;
        }
        self.now_ns += self.round_ns;
    }

    pub fn run_for(&mut self, duration_ns: u64) {
        let end = self.now_ns + duration_ns;
        while self.now_ns < end {
            self.step();
        }
    }

    /// Resets per-tenant measurements (after a warm-up).
    pub fn reset_measurements(&mut self) {
        for t in &mut self.tenants {
            t.submitted = 0;
            t.submitted_mtok = 0;
            t.max_wait_ns = 0;
            t.total_wait_ns = 0;
            t.read_waits_ns.clear();
        }
    }

    /// The p95 of a tenant's read waits since the last reset (arrival to release), ns.
    pub fn read_wait_p95_ns(&self, t: usize) -> u64 {
        let mut w = self.tenants[t].read_waits_ns.clone();
        assert!(!w.is_empty(), "tenant {t} released no reads");
        w.sort_unstable();
        w[(w.len() * 95).div_ceil(100) - 1]
    }

    /// A tenant's submitted tokens per second over `window_ns`.
    pub fn tokens_per_sec(&self, t: usize, window_ns: u64) -> f64 {
        self.tenants[t].submitted_mtok as f64 / 1000.0 / (window_ns as f64 / 1e9)
    }

    pub fn iops(&self, t: usize, window_ns: u64) -> f64 {
        self.tenants[t].submitted as f64 / (window_ns as f64 / 1e9)
    }
}

/// The surge tests' tenants and loads (`tests/surge.rs`, `examples/surge_sweep.rs`): an LC
/// tenant of 4 KiB requests at 90 % reads with a 500 µs p95 target, and its loads.
pub mod surge {
    use super::Load;
    use qos::{LcSlo, TenantSpec};

    /// One scheduling round, ns.
    pub const ROUND_NS: u64 = 10_000;
    pub const MS: u64 = 1_000_000;

    /// An LC tenant reserving `iops`.
    pub fn lc(iops: u64) -> TenantSpec {
        TenantSpec::LatencyCritical(LcSlo {
            p95_read_latency_ns: 500_000,
            iops,
            read_pct: 90,
            request_bytes: 4096,
        })
    }

    /// Poisson arrivals at a mean of `iops`.
    pub fn poisson(iops: u64) -> Load {
        Load::Poisson {
            iops,
            read_pct: 90,
            bytes: 4096,
        }
    }

    /// A best-effort flood: 32 requests queued at all times.
    pub fn flood() -> Load {
        Load::Flood {
            depth: 32,
            read_pct: 90,
            bytes: 4096,
        }
    }
}
