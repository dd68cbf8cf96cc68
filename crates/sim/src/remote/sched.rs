//! One simulated dataplane thread's share of the QoS scheduler, or its FIFO stand-in.
//!
//! The same `qos::Scheduler` the real server's workers run (`server::sched::SchedShare` wraps
//! it the same way): requests are enqueued with their token cost, and every loop iteration a
//! round at the simulated time releases what may go to the device. With the scheduler off,
//! requests are released in arrival order in the iteration that read them — the baseline the
//! `reflex` study compares against. `remote::tests` feeds one request sequence to this and to
//! the server's adapter and checks they release the same ids in the same rounds.

use std::collections::VecDeque;

/// Whether the token scheduler runs (`[sim] scheduler = "on" | "off"`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum SchedulerMode {
    On,
    Off,
}

/// A tenant's flow as attached to one thread.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Flow {
    Tokens(qos::LocalTenant),
    Fifo,
}

/// A thread's scheduler.
pub enum ThreadSched {
    Tokens(Box<qos::Scheduler>),
    Fifo(VecDeque<qos::RequestId>),
}

impl ThreadSched {
    pub fn new(
        mode: SchedulerMode,
        shared: qos::SharedBucket,
        tuning: qos::SchedulerConfig,
    ) -> Result<ThreadSched, qos::ConfigError> {
        Ok(match mode {
            SchedulerMode::On => {
                ThreadSched::Tokens(Box::new(qos::Scheduler::new(shared, tuning)?))
            }
            SchedulerMode::Off => ThreadSched::Fifo(VecDeque::new()),
        })
    }

    pub fn attach(&mut self, handle: &qos::TenantHandle) -> Flow {
        match self {
            ThreadSched::Tokens(s) => Flow::Tokens(s.attach(handle)),
            ThreadSched::Fifo(_) => Flow::Fifo,
        }
    }

    /// The price of a request as the scheduler charges it: the `qos` scheduler's price under
    /// the device's current load mix (a read costs less when every tenant is read-only), as
    /// the server's adapter asks it; with the scheduler off nothing is charged, and the price
    /// reported for the tenant's tokens/s is the mixed-load one of `cost`.
    pub fn cost_mtok(&self, op: qos::Op, len_bytes: u64, cost: &qos::CostModel) -> u64 {
        match self {
            ThreadSched::Tokens(s) => s.cost_mtok(op, len_bytes),
            ThreadSched::Fifo(_) => cost.request_cost_mtok(op, len_bytes, qos::LoadMix::Mixed),
        }
    }

    /// Queues a request of `cost_mtok` (its token price; ignored in FIFO mode).
    pub fn enqueue(&mut self, flow: Flow, cost_mtok: u64, id: qos::RequestId) {
        match (self, flow) {
            (ThreadSched::Tokens(s), Flow::Tokens(t)) => {
                if let Err(e) = s.enqueue(t, cost_mtok, id) {
                    panic!("simulated enqueue on an unattached flow: {e}");
                }
            }
            (ThreadSched::Fifo(q), Flow::Fifo) => q.push_back(id),
            _ => unreachable!("a flow of the other scheduler mode"),
        }
    }

    /// One round at `now_ns`: appends released ids to `out`.
    pub fn round(&mut self, now_ns: u64, out: &mut Vec<qos::RequestId>) {
        match self {
            ThreadSched::Tokens(s) => {
                s.round(now_ns, out);
            }
            ThreadSched::Fifo(q) => out.extend(q.drain(..)),
        }
    }

    /// Requests held back, waiting for tokens.
    pub fn queued(&self) -> u64 {
        match self {
            ThreadSched::Tokens(s) => s.queued(),
            ThreadSched::Fifo(q) => q.len() as u64,
        }
    }
}
