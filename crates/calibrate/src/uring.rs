//! The closed loop over a file or block device: io_uring, O_DIRECT where the filesystem
//! allows it, interrupt-driven or polled completion.
//!
//! Each point keeps `QD` requests of one size in flight at uniformly random aligned offsets over
//! the span (reads with probability `read_pct` %, writes otherwise, from one seeded stream), for
//! `measure / 5` unmeasured then `measure` measured; a request's latency runs from its push into
//! the submission ring to its completion being reaped, so it includes `io_uring_enter` and, for
//! interrupts, the wake-up. With [`Completion::Polled`] the ring is set up with
//! `IORING_SETUP_IOPOLL`: the kernel spins on the device's poll queue instead of sleeping until
//! the interrupt, which the spec's "interrupt vs polled" curves compare. Polling needs O_DIRECT
//! and a block driver with poll queues (NVMe with `poll_queues` > 0); elsewhere (a file on a
//! filesystem, this VM's virtio disk) the setup or the first read fails with EOPNOTSUPP, which
//! `calibrate` reports.
//!
//! A missing file is created and filled (reads then hit allocated blocks); `--precondition`
//! fills any target sequentially, 1 MiB at a time, then `fdatasync`, so a drive starts with
//! its volatile cache flushed. A block device is opened `O_EXCL` (see `target.rs`).
//!
//! What it leaves out: registered buffers and files, SQPOLL, several rings (one submitting
//! thread is one core's view of the device).

use std::os::unix::fs::OpenOptionsExt;
use std::os::unix::io::AsRawFd;
use std::path::Path;
use std::time::{Duration, Instant};

use crate::curves::{curve_point, CurvePoint};
use crate::sweep::{Completion, Polling, Prober};
use crate::sys::{AlignedBuf, SlotRing};
use anyhow::{anyhow, bail, Context};
use engine::LatencyHistogram;

/// An io_uring closed loop over a file or block device.
pub struct UringProber {
    file: std::fs::File,
    pub span_bytes: u64,
    pub direct: bool,
    measure: Duration,
    rng: engine::SimRng,
}

impl UringProber {
    pub fn open(
        path: &Path,
        size_bytes: u64,
        block_device: bool,
        fill: bool,
        measure: Duration,
    ) -> anyhow::Result<UringProber> {
        let open = |direct: bool| {
            let mut o = std::fs::OpenOptions::new();
            o.read(true).write(true).create(!block_device);
            // A block device is held exclusively for the whole run (nothing can mount it
            // meanwhile; EBUSY if something claimed it since the target was checked).
            let exclusive = if block_device { libc::O_EXCL } else { 0 };
            o.custom_flags(exclusive | if direct { libc::O_DIRECT } else { 0 });
            o.open(path)
        };
        let (file, direct) = match open(true) {
            Ok(f) => (f, true),
            Err(e) if e.raw_os_error() == Some(libc::EINVAL) => (
                open(false).with_context(|| format!("opening {}", path.display()))?,
                false,
            ),
            Err(e) if e.raw_os_error() == Some(libc::EBUSY) => bail!(
                "{}: EBUSY on the exclusive open: something claimed the device since it was \
                 checked (mounted, a swap, device-mapper/md); refusing",
                path.display()
            ),
            Err(e) => return Err(e).with_context(|| format!("opening {}", path.display())),
        };
        let len = if block_device {
            let mut f = &file;
            std::io::Seek::seek(&mut f, std::io::SeekFrom::End(0))?
        } else {
            file.metadata()?.len()
        };
        let mut span_bytes = if block_device {
            len.min(size_bytes)
        } else {
            size_bytes
        };
        span_bytes -= span_bytes % (128 << 10);
        if span_bytes == 0 {
            bail!(
                "{}: {len} bytes is too small to calibrate (at least 128 KiB)",
                path.display()
            );
        }
        if !block_device && len < span_bytes {
            file.set_len(span_bytes)
                .with_context(|| format!("sizing {} to {span_bytes} bytes", path.display()))?;
        }
        let p = UringProber {
            file,
            span_bytes,
            direct,
            measure,
            rng: engine::stream(1, "calibrate-real"),
        };
        if fill || (!block_device && len < span_bytes) {
            p.fill()?;
        }
        Ok(p)
    }

