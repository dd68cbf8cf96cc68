//! Property tests: random tenants, random request costs, random round timing, one or two
//! workers. Invariants checked after every round:
//! * every released request was queued, is released once, and in FIFO order per tenant/worker;
//! * each ledger balances: balance = earned − spent − donated + borrowed;
//! * LC balances stay above −(deficit limit + largest cost); BE balances never go negative;
//! * queue counters match what is outstanding; the bucket's books balance;
//! * the device is never offered more than its rate × time, plus the bounded slack of deficits;
//! * the LC surge: what LC tenants may earn (reservation + surge) plus the BE shares never
//!   exceeds the device rate, and no LC tenant earns more than its reservation plus its surge
//!   (so it spends at most that, plus what it borrowed from the bucket's spare tokens at its
//!   deficit limit, its deficit limit and one request);
//! * once arrivals stop, every queue drains (no starvation);
//! * the same inputs give the same outputs (determinism).

use std::collections::{HashMap, VecDeque};

use proptest::prelude::*;
use qos::{
    BeSpec, DeviceProfile, LcSlo, LocalTenant, RatePoint, Registry, RegistryConfig, RequestId,
    Scheduler, SchedulerConfig, TenantClass, TenantHandle, TenantSpec, DEFAULT_DEFICIT_LIMIT_MTOK,
};

#[derive(Clone, Debug)]
enum Step {
    Enqueue {
        tenant: usize,
        pick: usize,
        cost_mtok: u64,
    },
    Round {
        worker: usize,
        dt_ns: u64,
    },
    /// Detach one of a tenant's attachments (failing its queued requests) and attach again.
    Reattach {
        tenant: usize,
        pick: usize,
    },
}

fn spec_strategy() -> impl Strategy<Value = TenantSpec> {
    prop_oneof![
        (
            prop_oneof![Just(500_000u64), Just(1_000_000), Just(2_000_000)],
            1u64..40_000,
            50u8..=100
        )
            .prop_map(|(p95, iops, read_pct)| TenantSpec::LatencyCritical(LcSlo {
                p95_read_latency_ns: p95,
                iops,
                read_pct,
                request_bytes: 4096,
            })),
        Just(TenantSpec::BestEffort(BeSpec::default())),
    ]
}

fn step_strategy(tenants: usize, workers: usize) -> impl Strategy<Value = Step> {
    prop_oneof![
        3 => (0..tenants, 0..2usize, prop_oneof![Just(500u64), Just(1000), Just(10_000), 0u64..40_000])
            .prop_map(|(tenant, pick, cost_mtok)| Step::Enqueue { tenant, pick, cost_mtok }),
        2 => (0..workers, prop_oneof![Just(0u64), 1u64..2_000, 2_000u64..50_000])
            .prop_map(|(worker, dt_ns)| Step::Round { worker, dt_ns }),
        1 => (0..tenants, 0..2usize).prop_map(|(tenant, pick)| Step::Reattach { tenant, pick }),
    ]
}

struct World {
    registry: Registry,
    workers: Vec<Scheduler>,
    tenants: Vec<(TenantHandle, Vec<(usize, LocalTenant)>)>,
    /// Outstanding ids per (tenant, worker), in queue order.
    queues: HashMap<(usize, usize), VecDeque<u64>>,
    costs: HashMap<u64, (usize, usize, u64)>,
    next_id: u64,
    now_ns: u64,
    first_round_ns: Option<u64>,
    spent_mtok: u64,
    max_dt_ns: u64,
    released: Vec<RequestId>,
}

impl World {
    fn new(specs: &[TenantSpec], spans: &[bool], workers: usize) -> Self {
        let mut registry = Registry::new(DeviceProfile::reflex_a(), RegistryConfig::default());
        let mut scheds: Vec<Scheduler> = (0..workers)
            .map(|_| Scheduler::new(registry.shared(), SchedulerConfig::default()).expect("config"))
            .collect();
        let mut tenants = Vec::new();
        for (i, spec) in specs.iter().enumerate() {
            let Ok(handle) = registry.register(*spec) else {
                continue;
            };
            let on: Vec<usize> = if spans[i % spans.len()] && workers > 1 {
                (0..workers).collect()
            } else {
                vec![i % workers]
            };
            let attachments = on.iter().map(|&w| (w, scheds[w].attach(&handle))).collect();
            tenants.push((handle, attachments));
        }
        World {
            registry,
            workers: scheds,
            tenants,
            queues: HashMap::new(),
            costs: HashMap::new(),
            next_id: 0,
            now_ns: 1_000_000_000,
            first_round_ns: None,
            spent_mtok: 0,
            max_dt_ns: 0,
            released: Vec::new(),
        }
    }

