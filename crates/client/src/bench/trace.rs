//! A block trace as a tenant's load: `--tenant name=db,trace=hm_1.csv[,speed=2|,qd=16]`.
//!
//! The trace (any format `workload::trace` reads, detected from its first lines unless
//! `trace_format=` names it) is streamed
//! by each of the tenant's connections: connection `i` of `n` sends the records whose index
//! is `i` mod `n`, so together they send the whole trace once. Addresses are folded onto the
//! tenant's region (`span`, else the volume) modulo its size, as every replay folds them
//! (`workload::trace::replay`). Without `qd` the load is open loop: each record is sent at its
//! trace time divided by `speed` (default 1) from the run's start, late if the connection
//! already has its cap of requests outstanding; with `qd` the records go out closed loop at
//! that depth, ignoring their times. Reads and writes and their sizes are the trace's; a
//! request larger than the tenant's `size` (default [`TRACE_MAX_REQUEST_BYTES`]) or the
//! server's maximum payload is cut to it, and a write sends exactly its own bytes. The run ends
//! when the trace does (or at its duration or I/O count, whichever comes first).
//!
//! The simulator's replay options are tenant keys: `trace_device=N` (or `MAJ:MIN`) keeps one
//! device's records, `from=10s,to=70s` a window of trace time (open-loop times then count
//! from `from`, and the replay stops at the first record at or past `to`), `skip_bad_lines=yes`
//! counts malformed lines instead of stopping; the report gives the count and the first.
//!
//! The file is read from the connection's task with ordinary blocking reads through a 256 KiB
//! buffer: one refill per few thousand requests, cheap next to the network, and it keeps the
//! load generator free of a reader thread. Without `skip_bad_lines`, a line the reader cannot
//! parse ends that connection's replay and is reported as the tenant's error
//! `trace: FILE:LINE: ...`.

use std::fs::File;
use std::io::BufReader;

use scenario::TraceLoad;
use workload::trace::{Pacing, Replay, ReplayIo, ReplayOptions, TraceOp, TraceReader};

use super::gen::OpKind;

/// Default cap on one request of a trace tenant (traces' largest are a few hundred KiB).
pub const TRACE_MAX_REQUEST_BYTES: u32 = scenario::TRACE_MAX_REQUEST_BYTES;

/// One connection's share of a trace.
pub struct TraceGen {
    replay: Replay<TraceReader<BufReader<File>>>,
    pending: Option<ReplayIo>,
    connection_index: u64,
    connections: u64,
    /// Records seen (to pick this connection's share).
    seen: u64,
    max_request_bytes: u32,
    /// Why the replay stopped early.
    pub error: Option<String>,
}

impl TraceGen {
    /// Opens `load`'s trace for connection `connection_index` of `connections`, folding onto
    /// `region_bytes`.
    pub fn open(
        load: &TraceLoad,
        region_bytes: u64,
        pacing: Pacing,
        connection_index: u32,
        connections: u32,
        max_request_bytes: u32,
    ) -> Result<TraceGen, String> {
        let reader = workload::trace::open(&load.path, load.format, load.bad_lines)
            .map_err(|e| e.to_string())?;
        let opts = ReplayOptions {
            device: load.device,
            from_ns: load.from_ns,
            to_ns: load.to_ns,
            capacity_bytes: region_bytes.max(workload::trace::SECTOR_BYTES),
            pacing,
        };
        Ok(TraceGen {
            replay: Replay::new(reader, opts),
            pending: None,
            connection_index: u64::from(connection_index),
            connections: u64::from(connections.max(1)),
            seen: 0,
            max_request_bytes: max_request_bytes.max(512),
            error: None,
        })
    }

    fn fill(&mut self) -> Option<ReplayIo> {
        while self.pending.is_none() && self.error.is_none() {
            match self.replay.next() {
                None => break,
                Some(Err(e)) => self.error = Some(format!("trace: {e}")),
                Some(Ok(io)) => {
                    let mine = self.seen % self.connections == self.connection_index;
                    self.seen += 1;
                    if mine {
                        self.pending = Some(io);
                    }
                }
            }
        }
        self.pending
    }

    /// Malformed lines skipped so far (with `skip_bad_lines=yes`), and the first one.
    pub fn skipped_lines(&self) -> (u64, Option<&str>) {
        let reader = self.replay.records();
        (reader.skipped_lines(), reader.first_skipped())
    }

    /// When the next request is due (ns from the start); `None` when the trace is done.
    pub fn peek_arrival_ns(&mut self) -> Option<u64> {
        self.fill().map(|io| io.issue_at_ns)
    }