    /// Writes the whole span once, 1 MiB at a time (so reads hit allocated blocks).
    fn fill(&self) -> anyhow::Result<()> {
        use std::os::unix::fs::FileExt;
        let chunk = 1 << 20;
        let mut buf = AlignedBuf::new(chunk);
        let data = buf.as_mut_slice();
        for (i, b) in data.iter_mut().enumerate() {
            *b = (i as u8) ^ 0x5a;
        }
        let mut off = 0;
        while off < self.span_bytes {
            let n = chunk.min((self.span_bytes - off) as usize);
            self.file
                .write_all_at(&data[..n], off)
                .with_context(|| format!("filling the target at byte {off}"))?;
            off += n as u64;
        }
        self.file.sync_data().context("fdatasync after filling")?;
        Ok(())
    }

    /// One closed-loop point: `qd` requests of `size_bytes` in flight, completions reaped by
    /// interrupt or by polling (IORING_SETUP_IOPOLL, which needs O_DIRECT and a driver with
    /// poll queues; the ring setup or the first I/O fails otherwise).
    pub fn run(
        &mut self,
        read_pct: u8,
        size_bytes: u64,
        qd: u32,
        completion: Completion,
    ) -> anyhow::Result<CurvePoint> {
        let mut builder = io_uring::IoUring::builder();
        if completion == Completion::Polled {
            builder.setup_iopoll();
        }
        let ring = builder
            .build(qd.next_power_of_two().max(4))
            .context("io_uring setup")?;
        // The buffers are freed at the end once every entry completed; leaked if `run` returns
        // while entries may still be in flight (the kernel could still write into them).
        let mut ring = SlotRing::new(ring, qd as usize, size_bytes as usize);
        let slots = self.span_bytes / size_bytes;
        let fd = io_uring::types::Fd(self.file.as_raw_fd());
        let mut meta: Vec<(Instant, bool)> = vec![(Instant::now(), true); qd as usize];
        let (mut reads, mut writes) = (LatencyHistogram::new(), LatencyHistogram::new());
        let settle = self.measure / 5;
        let start = Instant::now();
        let measure_from = start + settle;
        let end = measure_from + self.measure;
        let push = |ring: &mut SlotRing,
                    rng: &mut engine::SimRng,
                    i: u32|
         -> anyhow::Result<(Instant, bool)> {
            let read = engine::rng::chance(rng, u64::from(read_pct), 100);
            let off = engine::rng::below(rng, slots) * size_bytes;
            ring.push(i as usize, fd, off, read)?;
            Ok((Instant::now(), read))
        };
        for i in 0..qd {
            meta[i as usize] = push(&mut ring, &mut self.rng, i)?;
        }
        let mut live = qd;
        let mut failed: Option<anyhow::Error> = None;
        while live > 0 {
            match ring.submit_and_wait(1) {
                Ok(_) => {}
                Err(e) if e.raw_os_error() == Some(libc::EINTR) => continue,
                Err(e) => return Err(e).context("io_uring_enter"),
            }
            let done = ring.reap();
            let now = Instant::now();
            for (slot, res) in done {
                let i = slot as u32;
                if res < 0 && failed.is_none() {
                    let err = std::io::Error::from_raw_os_error(-res);
                    failed = Some(anyhow!("I/O failed: {err}"));
                }
                let (at, read) = meta[i as usize];
                if res >= 0 && at >= measure_from && at < end {
                    let h = if read { &mut reads } else { &mut writes };
                    h.record(now.duration_since(at).as_nanos() as u64);
                }
                // After a failure the others are reaped, not replaced.
                if now < end && failed.is_none() {
                    match push(&mut ring, &mut self.rng, i) {
                        Ok(m) => meta[i as usize] = m,
                        Err(e) => {
                            failed = Some(e);
                            live -= 1;
                        }
                    }
                } else {
                    live -= 1;
                }
            }
        }
        drop(ring);
        if let Some(e) = failed {
            return Err(e);
        }
        Ok(curve_point(
            read_pct,
            size_bytes,
            qd,
            self.measure.as_nanos() as u64,
            &reads,
            &writes,
        ))
    }
}

impl Prober for UringProber {
    fn sweep(
        &mut self,
        read_pct: u8,
        size_bytes: u64,
        qds: &[u32],
        completion: Completion,
    ) -> anyhow::Result<Vec<CurvePoint>> {
        qds.iter()
            .map(|&qd| self.run(read_pct, size_bytes, qd, completion))
            .collect()
    }

    fn polling(&mut self) -> Polling {
        match self.run(100, 4096, 1, Completion::Polled) {
            Ok(_) => Polling::Available,
            Err(e) => Polling::Unavailable(format!("{e:#}")),
        }
    }
}
