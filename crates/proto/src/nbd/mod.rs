//! The Network Block Device protocol (fixed newstyle), sans I/O: the server side, and the
//! client side that `ullstack calibrate nbd://…` and the tests speak ([`client`]).
//!
//! NBD is how `fio --ioengine=nbd`, `nbdinfo`, `nbdcopy`, `qemu-img`/`qemu-io` and the kernel's
//! `nbd-client` reach a volume without knowing anything about ullstack. The protocol has two
//! phases, and this module has one codec for each:
//!
//! * [`handshake`] — the server greets (`NBDMAGIC`, `IHAVEOPT`, handshake flags
//!   `FIXED_NEWSTYLE | NO_ZEROES`), reads the client's flags, then answers options one at a time:
//!   `NBD_OPT_EXPORT_NAME`, `NBD_OPT_LIST`, `NBD_OPT_ABORT`, `NBD_OPT_INFO` and `NBD_OPT_GO`
//!   (with `NBD_INFO_EXPORT`, `NAME`, `DESCRIPTION` and `BLOCK_SIZE` replies),
//!   `NBD_OPT_STRUCTURED_REPLY`, `NBD_OPT_LIST_META_CONTEXT` / `SET_META_CONTEXT`
//!   (`base:allocation`) and `NBD_OPT_STARTTLS` (with TLS required before anything else when the
//!   server has TLS); everything else is answered `NBD_REP_ERR_UNSUP`. Where an answer needs
//!   the server's knowledge (which exports exist, their sizes) or the server must act (start
//!   TLS), the state machine stops with an event and resumes when the server answers.
//! * [`transmission`] — the 28-byte request (`0x25609513`, command flags, type, cookie, offset,
//!   length, then the payload of a WRITE), the 16-byte simple reply (`0x67446698`, errno,
//!   cookie, then the data of a READ), and the structured reply chunks (`0x668e33ef`:
//!   `OFFSET_DATA`, `ERROR`, `BLOCK_STATUS`) used once structured replies are negotiated.
//!
//! All integers in NBD are **big-endian** (network byte order), unlike the ullstack wire protocol.
//!
//! # Worked example: `nbdinfo nbd://host/default`
//! server → `NBDMAGIC IHAVEOPT 0x0003`; client → flags `0x00000003`; client → `IHAVEOPT, GO(7),
//! len 13, {name_len 7, "default", 1 info request: BLOCK_SIZE}`; the handshake emits
//! [`handshake::HandshakeEvent::ExportRequested`] for "default"; the server answers with
//! `ExportInfo {size 1 GiB, flags HAS_FLAGS|SEND_FLUSH|SEND_FUA|SEND_TRIM|SEND_WRITE_ZEROES|
//! CAN_MULTI_CONN, block sizes 1/4096/32 MiB}`; the handshake writes `REP_INFO(EXPORT)`,
//! `REP_INFO(BLOCK_SIZE)`, `REP_ACK` and enters transmission. The first request then decodes as
//! `READ cookie=1 offset=0 length=512` and the server replies `67446698 00000000 cookie` plus
//! 512 bytes.
//!
//! # What it leaves out
//! Extended headers, metadata contexts other than `base:allocation`, `OFFSET_HOLE` chunks in
//! READ replies (holes are sent as zeros), `NBD_CMD_CACHE` and `NBD_CMD_RESIZE` (decoded as
//! commands, answered `EINVAL` by [`transmission::check_request`]).

pub use crate::Access;

pub mod client;
pub mod handshake;
pub mod transmission;

/// `NBDMAGIC`, first 8 bytes of the greeting.
pub const NBDMAGIC: u64 = 0x4e42_444d_4147_4943;
/// `IHAVEOPT`, in the greeting and in front of every option.
pub const IHAVEOPT: u64 = 0x4948_4156_454F_5054;
/// Magic in front of every option reply.
pub const OPTION_REPLY_MAGIC: u64 = 0x0003_e889_0455_65a9;
/// Magic of a transmission request.
pub const REQUEST_MAGIC: u32 = 0x2560_9513;
/// Magic of a simple reply.
pub const SIMPLE_REPLY_MAGIC: u32 = 0x6744_6698;

/// Handshake flag: the server speaks fixed newstyle.
pub const FLAG_FIXED_NEWSTYLE: u16 = 1 << 0;
/// Handshake flag: the server can omit the 124 zero bytes after EXPORT_NAME.
pub const FLAG_NO_ZEROES: u16 = 1 << 1;
/// Client flag: the client speaks fixed newstyle.
pub const FLAG_C_FIXED_NEWSTYLE: u32 = 1 << 0;
/// Client flag: omit the 124 zero bytes.
pub const FLAG_C_NO_ZEROES: u32 = 1 << 1;

