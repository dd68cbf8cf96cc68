//! Wire formats of ullstack's remote-flash server, as pure sans-I/O codecs.
//!
//! Two protocols reach the server from untrusted sockets, and this crate is the only place that
//! turns their bytes into meaning:
//!
//! * [`wire`] — the **ullstack wire protocol v1**, spoken by the client library and
//!   `ullstack bench`: authenticated sessions (HELLO), tenant registration with an SLO
//!   (REGISTER/UNREGISTER), and READ/WRITE/FLUSH/TRIM/STATS with a status in every reply,
//!   cookies echoed and replies allowed out of order. The full byte layout is in
//!   `docs/protocol.md` and in the module's essay.
//! * [`nbd`] — the server side of the fixed-newstyle **Network Block Device** protocol: a
//!   handshake state machine (options EXPORT_NAME, LIST, ABORT, INFO, GO, STARTTLS,
//!   STRUCTURED_REPLY, LIST/SET_META_CONTEXT) and the transmission-phase request parser with
//!   simple and structured (chunked) reply encoders and block-status extents, so
//!   `fio --ioengine=nbd`, `nbdinfo`, `nbdcopy`, `qemu-io` and the kernel's `nbd-client` reach
//!   the same volumes.
//!
//! # The design, shared by both
//! *Sans-I/O.* Nothing here owns a socket, a clock or a thread. Decoders take the bytes the
//! caller has so far and answer one of three things: [`Decode::NeedMore`] (with the total
//! number of bytes the frame needs, so the caller can size one read), [`Decode::Done`] (a frame
//! and how many bytes it consumed), or an error that says what was wrong with which value and
//! what the server should do about it ([`Disposition`]). Feeding a frame one byte at a time
//! gives the same result as feeding it whole; tests do exactly that.
//!
//! *Lengths are checked before they size anything.* Every length field that came from a peer is
//! compared against a limit the caller passes in (`max_payload_bytes`) before a single byte of
//! payload is awaited, so a header claiming 4 GB is rejected after 40 bytes, and nothing in this
//! crate allocates in proportion to a claimed length.
//!
//! *Zero copy.* A decoded data frame borrows its payload from the caller's buffer
//! (`&[u8]` into it); an encoder writes a fixed-size header into a stack array or appends to a
//! caller's `Vec`, so the hot path allocates nothing per message.
//!
//! *Never panic on input.* Every read is bounds-checked; property tests and the cargo-fuzz
//! targets in `fuzz/` throw arbitrary bytes at every decoder.
//!
//! # What it leaves out
//! TLS itself (the codec says when STARTTLS switches the stream; the server runs TLS), NBD
//! extended headers and metadata contexts other than `base:allocation`; those are negotiated
//! away truthfully.

pub mod nbd;
pub mod psk;
pub mod wire;

mod bytes;

/// What a tenant may do on a volume: the right a server config's ACL entry grants
/// (`access = "read" | "read-write"`), the one an OK HELLO reply reports (its best right
/// anywhere on the volume; the ACL may still deny particular ranges) and whether an NBD export
/// may be written.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, serde::Deserialize)]
pub enum Access {
    #[serde(rename = "read")]
    ReadOnly,
    #[serde(rename = "read-write")]
    ReadWrite,
}

/// The outcome of offering a decoder the bytes received so far.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Decode<T> {
    /// The frame is incomplete; `total_bytes` is how many bytes (counted from the start of the
    /// slice that was offered) the decoder needs before it can say more. Header fields have been
    /// validated as far as they were available, so a caller may safely reserve this much.
    NeedMore { total_bytes: usize },
    /// A complete frame, and how many bytes of the input it occupied.
    Done { frame: T, consumed_bytes: usize },
}

impl<T> Decode<T> {
    /// The frame, if complete.
    pub fn frame(self) -> Option<T> {
        match self {
            Decode::Done { frame, .. } => Some(frame),
            Decode::NeedMore { .. } => None,
        }
    }
}

/// What a server should do after a decoder rejected a frame.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Disposition {
    /// The framing can no longer be trusted: close the connection without replying (no cookie
    /// is known, or the bytes are not this protocol at all).
    Close,
    /// The header was readable but unacceptable: send an error reply carrying `cookie`, then
    /// close (the payload that follows cannot be trusted or skipped safely).
    ReplyThenClose { cookie: u64 },
    /// The request is self-contained and can be answered with an error while the connection
    /// continues: reply with `cookie`, drop `consumed_bytes` of input and go on. The bytes may
    /// not all have arrived yet (an oversize NBD WRITE's payload): drop them as they come.
    ReplyAndContinue { cookie: u64, consumed_bytes: usize },
}