    /// The next request: read or write, offset, length; `None` when the trace is done.
    pub fn next_op(&mut self) -> Option<(OpKind, u64, u32)> {
        self.fill()?;
        let io = self.pending.take()?;
        let kind = match io.op {
            TraceOp::Read => OpKind::Read,
            TraceOp::Write => OpKind::Write,
        };
        let len = u32::try_from(io.len_bytes)
            .unwrap_or(u32::MAX)
            .min(self.max_request_bytes);
        Some((kind, io.offset_bytes, len))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn connections_share_the_trace_and_requests_are_cut() {
        let dir = std::env::temp_dir().join(format!("ullstack-bench-trace-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let path = dir.join("t.csv");
        std::fs::write(
            &path,
            "0,R,0,4096\n1000,W,4096,8192\n2000,R,1073741824,2097152\n3000,R,0,512\n",
        )
        .unwrap();
        let pacing = Pacing::open_loop(2.0).unwrap();
        let mut a = TraceGen::open(&TraceLoad::new(&path), 1 << 30, pacing, 0, 2, 1 << 20).unwrap();
        let mut b = TraceGen::open(&TraceLoad::new(&path), 1 << 30, pacing, 1, 2, 1 << 20).unwrap();
        assert_eq!(a.peek_arrival_ns(), Some(0));
        assert_eq!(a.next_op(), Some((OpKind::Read, 0, 4096)));
        // Record 2: 1 GiB folds to 0 on a 1 GiB region; 2 MiB is cut to 1 MiB; 2000 ns / 2.
        assert_eq!(a.peek_arrival_ns(), Some(1000));
        assert_eq!(a.next_op(), Some((OpKind::Read, 0, 1 << 20)));
        assert_eq!(a.next_op(), None);
        assert_eq!(b.next_op(), Some((OpKind::Write, 4096, 8192)));
        assert_eq!(b.peek_arrival_ns(), Some(1500));
        assert_eq!(b.next_op(), Some((OpKind::Read, 0, 512)));
        assert_eq!(b.next_op(), None);
        std::fs::write(&path, "0,R,0,4096\n1,X,0,4096\n").unwrap();
        let mut c = TraceGen::open(&TraceLoad::new(&path), 1 << 30, pacing, 0, 1, 1 << 20).unwrap();
        assert!(c.next_op().is_some());
        assert_eq!(c.next_op(), None);
        assert!(c.error.as_deref().unwrap().contains("t.csv:2: op `X`"));
    }

    #[test]
    fn device_window_format_and_skipping_pick_the_records() {
        let dir =
            std::env::temp_dir().join(format!("ullstack-bench-trace-w-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let path = dir.join("t.txt");
        // MQSim lines (ns, device, sector, sectors, type 1 = read); one bad line.
        std::fs::write(
            &path,
            "0 1 0 8 1\n1000000 2 8 8 1\n2000000 1 16 8 0\n3000000 1 X 8 1\n4000000 1 24 16 1\n5000000 1 32 8 1\n",
        )
        .unwrap();
        let load = TraceLoad {
            format: Some(workload::trace::TraceFormat::Mqsim),
            device: Some(1),
            from_ns: 1_000_000,
            to_ns: Some(5_000_000),
            bad_lines: workload::trace::BadLines::Skip,
            ..TraceLoad::new(&path)
        };
        let pacing = Pacing::open_loop(1.0).unwrap();
        let mut g = TraceGen::open(&load, 1 << 30, pacing, 0, 1, 1 << 20).unwrap();
        // Device 2 and the record before `from` are dropped; times count from `from`.
        assert_eq!(g.peek_arrival_ns(), Some(1_000_000));
        assert_eq!(g.next_op(), Some((OpKind::Write, 16 * 512, 4096)));
        assert_eq!(g.peek_arrival_ns(), Some(3_000_000));
        assert_eq!(g.next_op(), Some((OpKind::Read, 24 * 512, 8192)));
        // The record at 5 ms is at `to`: the replay stops there.
        assert_eq!(g.next_op(), None);
        assert!(g.error.is_none());
        let (skipped, first) = g.skipped_lines();
        assert_eq!(skipped, 1);
        assert!(first.unwrap().contains("t.txt:4:"), "{first:?}");
        // Strict, the same bad line stops the replay with its line number.
        let strict = TraceLoad {
            bad_lines: workload::trace::BadLines::Fail,
            ..load
        };
        let mut g = TraceGen::open(&strict, 1 << 30, pacing, 0, 1, 1 << 20).unwrap();
        while g.next_op().is_some() {}
        assert!(g.error.as_deref().unwrap().contains("t.txt:4:"));
    }
}
