//! Applications: what online services and offline jobs do on the host's cores. (Their
//! descriptions and per-process state are in `process`; fio jobs and trace replay in `fio`.)
//!
//! ## What it models
//! - **Online service** (latency-critical in the studies): a client sends requests at
//!   `requests_per_sec` (Poisson or fixed interval). A request costs the client
//!   `app.client_send_ns`, crosses the network (`app.net_one_way_ns`), wakes the service's
//!   server thread which receives it (`net_recv_ns`) and hands it to an idle worker thread
//!   (`handoff_ns`, waking the worker) or queues it: the listener's queue (`rx`) and the
//!   worker pool's (`work`) are FIFO, so past the pool's capacity requests wait there, and the
//!   response time turns up at the service's knee. The worker executes
//!   `instructions_per_request` instructions and, every `instructions_per_io` of them on average
//!   (the profile's I/O rate; `process`'s essay), one I/O shaped by the profile (each I/O is
//!   synchronous: it is on the request's critical path). Then it replies (`reply_ns`) and the
//!   reply crosses the network. *Response time* is measured at the client: issue to reply
//!   received.
//! - **Offline job** (throughput): each of its threads executes instructions at the core's speed
//!   and, every `10^9 / ios_per_g_instr` instructions on average (exponential gaps by default),
//!   issues one synchronous I/O shaped by the profile (read ratio, size, sequential ratio).
//!   Metric: instructions per second over the run, and I/Os.
//!
//! Every I/O an application makes carries its process's class; buffered I/O goes through the
//! page cache (which remembers the class on dirty pages), direct I/O straight to the block layer.
//! The I/O itself is a system call (`syscall`).
//!
//! Worked example (`apache` on arm8, `zssd`, defaults): one worker (`workload::
//! ONLINE_WORKER_THREADS`); 3 M instructions per request = 1.5 ms of compute at 2 GHz
//! (calibrated to the knee at 400 requests/s, presets.md; `workload::profile`'s essay); one
//! 24 KiB direct read per 750 750 instructions → 4.0 reads per request. An unloaded request costs
//! ≈ 2 (send) + 10 (network) + 2 (recv) + 1 (hand-off) + 2.5 (worker switch) + 1500 (compute) +
//! 4 × ~30 (I/O with its system call and switches) + 2 (reply) + 10 (network) ≈ 1.65 ms
//! (measured: 1.70 ms mean at 50 requests/s). The one worker serves at most ≈ 600 requests/s;
//! with Poisson arrivals the mean response doubles near 410/s (3.1 ms at 400/s, 5.5 ms at 500,
//! 27 ms at 600: `ullstack study flashshare`'s load-latency sweep).
//!
//! ## What it leaves out
//! fsync unless asked for (`fsync_every_writes`), memory footprints of applications (the page
//! cache gets `memory − reserved`), the client machine's CPU.
//!
//! Config keys: `app.*`; per process `requests_per_sec`, `arrivals`, `threads`,
//! `instructions_per_request`, `buffering`, `io_gaps`.

use engine::IoOp;
use workload::{Buffering, Op};

use super::{Ev, Host};
use crate::cpu::Cat;
use crate::exectime::{self, RequestParts};
use crate::jitter::CostSite;
use crate::pagecache::NIL;
use crate::process::{arrival_gap_of, OnlineReq, OnlineState};
use crate::task::{Path, Role, Step, Wait};

impl Host {
    /// The thread's next application step, by its role.
    pub(super) fn app_next(&mut self, t: u32) {
        match self.threads[t as usize].role {
            Role::Server { .. } => self.server_next(t),
            Role::Worker { .. } => self.worker_next(t),
            Role::Offline => self.offline_next(t),
            Role::Fio(_) => self.fio_next(t),
            Role::Flusher => self.flusher_next(t),
            Role::Poller => self.dedcore_spin(t),
            Role::Kblockd { .. } => self.kblockd_next(t),
        }
    }

    /// `n` instructions of user code, at the core's speed.
    fn instructions_burst(&mut self, t: u32, n: u64) {
        let ns = self.cfg.instructions_ns(n);
        let p = self.threads[t as usize].proc as usize;
        self.procs[p].count_instructions(n);
        self.burst(t, ns, Cat::User, Step::App);
    }

