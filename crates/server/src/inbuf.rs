//! A connection's input buffer: bytes received and not yet decoded, bounded.
//!
//! # What it implements
//! Each connection reads from its socket into an [`InBuf`] and its protocol decoder parses
//! frames in place out of [`InBuf::data`], consuming them as they are handled. The decoder
//! tells the buffer how many bytes the frame in progress needs ([`InBuf::want_bytes`]), so a
//! 32 MiB WRITE gets room for its whole payload.
//!
//! # Design
//! A vector and a start offset: consuming a frame only moves the offset. Two rules keep the
//! buffer bounded and its cost linear, whatever the client sends:
//!
//! * *Bounded read-ahead.* At most `max(want_bytes, INPUT_READ_AHEAD_BYTES)` undecoded bytes
//!   are held; beyond that the connection is not read ([`InBuf::has_room`] is false, the worker
//!   drops EPOLLIN) until the decoder catches up, and TCP flow control stops the client.
//! * *Compaction only when paid for.* Undecoded bytes are moved to the front only when the
//!   consumed prefix is at least as long as what is moved; otherwise the vector grows. Every
//!   byte moved is matched by a byte consumed before it, so the bytes moved over a
//!   connection's life are at most the bytes it received ([`InBuf::moved_bytes`] counts them;
//!   a test holds the server to it), and the capacity stays below twice the limit.
//!
//! Worked example: 1 M pipelined 1 KiB NBD writes (1,052 B frames). A read fills the 128 KiB
//! window with ~124 frames; a step decodes 64 (batch limit), leaving ~60 (63 KiB) behind a
//! 67 KiB consumed prefix, so the next read compacts those 63 KiB once and reads 67 KiB more.
//! The earlier code compacted the *whole* unbounded backlog before every read: in a profile
//! of it under this load (dated: the code it measured is gone), 86 % of the server's CPU was
//! that `memmove`.
//!
//! # What it leaves out
//! Zero-copy receive: a WRITE's payload is copied once more, into its I/O buffer. Under
//! multishot receives most frames never enter this buffer: they are decoded in the provided
//! buffer they arrived in ([`crate::inplace`]), and only what straddles its end comes here.

use std::io;
use std::os::fd::RawFd;

/// An idle connection's input buffer above this capacity is freed (5,000 idle connections must
/// not pin 5,000 large buffers).
pub const INPUT_KEEP_BYTES: usize = 256 * 1024;
/// Undecoded bytes a connection may hold beyond the frame in progress: enough for a full batch
/// (64) of 1 KiB writes, so pipelining clients are read in one syscall per step.
pub const INPUT_READ_AHEAD_BYTES: usize = 128 * 1024;

/// The input buffer of a connection: bytes received, not yet decoded, from `start`.
pub struct InBuf {
    buf: Vec<u8>,
    start: usize,
    /// Bytes the decoder said the next frame needs (validated against limits by the codec).
    pub want_bytes: usize,
    /// Bytes moved by compaction since the last [`InBuf::take_moved_bytes`].
    moved_bytes: u64,
    /// Bytes still to be dropped as they arrive (the payload of a refused request).
    discard_bytes: usize,
    /// Bytes consumed (decoded or discarded) over the connection's life: advances whenever a
    /// frame is done with, which is what the request deadline measures progress by.
    consumed_total_bytes: u64,
    /// The spare capacity a receive in the kernel writes into (io_uring path): while set, the
    /// vector is neither moved, reset nor grown.
    lent: Option<crate::sys::SpareLoan>,
}

impl Default for InBuf {
    fn default() -> Self {
        Self::new()
    }
}

impl Drop for InBuf {
    /// A lent vector is leaked, never freed: a receive in the kernel may still write it.
    fn drop(&mut self) {
        if self.lent.is_some() {
            std::mem::forget(std::mem::take(&mut self.buf));
        }
    }
}

