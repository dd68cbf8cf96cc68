//! The harness's one system call wrapper (the crate's only `unsafe`).

/// CPU time of this process so far (user + system), ns; 0 if the kernel refuses.
pub fn process_cpu_ns() -> u64 {
    let mut u = std::mem::MaybeUninit::<libc::rusage>::zeroed();
    // SAFETY: getrusage writes a `rusage` into the pointer it is given; it is zero-initialised
    // and sized for it, and read only after a successful return.
    let ok = unsafe { libc::getrusage(libc::RUSAGE_SELF, u.as_mut_ptr()) } == 0;
    if !ok {
        return 0;
    }
    // SAFETY: initialised by the successful call above (and zeroed before it).
    let u = unsafe { u.assume_init() };
    let tv = |t: libc::timeval| t.tv_sec as u64 * 1_000_000_000 + t.tv_usec as u64 * 1_000;
    tv(u.ru_utime) + tv(u.ru_stime)
}

#[cfg(test)]
mod tests {
    #[test]
    fn the_process_cpu_time_grows_with_work() {
        let before = super::process_cpu_ns();
        let mut x = 0u64;
        let start = std::time::Instant::now();
        while start.elapsed() < std::time::Duration::from_millis(30) {
            x = std::hint::black_box(x.wrapping_mul(31).wrapping_add(7));
        }
        let after = super::process_cpu_ns();
        assert!(before > 0, "a running process has used some CPU");
        assert!(
            after > before,
            "30 ms of spinning adds CPU time: {before} -> {after}"
        );
    }
}