    /// Starts the thread's next profile I/O (synchronous) and draws the gap to the one after.
    fn profile_io(&mut self, t: u32) {
        let th = &mut self.threads[t as usize];
        let gen = th
            .app
            .gen
            .as_mut()
            .expect("profile threads have a generator");
        let req = gen.next(&mut th.app.rng);
        th.app.instr_to_io = th.app.draw_gap();
        let p = th.proc as usize;
        let path = match self.procs[p].spec().buffering {
            Buffering::Direct => Path::Direct,
            Buffering::Buffered => Path::Buffered,
        };
        let op = match req.op {
            Op::Read => IoOp::Read,
            Op::Write => IoOp::Write,
        };
        let mode = self.cfg.nvme.completion;
        self.start_io(
            t,
            op,
            req.offset_bytes,
            req.len_bytes,
            path,
            mode,
            true,
            NIL,
        );
    }

    /// An offline thread computes up to its next I/O, then does it (until the run ends).
    fn offline_next(&mut self, t: u32) {
        if self.stopping() {
            return self.exit(t);
        }
        let n = self.threads[t as usize].app.instr_to_io;
        if n == 0 {
            return self.profile_io(t);
        }
        self.threads[t as usize].app.instr_to_io = 0;
        self.instructions_burst(t, n);
    }

    /// The client of online service `p` sends a request and draws the next one's time.
    pub(super) fn on_arrival(&mut self, p: u32) {
        if self.stopping() {
            return;
        }
        let now = self.now();
        let app = &self.cfg.app;
        let (send, one_way) = (app.client_send_ns, app.net_one_way_ns);
        let spec = self.procs[p as usize].spec().clone_rate();
        let OnlineState {
            reqs,
            free_reqs,
            arrival_rng,
            ..
        } = self.procs[p as usize].online();
        let rec = OnlineReq {
            sent_at: now,
            live: true,
            ..OnlineReq::default()
        };
        let req = match free_reqs.pop() {
            Some(r) => {
                reqs[r as usize] = rec;
                r
            }
            None => {
                reqs.push(rec);
                (reqs.len() - 1) as u32
            }
        };
        let gap = arrival_gap_of(spec, arrival_rng);
        self.schedule(now + send + one_way, Ev::ServerRx { proc: p, req });
        if self.within_run(now + gap) {
            self.schedule(now + gap, Ev::Arrival { proc: p });
        }
    }

    /// Request `req` reaches the server of `p`: it is queued and the server woken if idle.
    pub(super) fn on_server_rx(&mut self, p: u32, req: u32) {
        let now = self.now();
        let server = self.procs[p as usize].online().server;
        let spans = self.cpu.thread_time_now(now, server);
        let online = self.procs[p as usize].online();
        let r = &mut online.reqs[req as usize];
        r.rx_at = now;
        r.server = spans;
        online.rx.push_back(req);
        if self.threads[server as usize].wait == Wait::Rx {
            self.wake(server);
        }
    }

    /// The reply to `req` reaches the client: its response time is recorded.
    pub(super) fn on_client_rx(&mut self, p: u32, req: u32) {
        let now = self.now();
        let OnlineState {
            reqs,
            free_reqs,
            response,
            completed,
            request_time,
            ..
        } = self.procs[p as usize].online();
        let r = &mut reqs[req as usize];
        assert!(
            r.live,
            "reply to request {req} of process {p} received twice"
        );
        r.live = false;
        let latency = now - r.sent_at;
        response.record(latency);
        let mut parts = RequestParts {
            network_ns: (r.rx_at - r.sent_at) + (now - r.replied_at),
            worker_queue_ns: r.taken_at - r.handed_at,
            spans: r.server,
        };
        for (s, w) in parts.spans.iter_mut().zip(&r.worker) {
            *s += w;
        }
        request_time.add(&parts, latency);
        *completed += 1;
        free_reqs.push(req);
        self.log_response(latency);
    }