impl InBuf {
    pub fn new() -> InBuf {
        InBuf {
            buf: Vec::new(),
            start: 0,
            want_bytes: 0,
            moved_bytes: 0,
            discard_bytes: 0,
            consumed_total_bytes: 0,
            lent: None,
        }
    }

    pub fn data(&self) -> &[u8] {
        &self.buf[self.start..]
    }

    /// Undecoded bytes held.
    pub fn pending_bytes(&self) -> usize {
        self.buf.len() - self.start
    }

    /// Bytes of memory the buffer holds (its capacity).
    pub fn capacity_bytes(&self) -> usize {
        self.buf.capacity()
    }

    /// The most undecoded bytes the buffer may hold now.
    fn limit_bytes(&self) -> usize {
        self.want_bytes.max(INPUT_READ_AHEAD_BYTES)
    }

    /// Whether another read is allowed (below the read-ahead limit).
    pub fn has_room(&self) -> bool {
        self.pending_bytes() < self.limit_bytes()
    }

    /// Whether a connection that stopped being read for lack of room may be read again: a
    /// quarter of the read-ahead free (so it is read in large gulps, not a frame at a time), or
    /// the frame in progress still incomplete. Without the second rule a partial frame that
    /// already fills more than three quarters of the read-ahead (most of a 124 KiB write under
    /// the 128 KiB window) could be neither decoded nor completed: the connection waited for
    /// its idle timeout (the wedge `server/tests/progress.rs` reproduces).
    pub fn below_resume_mark(&self) -> bool {
        let limit = self.limit_bytes();
        let pending = self.pending_bytes();
        pending <= limit - limit / 4 || pending < self.want_bytes
    }

    /// Bytes moved by compaction since the last call (for the worker's counter).
    pub fn take_moved_bytes(&mut self) -> u64 {
        std::mem::take(&mut self.moved_bytes)
    }

    /// Bytes consumed over the connection's life (see [`InBuf::incomplete_frame`]).
    pub fn consumed_total_bytes(&self) -> u64 {
        self.consumed_total_bytes
    }

    /// Whether the client owes the rest of a frame it started: bytes of a frame are buffered
    /// but fewer than the decoder asked for, or a refused request's payload is still being
    /// dropped. Whole frames the server has not decoded yet (a connection at its in-flight
    /// limit) are not owed by the client and do not count.
    pub fn incomplete_frame(&self) -> bool {
        let pending = self.pending_bytes();
        self.discard_bytes > 0 || (pending > 0 && pending < self.want_bytes)
    }

    /// Bytes a discard still drops as they arrive.
    pub fn discard_owed_bytes(&self) -> usize {
        self.discard_bytes
    }

    /// Counts `n` bytes decoded where they were received, never held here
    /// ([`crate::inplace`]): progress for the request deadline as if consumed here.
    pub fn note_consumed_in_place(&mut self, n: usize) {
        self.consumed_total_bytes += n as u64;
    }

    pub fn consume(&mut self, n: usize) {
        self.consumed_total_bytes += n as u64;
        self.start += n;
        assert!(self.start <= self.buf.len(), "consumed past the input");
        self.reset_if_empty();
        self.want_bytes = 0;
    }

    /// With nothing undecoded and nothing lent, starts the vector over (and frees a large one).
    fn reset_if_empty(&mut self) {
        if self.start == self.buf.len() && self.lent.is_none() {
            self.buf.clear();
            self.start = 0;
            if self.buf.capacity() > INPUT_KEEP_BYTES {
                self.buf = Vec::new();
            }
        }
    }

    /// Drops the next `n` bytes: those buffered now, and the rest as they arrive.
    pub fn discard(&mut self, n: usize) {
        let now = n.min(self.pending_bytes());
        self.consume(now);
        self.discard_bytes = n - now;
    }

