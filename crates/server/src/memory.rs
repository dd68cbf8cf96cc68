//! The server-wide memory ledger: bytes all connections hold, against `limits.max_memory_bytes`.
//!
//! # What it implements
//! Every byte a client makes the server hold is charged to its connection until it is gone:
//! a request's payload buffer from decode to completion, every queued reply (headers, error
//! replies, handshake output, read payloads) until the socket took it, and the connection's
//! input buffer and TLS buffers ([`crate::tls`]). A connection over `limits.max_inflight_bytes` is not read; when the sum over
//! all connections is over `limits.max_memory_bytes`, no connection is read until replies
//! drain. A client that sends 32 MiB READs and never reads the replies thus holds at most its
//! limit plus one request, then TCP flow control stops it.
//!
//! # Design
//! Workers publish each connection's charge as a delta to one atomic ([`MemoryLedger::adjust`])
//! when the connection's state changed in a step — one `fetch_add` per busy connection per
//! step, not per byte. A request still at the backend when its connection closes stays charged
//! until the backend gives its buffer back (its buffer is still memory). Worked example: the
//! default limit on this 24 GiB machine is 6 GiB; 40 clients each holding their 128 MiB
//! per-connection limit would need 5 GiB and are all served; 60 would stop at 6 GiB and be
//! read again as their replies drain.
//!
//! # What it leaves out
//! The buffer pools' idle buffers (bounded per worker by `buf::POOL_KEEP_BYTES_PER_CLASS`),
//! the backends' own memory (a memory volume's data), and OpenSSL's per-session state inside a
//! TLS connection (its record buffers, about one 16 KiB record each way; the buffers around
//! it, [`crate::tls::TlsConn::held_bytes`], are charged).

use std::sync::atomic::{AtomicU64, Ordering};

/// Charged bytes against a limit, shared by all workers.
#[derive(Debug)]
pub struct MemoryLedger {
    charged_bytes: AtomicU64,
    peak_bytes: AtomicU64,
    limit_bytes: u64,
}

impl MemoryLedger {
    pub fn new(limit_bytes: u64) -> MemoryLedger {
        MemoryLedger {
            charged_bytes: AtomicU64::new(0),
            peak_bytes: AtomicU64::new(0),
            limit_bytes,
        }
    }

    /// Moves a charge from `before` to `after` bytes.
    pub fn adjust(&self, before: u64, after: u64) {
        if after > before {
            let now = self
                .charged_bytes
                .fetch_add(after - before, Ordering::Relaxed)
                + (after - before);
            self.peak_bytes.fetch_max(now, Ordering::Relaxed);
        } else if before > after {
            let old = self
                .charged_bytes
                .fetch_sub(before - after, Ordering::Relaxed);
            assert!(
                old >= before - after,
                "memory ledger underflow: releasing {} of {old} bytes",
                before - after
            );
        }
    }

    /// Whether new requests must wait (the charge reached the limit).
    pub fn over_limit(&self) -> bool {
        self.charged_bytes.load(Ordering::Relaxed) >= self.limit_bytes
    }

    pub fn charged_bytes(&self) -> u64 {
        self.charged_bytes.load(Ordering::Relaxed)
    }

    /// The highest charge seen since start.
    pub fn peak_bytes(&self) -> u64 {
        self.peak_bytes.load(Ordering::Relaxed)
    }

    pub fn limit_bytes(&self) -> u64 {
        self.limit_bytes
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn charges_peaks_and_limits() {
        let m = MemoryLedger::new(100);
        m.adjust(0, 60);
        m.adjust(0, 30);
        assert!(!m.over_limit());
        m.adjust(30, 50);
        assert!(m.over_limit());
        m.adjust(60, 0);
        assert_eq!((m.charged_bytes(), m.peak_bytes()), (50, 110));
        assert!(!m.over_limit());
    }

    #[test]
    #[should_panic(expected = "underflow")]
    fn releasing_more_than_charged_is_a_bug() {
        let m = MemoryLedger::new(100);
        m.adjust(0, 10);
        m.adjust(20, 0);
    }
}