    /// The server receives its next request, or sleeps until one arrives.
    fn server_next(&mut self, t: u32) {
        let p = self.threads[t as usize].proc as usize;
        match self.procs[p].online().rx.pop_front() {
            Some(req) => {
                self.threads[t as usize].role = Role::Server { req };
                let ns = self.cfg.app.net_recv_ns + self.cfg.app.handoff_ns;
                let ns = self.cost(CostSite::Net, ns);
                self.burst(t, ns, Cat::Syscall, Step::ServerHandoff);
            }
            None => self.sleep(t, Wait::Rx, Step::App),
        }
    }

    /// The server hands the received request to an idle worker, or queues it.
    pub(super) fn server_handoff(&mut self, t: u32) {
        let Role::Server { req } = std::mem::replace(
            &mut self.threads[t as usize].role,
            Role::Server { req: NIL },
        ) else {
            unreachable!()
        };
        let p = self.threads[t as usize].proc as usize;
        let ipr = self.procs[p].spec().instructions_per_request;
        let now = self.now();
        let spans = self.cpu.thread_time_now(now, t);
        let OnlineState {
            idle_workers,
            work,
            reqs,
            ..
        } = self.procs[p].online();
        let r = &mut reqs[req as usize];
        r.handed_at = now;
        r.server = exectime::since(&spans, &r.server);
        match idle_workers.pop() {
            Some(w) => {
                self.threads[w as usize].role = Role::Worker {
                    req,
                    instr_left: ipr,
                };
                self.take_request(p, w, req);
                self.wake(w);
            }
            None => work.push_back(req),
        }
        self.server_next(t);
    }

    /// A worker computes its request up to the next I/O or to the reply; idle, it takes
    /// queued work or sleeps.
    fn worker_next(&mut self, t: u32) {
        let p = self.threads[t as usize].proc as usize;
        let Role::Worker { req, instr_left } = self.threads[t as usize].role else {
            unreachable!()
        };
        if req == NIL {
            let ipr = self.procs[p].spec().instructions_per_request;
            let OnlineState {
                idle_workers, work, ..
            } = self.procs[p].online();
            match work.pop_front() {
                Some(r) => {
                    self.threads[t as usize].role = Role::Worker {
                        req: r,
                        instr_left: ipr,
                    };
                    self.take_request(p, t, r);
                    return self.worker_next(t);
                }
                None => {
                    idle_workers.push(t);
                    return self.sleep(t, Wait::Work, Step::App);
                }
            }
        }
        if instr_left == 0 {
            let ns = self.cost(CostSite::Net, self.cfg.app.reply_ns);
            return self.burst(t, ns, Cat::Syscall, Step::Reply);
        }
        let gap = self.threads[t as usize].app.instr_to_io;
        if gap == 0 {
            return self.profile_io(t);
        }
        let n = gap.min(instr_left);
        let th = &mut self.threads[t as usize];
        th.app.instr_to_io -= n;
        th.role = Role::Worker {
            req,
            instr_left: instr_left - n,
        };
        self.instructions_burst(t, n);
    }

    /// The reply is sent: it crosses the network; the worker takes its next request.
    pub(super) fn worker_replied(&mut self, t: u32) {
        let Role::Worker { req, .. } = std::mem::replace(
            &mut self.threads[t as usize].role,
            Role::Worker {
                req: NIL,
                instr_left: 0,
            },
        ) else {
            unreachable!()
        };
        let p = self.threads[t as usize].proc;
        let now = self.now();
        let spans = self.cpu.thread_time_now(now, t);
        let r = &mut self.procs[p as usize].online().reqs[req as usize];
        r.replied_at = now;
        r.worker = exectime::since(&spans, &r.worker);
        self.schedule(
            self.now() + self.cfg.app.net_one_way_ns,
            Ev::ClientRx { proc: p, req },
        );
        self.worker_next(t);
    }

    /// Worker `w` of process `p` takes request `req` now: from here to its reply, the
    /// worker's spans are the request's (`exectime`).
    fn take_request(&mut self, p: usize, w: u32, req: u32) {
        let now = self.now();
        let spans = self.cpu.thread_time_now(now, w);
        let r = &mut self.procs[p].online().reqs[req as usize];
        r.taken_at = now;
        r.worker = spans;
    }
}