    fn apply(&mut self, step: &Step) {
        match *step {
            Step::Enqueue {
                tenant,
                pick,
                cost_mtok,
            } => {
                if self.tenants.is_empty() {
                    return;
                }
                let t = tenant % self.tenants.len();
                let (w, local) = self.tenants[t].1[pick % self.tenants[t].1.len()];
                let id = self.next_id;
                self.next_id += 1;
                self.workers[w]
                    .enqueue(local, cost_mtok, RequestId(id))
                    .expect("attached");
                self.queues.entry((t, w)).or_default().push_back(id);
                self.costs.insert(id, (t, w, cost_mtok));
            }
            Step::Reattach { tenant, pick } => {
                if self.tenants.is_empty() {
                    return;
                }
                let t = tenant % self.tenants.len();
                let slot = pick % self.tenants[t].1.len();
                let (w, local) = self.tenants[t].1[slot];
                let mut unsent = Vec::new();
                let id = self.workers[w]
                    .detach(local, &mut unsent)
                    .expect("attached");
                assert_eq!(id, self.tenants[t].0.id());
                let expected: Vec<u64> = self.queues.remove(&(t, w)).unwrap_or_default().into();
                let got: Vec<u64> = unsent.iter().map(|r| r.0).collect();
                assert_eq!(got, expected, "detach returns the queued requests in order");
                for id in got {
                    self.costs.remove(&id);
                }
                let handle = self.tenants[t].0.clone();
                self.tenants[t].1[slot] = (w, self.workers[w].attach(&handle));
            }
            Step::Round { worker, dt_ns } => {
                let w = worker % self.workers.len();
                self.now_ns += dt_ns;
                self.max_dt_ns = self.max_dt_ns.max(dt_ns);
                self.first_round_ns.get_or_insert(self.now_ns);
                let mut out = Vec::new();
                self.workers[w].round(self.now_ns, &mut out);
                for id in out {
                    let (t, qw, cost) = self
                        .costs
                        .remove(&id.0)
                        .expect("released id was queued, once");
                    assert_eq!(qw, w, "released by the worker it was queued on");
                    let front = self.queues.get_mut(&(t, w)).and_then(|q| q.pop_front());
                    assert_eq!(front, Some(id.0), "FIFO per tenant and worker");
                    self.spent_mtok += cost;
                    self.released.push(id);
                }
                self.check();
            }
        }
    }

