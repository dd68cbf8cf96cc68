//! fio jobs and trace replay: threads that only do I/O, the way fio's engines issue and reap
//! it.
//!
//! ## What it models
//! - **fio job**: each clone is a thread. Synchronous engines (psync, pvsync2 …) issue one I/O
//!   at a time (`hipri` polls); async engines (libaio, io_uring) keep `iodepth` direct I/Os in
//!   flight, each submitted by its own `io_submit` call, and reap completions with
//!   `io_getevents` (sleeping when none are ready). `rate_iops`, `thinktime`, `runtime`,
//!   `number_ios` and `time_based` keep their fio meaning; a job also stops at the end of the
//!   run. `ramp_time` is lead-in as in fio (and in device-level runs, `sim::device_run`): I/Os
//!   submitted during the ramp are not recorded, `runtime` counts from the ramp's end, the
//!   job's `size`/`number_ios` budget restarts there (fio's `reset_all_stats`), and the job's
//!   IOPS are over the time after the ramp.
//! - **Trace replay**: one thread replays a trace's records (any format `workload::trace`
//!   reads, streamed through a [`TraceSource`](crate::TraceSource): one record read ahead,
//!   never the whole trace) against the process's file, direct: `open-loop` issues each I/O at
//!   its timestamp asynchronously (latency measured to the device completion), `closed-loop`
//!   keeps `queue_depth` I/Os in flight asynchronously as an io_uring job at that `iodepth`
//!   does, `afap` one at a time as fast as possible. A record the trace cannot give (a
//!   malformed line) stops the thread, and the run fails with it at its end.
//!
//! Worked example (arm8): an io_uring job at `iodepth=4` submits four I/Os, each a
//! `syscall_ns` (1 µs) system call of its own, then sleeps in `io_getevents`; each completion
//! marks its slot done, and the thread, woken, reaps every finished slot in one `syscall_ns`
//! call and submits again. A read's latency runs from its submission to that reap (fio's view);
//! a trace replay's ends at the device completion instead.
//!
//! ## What it leaves out
//! fio's iolog trace format, buffered trace replay, fio stonewall groups inside a
//! system run (rejected with an error), polled completion for async fio engines (they use
//! interrupts), fio's batching options (the job parser rejects `iodepth_batch_*`: every
//! submission is one call).
//!
//! Config keys: the job file's options (`workload::JobSpec`).

use engine::{IoOp, SimTime};
use workload::Op;

use super::{Ev, Host, HostError};
use crate::config::CompletionMode;
use crate::cpu::Cat;
use crate::jitter::CostSite;
use crate::pagecache::NIL;
use crate::process::{FioIo, FioThread, IoSource};
use crate::task::{Path, Role, Step, Wait};

impl Host {
    /// The fio state of thread `t`.
    pub(super) fn fio(&mut self, t: u32) -> &mut FioThread {
        match &mut self.threads[t as usize].role {
            Role::Fio(f) => f,
            _ => unreachable!("not a fio thread"),
        }
    }

    /// Whether the clone may issue another I/O now (depth, job end, run end, runtime).
    fn fio_can_issue(&self, f: &FioThread) -> bool {
        if self.stopping() || f.exhausted || f.in_flight >= f.spec_depth {
            return false;
        }
        match f.runtime_ns {
            Some(r) => self.now() < f.started + f.ramp_ns + r,
            None => true,
        }
    }