/// Option numbers.
pub const OPT_EXPORT_NAME: u32 = 1;
pub const OPT_ABORT: u32 = 2;
pub const OPT_LIST: u32 = 3;
pub const OPT_STARTTLS: u32 = 5;
pub const OPT_INFO: u32 = 6;
pub const OPT_GO: u32 = 7;
pub const OPT_STRUCTURED_REPLY: u32 = 8;
pub const OPT_LIST_META_CONTEXT: u32 = 9;
pub const OPT_SET_META_CONTEXT: u32 = 10;

/// Option reply types.
pub const REP_ACK: u32 = 1;
pub const REP_SERVER: u32 = 2;
pub const REP_INFO: u32 = 3;
pub const REP_META_CONTEXT: u32 = 4;
const REP_ERR: u32 = 1 << 31;
pub const REP_ERR_UNSUP: u32 = REP_ERR + 1;
pub const REP_ERR_POLICY: u32 = REP_ERR + 2;
pub const REP_ERR_INVALID: u32 = REP_ERR + 3;
pub const REP_ERR_PLATFORM: u32 = REP_ERR + 4;
pub const REP_ERR_TLS_REQD: u32 = REP_ERR + 5;
pub const REP_ERR_UNKNOWN: u32 = REP_ERR + 6;
pub const REP_ERR_SHUTDOWN: u32 = REP_ERR + 7;
pub const REP_ERR_BLOCK_SIZE_REQD: u32 = REP_ERR + 8;
pub const REP_ERR_TOO_BIG: u32 = REP_ERR + 9;

/// Info types in `NBD_REP_INFO`.
pub const INFO_EXPORT: u16 = 0;
pub const INFO_NAME: u16 = 1;
pub const INFO_DESCRIPTION: u16 = 2;
pub const INFO_BLOCK_SIZE: u16 = 3;

/// Magic of a structured reply chunk.
pub const STRUCTURED_REPLY_MAGIC: u32 = 0x668e_33ef;

/// The one metadata context this server offers: allocation status (`NBD_STATE_HOLE`,
/// `NBD_STATE_ZERO`) of the export's bytes.
pub const META_BASE_ALLOCATION: &str = "base:allocation";
/// The context id the server gives `base:allocation` (any id is allowed; it is fixed here).
pub const META_BASE_ALLOCATION_ID: u32 = 1;
/// `base:allocation` flag: the extent is not allocated (a hole).
pub const STATE_HOLE: u32 = 1 << 0;
/// `base:allocation` flag: the extent reads as zeros.
pub const STATE_ZERO: u32 = 1 << 1;

/// Longest string (export name, description) the protocol allows.
pub const STRING_MAX_BYTES: usize = 4096;

/// The 16 transmission flags sent with an export, built truthfully from what the export can do
/// by [`TransmissionFlags::builder`].
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct TransmissionFlags(u16);

impl TransmissionFlags {
    pub const HAS_FLAGS: u16 = 1 << 0;
    pub const READ_ONLY: u16 = 1 << 1;
    pub const SEND_FLUSH: u16 = 1 << 2;
    pub const SEND_FUA: u16 = 1 << 3;
    pub const ROTATIONAL: u16 = 1 << 4;
    pub const SEND_TRIM: u16 = 1 << 5;
    pub const SEND_WRITE_ZEROES: u16 = 1 << 6;
    pub const SEND_DF: u16 = 1 << 7;
    pub const CAN_MULTI_CONN: u16 = 1 << 8;
    pub const SEND_RESIZE: u16 = 1 << 9;
    pub const SEND_CACHE: u16 = 1 << 10;
    pub const SEND_FAST_ZERO: u16 = 1 << 11;

    /// Start from what the grant allows: a read-only export never advertises a command that
    /// writes, whatever is asked of the builder later.
    pub fn builder(access: Access) -> TransmissionFlagsBuilder {
        TransmissionFlagsBuilder {
            access,
            bits: Self::HAS_FLAGS,
        }
    }

    /// The raw bits, as sent.
    pub fn bits(self) -> u16 {
        self.0
    }

    /// Wrap bits received from a peer (tests and clients).
    pub fn from_bits(bits: u16) -> Self {
        TransmissionFlags(bits)
    }

    /// Whether every bit of `flag` is set.
    pub fn contains(self, flag: u16) -> bool {
        self.0 & flag == flag
    }
}

/// Builder for [`TransmissionFlags`]; each method states a capability of the backend.
#[derive(Debug, Clone, Copy)]
pub struct TransmissionFlagsBuilder {
    access: Access,
    bits: u16,
}