    fn check(&self) {
        for (t, (handle, _)) in self.tenants.iter().enumerate() {
            let c = handle.counters();
            let books = c.earned_mtok as i128 - c.spent_mtok as i128 - c.donated_mtok as i128
                + c.borrowed_mtok as i128;
            assert_eq!(
                books,
                i128::from(c.balance_mtok),
                "ledger of tenant {t} does not balance: {c:?}"
            );
            match handle.class() {
                TenantClass::LatencyCritical => assert!(
                    c.balance_mtok > -((DEFAULT_DEFICIT_LIMIT_MTOK + 40_000) as i64),
                    "LC tenant {t} fell through its deficit limit: {c:?}"
                ),
                TenantClass::BestEffort => {
                    assert!(c.balance_mtok >= 0, "BE tenant {t} negative: {c:?}")
                }
            }
            let outstanding: usize = (0..self.workers.len())
                .map(|w| self.queues.get(&(t, w)).map_or(0, |q| q.len()))
                .sum();
            assert_eq!(
                c.requests_queued, outstanding as u64,
                "queue counter of tenant {t}"
            );
        }
        for (w, s) in self.workers.iter().enumerate() {
            let outstanding: usize = self
                .queues
                .iter()
                .filter(|((_, qw), _)| *qw == w)
                .map(|(_, q)| q.len())
                .sum();
            assert_eq!(s.queued(), outstanding as u64, "worker {w} queue count");
        }
        // The LC surge is carved out of the unreserved rate: LC earning rates and BE shares
        // together fit the device rate.
        let cap = self.registry.capacity();
        let surge_ppm = cap.lc_surge_ppm;
        assert!(
            surge_ppm <= qos::DEFAULT_LC_SURGE_PCT * 10_000,
            "surge {surge_ppm} ppm above the configured {} %",
            qos::DEFAULT_LC_SURGE_PCT
        );
        let lc_earning: u128 = self
            .tenants
            .iter()
            .map(|(h, _)| {
                u128::from(qos::lc_earning_rate_mtok_per_sec(
                    h.reservation_mtok_per_sec(),
                    surge_ppm,
                ))
            })
            .sum();
        let be_total = u128::from(cap.be_share_mtok_per_sec) * u128::from(cap.be_tenants);
        assert!(
            lc_earning + be_total <= u128::from(cap.device_rate_mtok_per_sec),
            "LC earning {lc_earning} + BE shares {be_total} mtok/s over the device rate: {cap:?}"
        );
        // No LC tenant earns more than its reservation plus the surge over the time that
        // passed (plus one round's overlap per extra worker when it spans).
        if let Some(first) = self.first_round_ns {
            for (t, (handle, attachments)) in self.tenants.iter().enumerate() {
                if handle.class() != TenantClass::LatencyCritical {
                    continue;
                }
                let rate = u128::from(qos::lc_earning_rate_mtok_per_sec(
                    handle.reservation_mtok_per_sec(),
                    surge_ppm,
                ));
                let allowed = rate * u128::from(self.now_ns - first) / 1_000_000_000
                    + attachments.len() as u128 * rate * u128::from(self.max_dt_ns) / 1_000_000_000
                    + 1;
                let c = handle.counters();
                assert!(
                    u128::from(c.earned_mtok) <= allowed,
                    "LC tenant {t} earned {} mtok, more than reservation + surge allow ({allowed}): {c:?}",
                    c.earned_mtok
                );
                // It spends what it earns, what it legitimately borrowed from the bucket (spare
                // tokens, at its deficit limit), and at most its deficit limit and one request.
                assert!(
                    u128::from(c.spent_mtok)
                        <= allowed
                            + u128::from(c.borrowed_mtok)
                            + u128::from(DEFAULT_DEFICIT_LIMIT_MTOK + 40_000),
                    "LC tenant {t} spent {} mtok beyond its earnings, borrowings and deficit: {c:?}",
                    c.spent_mtok
                );
            }
        }
        let b = self.registry.shared().stats();
        assert_eq!(
            b.deposited_mtok - b.taken_mtok - b.discarded_mtok,
            b.balance_mtok,
            "bucket books: {b:?}"
        );
        // The device is not offered more than its rate over the time that passed, plus slack:
        // each LC tenant may be in debt by its limit and one request; the bucket carries one
        // write across resets; a tenant joining a second worker may overlap one round.
        let Some(first) = self.first_round_ns else {
            return;
        };
        let rate = u128::from(self.registry.capacity().device_rate_mtok_per_sec);
        let budget = rate * u128::from(self.now_ns - first) / 1_000_000_000;
        let n = self.tenants.len() as u128;
        let slack = n * u128::from(DEFAULT_DEFICIT_LIMIT_MTOK + 40_000)
            + 10_000
            + n * rate * u128::from(self.max_dt_ns) / 1_000_000_000
            + n * 10;
        assert!(
            u128::from(self.spent_mtok) <= budget + slack,
            "offered {} mtok in {} ns; budget {budget} + slack {slack}",
            self.spent_mtok,
            self.now_ns - first
        );
    }

    /// Runs rounds until every queued request is released, allowing each LC tenant the time
    /// its reservation needs to pay for what it queued (LC tenants spend only what they earn:
    /// a 6-IOPS tenant that queued 80 K mtok needs ~10 s), in 4,000 rounds of at least 1 ms.
    fn drain(&mut self) {
        let mut horizon_ns = 4_000_000_000u128;
        for (t, (handle, _)) in self.tenants.iter().enumerate() {
            let rate = u128::from(handle.reservation_mtok_per_sec());
            if handle.class() != TenantClass::LatencyCritical || rate == 0 {
                continue;
            }
            let queued: u128 = self
                .costs
                .values()
                .filter(|(ct, _, _)| *ct == t)
                .map(|&(_, _, c)| u128::from(c))
                .sum();
            let need = (queued + u128::from(DEFAULT_DEFICIT_LIMIT_MTOK)) * 1_000_000_000 / rate;
            horizon_ns = horizon_ns.max(need * 2);
        }
        let dt_ns = u64::try_from(horizon_ns / 4_000).unwrap_or(u64::MAX);
        for _ in 0..4_000 {
            for w in 0..self.workers.len() {
                self.apply(&Step::Round { worker: w, dt_ns });
            }
            if self.costs.is_empty() {
                return;
            }
        }
        let counters: Vec<_> = self
            .tenants
            .iter()
            .map(|(h, a)| (h.class(), a.len(), h.counters()))
            .collect();
        panic!(
            "{} requests starved: {:?}\ncapacity {:?}\nbucket {:?}\ntenants {:#?}",
            self.costs.len(),
            self.costs.values().take(5).collect::<Vec<_>>(),
            self.registry.capacity(),
            self.registry.shared().stats(),
            counters
        );
    }
}

