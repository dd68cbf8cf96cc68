//! The server's clock: monotonic nanoseconds shared by every thread.
//!
//! # What it implements
//! One time line for the whole process: [`now_ns`] counts nanoseconds since its first call, so
//! every worker's scheduler share, the shared token bucket, the emulated device model and the
//! latency measurements agree on what "now" is. Integers, as everywhere in this workspace
//! (STYLE §3): a `u64` of nanoseconds lasts 584 years.
//!
//! # Design
//! `Instant` (CLOCK_MONOTONIC) read through the vDSO: ~20–30 ns a call, no syscall. Worked
//! example: a worker reads the clock once at the start of a step (its `now`), and again when a
//! request completes, so a memory-backed read that finishes within the step it was decoded in
//! still gets a true, non-zero latency.
//!
//! # What it leaves out
//! A fake clock: the sans-I/O cores (the `qos` scheduler, the emulated device) take time as an
//! argument and are tested with their own; `backend::emulated` accepts any `fn() -> u64`.

use std::sync::OnceLock;
use std::time::Instant;

/// Nanoseconds since the first call in this process (monotonic, shared by all threads).
pub fn now_ns() -> u64 {
    static EPOCH: OnceLock<Instant> = OnceLock::new();
    EPOCH.get_or_init(Instant::now).elapsed().as_nanos() as u64
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn never_goes_backwards() {
        let mut last = now_ns();
        for _ in 0..10_000 {
            let t = now_ns();
            assert!(t >= last, "{t} < {last}");
            last = t;
        }
    }
}
