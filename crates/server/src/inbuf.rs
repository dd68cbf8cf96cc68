//! A connection's input buffer: bytes received and not yet decoded.
//!
//! # What it implements
//! Each connection reads from its socket into an [`InBuf`] and its protocol decoder parses
//! frames out of [`InBuf::data`], consuming them as they are handled. The decoder tells the
//! buffer how many bytes the frame in progress needs ([`InBuf::want_bytes`]), so a 32 MiB WRITE
//! gets room for its whole payload before the next read.
//!
//! # Design
//! A vector and a start offset: consuming a frame moves the offset; once everything is
//! consumed the vector is cleared (and freed if it grew past [`INPUT_KEEP_BYTES`]).
//!
//! # What it leaves out
//! Zero-copy receive: a WRITE's payload is copied once more, into its I/O buffer.

use std::io;
use std::os::fd::RawFd;

/// An idle connection's input buffer above this capacity is freed (5,000 idle connections must
/// not pin 5,000 large buffers).
pub const INPUT_KEEP_BYTES: usize = 256 * 1024;
/// Free space below which the input buffer is compacted or grown before a read.
const INPUT_MIN_READ_BYTES: usize = 16 * 1024;

/// The input buffer of a connection: bytes received, not yet decoded, from `start`.
pub struct InBuf {
    buf: Vec<u8>,
    start: usize,
    /// Bytes the decoder said the next frame needs (validated against limits by the codec).
    pub want_bytes: usize,
}

impl Default for InBuf {
    fn default() -> Self {
        Self::new()
    }
}

impl InBuf {
    pub fn new() -> InBuf {
        InBuf {
            buf: Vec::new(),
            start: 0,
            want_bytes: 0,
        }
    }

    pub fn data(&self) -> &[u8] {
        &self.buf[self.start..]
    }

    pub fn consume(&mut self, n: usize) {
        self.start += n;
        assert!(self.start <= self.buf.len(), "consumed past the input");
        if self.start >= self.buf.len() {
            self.buf.clear();
            self.start = 0;
            if self.buf.capacity() > INPUT_KEEP_BYTES {
                self.buf = Vec::new();
            }
        }
        self.want_bytes = 0;
    }

    /// Makes room for at least `INPUT_MIN_READ_BYTES` more, and for the whole frame in progress.
    fn prepare_read(&mut self) {
        let pending = self.buf.len() - self.start;
        let need_total = self.want_bytes.max(pending + INPUT_MIN_READ_BYTES);
        if self.start > 0 && self.buf.capacity() - self.start < need_total {
            self.buf.drain(..self.start);
            self.start = 0;
        }
        if self.buf.capacity() - self.start < need_total {
            self.buf.reserve(need_total - (self.buf.len() - self.start));
        }
    }

    /// Appends bytes that arrived another way (decrypted TLS records).
    pub fn extend_from_slice(&mut self, bytes: &[u8]) {
        self.buf.extend_from_slice(bytes);
    }

    /// One `read` into the spare capacity. Ok(0) = peer closed.
    pub fn read_from(&mut self, fd: RawFd) -> io::Result<usize> {
        self.prepare_read();
        crate::sys::read_spare(fd, &mut self.buf, usize::MAX)
    }
}