fn scenario() -> impl Strategy<Value = (Vec<TenantSpec>, Vec<bool>, usize, Vec<Step>)> {
    (
        1usize..=2,
        proptest::collection::vec(spec_strategy(), 1..10),
        proptest::collection::vec(any::<bool>(), 1..4),
    )
        .prop_flat_map(|(workers, specs, spans)| {
            let n = specs.len();
            (
                Just(specs),
                Just(spans),
                Just(workers),
                proptest::collection::vec(step_strategy(n, workers), 1..400),
            )
        })
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(96))]

    #[test]
    fn scheduler_invariants_hold((specs, spans, workers, steps) in scenario()) {
        let mut world = World::new(&specs, &spans, workers);
        for step in &steps {
            world.apply(step);
        }
        world.drain();
    }

    #[test]
    fn same_inputs_same_outputs((specs, spans, workers, steps) in scenario()) {
        let mut a = World::new(&specs, &spans, workers);
        let mut b = World::new(&specs, &spans, workers);
        for step in &steps {
            a.apply(step);
            b.apply(step);
        }
        prop_assert_eq!(&a.released, &b.released);
    }

    #[test]
    fn interpolated_rates_stay_between_their_points(
        mut lats in proptest::collection::btree_set(1u64..10_000_000, 1..6),
        rates in proptest::collection::vec(1u64..2_000_000, 6),
        target in 0u64..12_000_000,
    ) {
        let lats: Vec<u64> = std::mem::take(&mut lats).into_iter().collect();
        let mut sorted = rates[..lats.len()].to_vec();
        sorted.sort_unstable();
        let points: Vec<RatePoint> = lats
            .iter()
            .zip(&sorted)
            .map(|(&l, &r)| RatePoint { p95_read_latency_ns: l, tokens_per_sec: r, read_only_tokens_per_sec: r * 2 })
            .collect();
        let profile = DeviceProfile::new("prop", 10_000, 500, points.clone()).expect("valid table");
        let got = profile.rate_mtok_per_sec(target, qos::LoadMix::Mixed);
        if target < lats[0] {
            prop_assert!(got.is_err());
        } else {
            let rate = got.expect("covered");
            let below = points.iter().rev().find(|p| p.p95_read_latency_ns <= target).expect("tightest");
            let above = points.iter().find(|p| p.p95_read_latency_ns >= target).unwrap_or(below);
            prop_assert!(rate >= below.tokens_per_sec * 1000 && rate <= above.tokens_per_sec * 1000);
            // Monotone: a looser target never gets less.
            let looser = profile.rate_mtok_per_sec(target + 1, qos::LoadMix::Mixed).expect("covered");
            prop_assert!(looser >= rate);
            let ro = profile.rate_mtok_per_sec(target, qos::LoadMix::ReadOnly).expect("covered");
            prop_assert!(ro >= rate, "read-only column is twice the mixed one here");
        }
    }
}

#[test]
fn spanning_tenant_alone_gets_its_reservation_once() {
    // Deterministic companion to the properties: one LC tenant on two workers, flooded on both.
    let spec = TenantSpec::LatencyCritical(LcSlo {
        p95_read_latency_ns: 500_000,
        iops: 100_000,
        read_pct: 90,
        request_bytes: 4096,
    });
    let mut world = World::new(&[spec], &[true], 2);
    assert_eq!(world.tenants[0].0.attached_workers(), 2);
    for round in 0..10_000u64 {
        for pick in 0..2 {
            for _ in 0..2 {
                world.apply(&Step::Enqueue {
                    tenant: 0,
                    pick,
                    cost_mtok: 1_000,
                });
            }
        }
        world.apply(&Step::Round {
            worker: (round % 2) as usize,
            dt_ns: 10_000,
        });
    }
    // 100 ms at 190 K tokens/s (100 K IOPS × (0.9 + 0.1 × 10)) plus the 50 % surge (the
    // device has 230 K tokens/s unreserved) = 28 500 tokens, plus 50 of debt.
    assert_eq!(world.registry.capacity().lc_surge_ppm, 500_000);
    let spent = world.spent_mtok;
    assert!(
        (28_490_000..=28_560_000).contains(&spent),
        "spent {spent} mtok"
    );
}