    /// Makes room for up to the limit; returns how many bytes the next read may take.
    fn prepare_read(&mut self) -> usize {
        assert!(self.lent.is_none(), "input buffer resized while lent");
        let pending = self.pending_bytes();
        let room = self.limit_bytes().saturating_sub(pending);
        if room == 0 || self.buf.capacity() - self.buf.len() >= room {
            return room;
        }
        self.compact_if_paid();
        if self.buf.capacity() - self.buf.len() < room {
            self.buf.reserve_exact(room);
            assert!(
                self.buf.capacity() <= self.start + 2 * self.limit_bytes(),
                "input buffer grown to {} bytes for a limit of {}",
                self.buf.capacity(),
                self.limit_bytes()
            );
        }
        room
    }

    /// Moves the undecoded bytes to the front when that is paid for: fewer bytes moved than the
    /// consumed prefix they move over.
    fn compact_if_paid(&mut self) {
        let pending = self.pending_bytes();
        if self.start > 0 && self.start >= pending {
            if self.buf.capacity() > 2 * self.limit_bytes() + INPUT_KEEP_BYTES {
                // Left over from a large frame: shrink back to the limit.
                let mut fresh = Vec::with_capacity(self.limit_bytes());
                fresh.extend_from_slice(&self.buf[self.start..]);
                self.buf = fresh;
            } else {
                self.buf.copy_within(self.start.., 0);
                self.buf.truncate(pending);
            }
            self.moved_bytes += pending as u64;
            self.start = 0;
        }
    }

    /// Drops what is still owed to [`InBuf::discard`] from what just arrived.
    fn apply_discard(&mut self) {
        if self.discard_bytes > 0 {
            let drop_now = self.discard_bytes.min(self.pending_bytes());
            self.discard_bytes -= drop_now;
            let want = self.want_bytes;
            self.consume(drop_now);
            self.want_bytes = want;
        }
    }

    /// Appends bytes that arrived another way (decrypted TLS records, a multishot receive's
    /// provided buffer) under the same rules as a read: compaction when paid for, discards
    /// honoured. A multishot receive is cancelled when the connection stops wanting input, so
    /// past the limit it appends at most what one ring enter received. The TLS path reads
    /// only while [`InBuf::has_room`], one socket read of at most 16 KiB at a time, so the buffer stays
    /// within the limit plus what one read completes: those 16 KiB and the partial record
    /// OpenSSL held from the read before.
    /// Room is reserved as for a read (up to the limit at once), so a 32 MiB frame arriving in
    /// 16 KiB records grows the buffer to its size, not to the next power of two.
    pub fn extend_from_slice(&mut self, bytes: &[u8]) {
        assert!(self.lent.is_none(), "input buffer appended to while lent");
        if self.buf.capacity() - self.buf.len() < bytes.len() {
            self.compact_if_paid();
            if self.buf.capacity() - self.buf.len() < bytes.len() {
                let room = self.limit_bytes().saturating_sub(self.pending_bytes());
                self.buf.reserve_exact(room.max(bytes.len()));
            }
        }
        self.buf.extend_from_slice(bytes);
        self.apply_discard();
    }

    /// Lends the room left (made as for a read) to a receive the caller submits to the kernel:
    /// returns where it may write and how much. Until [`InBuf::end_recv`] the buffer keeps its
    /// allocation and layout (consuming only moves the start). Call only with
    /// [`InBuf::has_room`] and no receive outstanding.
    pub fn begin_recv(&mut self) -> crate::sys::SpareLoan {
        let room = self.prepare_read();
        assert!(room > 0, "receive into a full input buffer");
        let loan = crate::sys::lend_spare(&mut self.buf, room);
        self.lent = Some(loan);
        loan
    }

    /// The receive lent the room by [`InBuf::begin_recv`] completed with `received` bytes
    /// (0 when it failed or was cancelled): they join the input.
    pub fn end_recv(&mut self, received: usize) {
        let loan = self.lent.take().expect("no receive outstanding");
        crate::sys::take_lent(&mut self.buf, loan, received);
        self.apply_discard();
        self.reset_if_empty();
    }