    /// A clone's next step: reap finished asynchronous I/O, wait for the rate or the trace's
    /// timestamp, issue the next I/O, sleep in `io_getevents`, or exit.
    pub(super) fn fio_next(&mut self, t: u32) {
        let now = self.now();
        if self.fio(t).issued == 0 && self.fio(t).in_flight == 0 {
            self.fio(t).started = now;
            let p = self.threads[t as usize].proc as usize;
            let job = self.fio(t).job as usize;
            // Statistics start when the ramp ends (fio resets them there).
            let stats_from = now.0 + self.fio(t).ramp_ns;
            let j = &mut self.procs[p].fio_jobs()[job];
            j.first_start_ns = Some(j.first_start_ns.map_or(stats_from, |s| s.min(stats_from)));
        }
        let (asynchronous, can) = {
            let Role::Fio(f) = &self.threads[t as usize].role else {
                unreachable!()
            };
            (f.asynchronous, self.fio_can_issue(f))
        };
        if asynchronous && !self.fio(t).completed.is_empty() {
            let f = self.fio(t);
            std::mem::swap(&mut f.completed, &mut f.reaping);
            let ns = self.cost(CostSite::Syscall, self.cfg.app.syscall_ns);
            return self.burst(t, ns, Cat::Syscall, Step::FioReap);
        }
        if !can {
            if asynchronous && self.fio(t).in_flight > 0 {
                return self.sleep(t, Wait::FioEvents, Step::App);
            }
            return self.exit(t);
        }
        let f = self.fio(t);
        let allowed = match &mut f.source {
            IoSource::Trace(feed) if feed.open_loop => feed.peek().map(|r| f.started + r.at_ns),
            _ => f.rate_interval_ns.map(|i| f.started + f.issued * i),
        };
        if let Some(allowed) = allowed {
            if allowed > now {
                self.schedule(allowed, Ev::Timer { thread: t });
                return self.sleep(t, Wait::Timer, Step::App);
            }
        }
        let th = &mut self.threads[t as usize];
        let Role::Fio(f) = &mut th.role else {
            unreachable!()
        };
        if !f.ramp_over && now >= f.started + f.ramp_ns {
            f.ramp_over = true;
            if let IoSource::Job(gen) = &mut f.source {
                gen.restart_budget();
            }
        }
        let next = match &mut f.source {
            IoSource::Job(gen) => gen.next(&mut th.app.rng).map(|r| {
                let op = match r.op {
                    Op::Read => IoOp::Read,
                    Op::Write => IoOp::Write,
                };
                (op, r.offset_bytes, r.len_bytes)
            }),
            IoSource::Trace(feed) => feed.take().map(|r| (r.op, r.offset_bytes, r.bytes)),
        };
        let Some((op, offset_bytes, len_bytes)) = next else {
            f.exhausted = true;
            return self.fio_next(t);
        };
        f.issued += 1;
        f.in_flight += 1;
        let path = if f.direct {
            Path::Direct
        } else {
            Path::Buffered
        };
        let mode = match (f.polled, self.cfg.nvme.completion) {
            (false, CompletionMode::Selective) => CompletionMode::Selective,
            (false, _) => CompletionMode::Interrupt,
            (true, CompletionMode::Hybrid) => CompletionMode::Hybrid,
            (true, _) => CompletionMode::Polled,
        };
        let slot = if f.asynchronous {
            let io = FioIo {
                read: op == IoOp::Read,
                bytes: len_bytes,
                started: now,
                pending: 0,
                done_at: now,
            };
            match f.free_slots.pop() {
                Some(s) => {
                    f.slots[s as usize] = io;
                    s
                }
                None => {
                    f.slots.push(io);
                    (f.slots.len() - 1) as u32
                }
            }
        } else {
            NIL
        };
        let wait = slot == NIL;
        self.start_io(t, op, offset_bytes, len_bytes, path, mode, wait, slot);
    }

    /// The first trace thread's read error, naming its process (`finish` fails with it).
    pub(super) fn trace_error(&self) -> Option<HostError> {
        self.threads.iter().find_map(|th| match &th.role {
            Role::Fio(f) => match &f.source {
                IoSource::Trace(feed) => feed.error.as_ref().map(|reason| HostError::Trace {
                    process: self.procs[th.proc as usize].spec().name.clone(),
                    reason: reason.clone(),
                }),
                IoSource::Job(_) => None,
            },
            _ => None,
        })
    }

    /// Records one completed fio I/O of thread `t`.
    pub(super) fn fio_record(
        &mut self,
        t: u32,
        read: bool,
        bytes: u64,
        started: SimTime,
        end: SimTime,
    ) {
        let now = end;
        let p = self.threads[t as usize].proc as usize;
        let (job, ramp_end) = {
            let f = self.fio(t);
            assert!(
                f.in_flight > 0,
                "fio thread {t} completes an I/O it did not issue"
            );
            f.in_flight -= 1;
            (f.job as usize, f.started + f.ramp_ns)
        };
        let class = self.procs[p].spec().class;
        self.log_io(class, bytes, now - started);
        let proc = &mut self.procs[p];
        proc.count_io(now - started);
        let j = &mut proc.fio_jobs()[job];
        j.last_end_ns = j.last_end_ns.max(now.0);
        if started >= ramp_end {
            if read {
                j.read.record(now - started);
                j.read_bytes += bytes;
            } else {
                j.write.record(now - started);
                j.write_bytes += bytes;
            }
        }
    }

    /// The `io_getevents` call returned: record every reaped I/O and go on.
    pub(super) fn fio_reaped(&mut self, t: u32) {
        let mut reaping = std::mem::take(&mut self.fio(t).reaping);
        for &s in &reaping {
            let io = self.fio(t).slots[s as usize];
            let end = if self.fio(t).latency_at_completion {
                io.done_at
            } else {
                self.now()
            };
            self.fio_record(t, io.read, io.bytes, io.started, end);
            self.fio(t).free_slots.push(s);
        }
        reaping.clear();
        self.fio(t).reaping = reaping;
        self.fio_next(t);
    }

    /// A bio of asynchronous fio I/O `slot` completed; the I/O is done when its last bio is,
    /// and the thread, if it sleeps in `io_getevents`, wakes to reap it.
    pub(super) fn fio_bio_end(&mut self, thread: u32, slot: u32) {
        let now = self.now();
        let f = self.fio(thread);
        let io = &mut f.slots[slot as usize];
        assert!(
            io.pending > 0,
            "fio thread {thread}: slot {slot} ends more bios than it issued"
        );
        io.pending -= 1;
        io.done_at = now;
        if io.pending == 0 {
            f.completed.push(slot);
            if self.threads[thread as usize].wait == Wait::FioEvents {
                self.wake(thread);
            }
        }
    }
}
