//! What a worker holds for one connection: its input buffer, the protocol-independent core, the
//! protocol's session and the TLS session.
//!
//! # What it implements
//! [`Conn`] gathers the parts a worker step touches per connection; [`Session`] is the
//! protocol's state machine (own protocol or NBD), both sans-I/O: they take decoded bytes and
//! give requests and replies, and the worker moves the bytes.
//!
//! # Design
//! The TLS session is boxed (about 1 KiB of rustls state) so that a plaintext connection stays
//! small; it exists from the first byte (own protocol with TLS configured) or from an
//! acknowledged NBD_OPT_STARTTLS on. Worked example: 5,000 idle NBD connections on one worker
//! hold 5,000 `Conn`s in its connection table and no TLS state.
//!
//! # What it leaves out
//! The connection's socket, limits and output queue live in [`crate::conn::ConnCore`].

use crate::conn::ConnCore;
use crate::inbuf::InBuf;
use crate::native::NativeSession;
use crate::nbd::NbdSession;
use crate::sockring::RingConn;
use crate::tls::TlsConn;

/// Per-protocol session state.
pub enum Session {
    Native(NativeSession),
    Nbd(NbdSession),
}

/// What a worker holds for one connection.
pub struct Conn {
    pub input: InBuf,
    pub core: ConnCore,
    pub session: Session,
    /// The TLS session, from the first byte (own protocol) or from NBD_OPT_STARTTLS on.
    pub tls: Option<Box<TlsConn>>,
    /// The TLS session's PSK outcome has reached the per-address back-off.
    pub psk_noted: bool,
    /// Its socket I/O on the worker's io_uring (`socket_io = "uring"`, plain TCP); `None`:
    /// epoll watches it.
    pub ring: Option<RingConn>,
}

impl Conn {
    /// Whether anything waits for the socket: queued replies or TLS bytes.
    pub fn has_output(&self) -> bool {
        !self.core.out.is_empty() || self.tls.as_ref().is_some_and(|t| t.pending_output() > 0)
    }
}