impl TransmissionFlagsBuilder {
    fn set(mut self, bit: u16, on: bool) -> Self {
        if on {
            self.bits |= bit;
        } else {
            self.bits &= !bit;
        }
        self
    }
    fn writable(&self) -> bool {
        self.access == Access::ReadWrite
    }
    /// The backend has a volatile cache that FLUSH makes durable.
    pub fn flush(self, supported: bool) -> Self {
        self.set(TransmissionFlags::SEND_FLUSH, supported)
    }
    /// The backend can honour FUA on writes (ignored for read-only exports).
    pub fn fua(self, supported: bool) -> Self {
        let on = supported && self.writable();
        self.set(TransmissionFlags::SEND_FUA, on)
    }
    /// The backend can discard ranges (ignored for read-only exports).
    pub fn trim(self, supported: bool) -> Self {
        let on = supported && self.writable();
        self.set(TransmissionFlags::SEND_TRIM, on)
    }
    /// The backend can write zeroes without a payload (ignored for read-only exports).
    pub fn write_zeroes(self, supported: bool) -> Self {
        let on = supported && self.writable();
        self.set(TransmissionFlags::SEND_WRITE_ZEROES, on)
    }
    /// FLUSH and FUA on one connection are visible to all connections (shared cache or none).
    pub fn multi_conn(self, supported: bool) -> Self {
        self.set(TransmissionFlags::CAN_MULTI_CONN, supported)
    }
    /// The backing medium is rotational (a hint for client I/O schedulers).
    pub fn rotational(self, rotational: bool) -> Self {
        self.set(TransmissionFlags::ROTATIONAL, rotational)
    }
    /// The finished flags.
    pub fn build(self) -> TransmissionFlags {
        let mut bits = self.bits | TransmissionFlags::HAS_FLAGS;
        if !self.writable() {
            bits |= TransmissionFlags::READ_ONLY;
            bits &= !(TransmissionFlags::SEND_FUA
                | TransmissionFlags::SEND_TRIM
                | TransmissionFlags::SEND_WRITE_ZEROES);
        }
        TransmissionFlags(bits)
    }
}

/// Block-size constraints advertised with `NBD_INFO_BLOCK_SIZE`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct BlockSizes {
    /// Smallest request granularity (a power of two, 1..=64 KiB).
    pub minimum_bytes: u32,
    /// Preferred granularity (a power of two ≥ minimum; e.g. 4096).
    pub preferred_bytes: u32,
    /// Largest payload of a request (multiple of minimum; e.g. 32 MiB).
    pub maximum_bytes: u32,
}

/// What the server tells a client about an export it may use.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ExportInfo {
    /// Canonical name (sent for `NBD_INFO_NAME`).
    pub name: String,
    /// Human-readable description (sent for `NBD_INFO_DESCRIPTION` if not empty).
    pub description: String,
    pub size_bytes: u64,
    pub flags: TransmissionFlags,
    /// Sent as `NBD_INFO_BLOCK_SIZE` with every INFO/GO reply when present.
    pub block_sizes: Option<BlockSizes>,
}

/// Errno values carried in simple replies (the NBD spec's fixed numbering, not the host's).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Errno {
    /// Operation not permitted (e.g. a write on a read-only export).
    Perm,
    /// Input/output error.
    Io,
    /// Out of memory.
    NoMem,
    /// Invalid argument (bad flags, unknown command, beyond the end for reads).
    Inval,
    /// No space left (writes beyond the end).
    NoSpc,
    /// Value too large (request larger than the maximum block size).
    Overflow,
    /// Operation not supported.
    NotSup,
    /// Server is shutting down.
    Shutdown,
}

impl Errno {
    /// The wire value.
    pub fn to_u32(self) -> u32 {
        match self {
            Errno::Perm => 1,
            Errno::Io => 5,
            Errno::NoMem => 12,
            Errno::Inval => 22,
            Errno::NoSpc => 28,
            Errno::Overflow => 75,
            Errno::NotSup => 95,
            Errno::Shutdown => 108,
        }
    }

    /// Decode a wire value (unknown values, which a server must not send, give `None`).
    pub fn from_u32(value: u32) -> Option<Errno> {
        Some(match value {
            1 => Errno::Perm,
            5 => Errno::Io,
            12 => Errno::NoMem,
            22 => Errno::Inval,
            28 => Errno::NoSpc,
            75 => Errno::Overflow,
            95 => Errno::NotSup,
            108 => Errno::Shutdown,
            _ => return None,
        })
    }

    /// The NBD errno that best carries a native-protocol status (for a server that checks NBD
    /// requests with the same code as native ones).
    pub fn from_status(status: crate::wire::Status) -> Option<Errno> {
        use crate::wire::Status as S;
        Some(match status {
            S::Ok => return None,
            S::ReadOnly | S::AccessDenied | S::AuthFailed | S::NotAuthenticated => Errno::Perm,
            S::OutOfRange | S::Misaligned | S::BadRequest | S::UnknownHandle => Errno::Inval,
            S::TooLarge => Errno::Overflow,
            S::ShuttingDown => Errno::Shutdown,
            S::Busy | S::Refused => Errno::NoMem,
            S::NoSuchVolume | S::UnsupportedVersion => Errno::Inval,
            S::IoError | S::Internal | S::Other(_) => Errno::Io,
        })
    }
}