    /// Whether a receive holds the buffer's spare room.
    pub fn is_lent(&self) -> bool {
        self.lent.is_some()
    }

    /// One `read` of at most the room left. Ok(0) = peer closed; call only with
    /// [`InBuf::has_room`].
    pub fn read_from(&mut self, fd: RawFd) -> io::Result<usize> {
        let room = self.prepare_read();
        assert!(room > 0, "read into a full input buffer");
        let n = crate::sys::read_spare(fd, &mut self.buf, room)?;
        self.apply_discard();
        Ok(n)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::Write;
    use std::os::fd::AsRawFd;

    /// A partial frame is always let in: however much of it is buffered, the buffer is below
    /// its resume mark until the frame is whole, and above it once whole frames fill it.
    #[test]
    fn a_partial_frame_is_below_the_resume_mark_until_whole() {
        let mut input = InBuf::new();
        let frame = 124 * 1024 + 28;
        input.want_bytes = frame;
        input.extend_from_slice(&vec![1u8; frame - 1]);
        assert!(frame - 1 > INPUT_READ_AHEAD_BYTES * 3 / 4);
        assert!(input.below_resume_mark(), "a partial frame must be read on");
        input.extend_from_slice(&[1u8]);
        // Whole: what remains is up to the decoder. Its next frame unknown, nothing is owed.
        input.want_bytes = 0;
        assert!(!input.below_resume_mark());
    }

    /// The TLS path: a 4 MiB frame arriving as 16 KiB of plaintext at a time grows the buffer
    /// to the frame's size (plus at most one piece), not to the next power of two.
    #[test]
    fn appended_input_grows_to_the_frame_not_beyond() {
        let mut input = InBuf::new();
        let frame = (4 << 20) + 28;
        let piece = [5u8; 16 * 1024];
        input.want_bytes = frame;
        while input.pending_bytes() < frame {
            input.extend_from_slice(&piece);
        }
        assert!(
            input.capacity_bytes() <= frame + piece.len(),
            "capacity {} for a {frame}-byte frame",
            input.capacity_bytes()
        );
    }

    /// A pipelining client, simulated: 20 MB of 1,052-byte frames, read and consumed 64 at a
    /// time. Compaction must move at most what was consumed, and the buffer stay bounded.
    #[test]
    fn pipelined_frames_cost_linear_copying_and_bounded_memory() {
        let (mut tx, rx) = std::os::unix::net::UnixStream::pair().expect("socketpair");
        rx.set_nonblocking(true).expect("nonblocking");
        let frame = 1052usize;
        let frames = 20_000usize;
        let writer = std::thread::spawn(move || {
            let chunk = vec![7u8; frame * 100];
            for _ in 0..frames / 100 {
                tx.write_all(&chunk).expect("write");
            }
        });
        let mut input = InBuf::new();
        let (mut done, mut moved, mut max_cap) = (0usize, 0u64, 0usize);
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(30);
        let mut eof = false;
        while done < frames && std::time::Instant::now() < deadline {
            if input.has_room() && !eof {
                match input.read_from(rx.as_raw_fd()) {
                    Ok(0) => eof = true,
                    Ok(_) => {}
                    Err(e) if e.kind() == io::ErrorKind::WouldBlock => {}
                    Err(e) => panic!("read: {e}"),
                }
            }
            for _ in 0..64 {
                if input.data().len() < frame {
                    input.want_bytes = frame;
                    break;
                }
                input.consume(frame);
                done += 1;
            }
            moved += input.take_moved_bytes();
            max_cap = max_cap.max(input.capacity_bytes());
        }
        writer.join().expect("writer");
        assert_eq!(done, frames);
        let total = (frame * frames) as u64;
        assert!(moved <= total, "moved {moved} bytes for {total} received");
        assert!(
            max_cap <= 2 * INPUT_READ_AHEAD_BYTES + INPUT_KEEP_BYTES,
            "capacity {max_cap}"
        );
    }
}
