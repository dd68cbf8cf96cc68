//! The ullstack wire protocol, version 1: the native protocol of `ullstack serve`.
//!
//! The published dataplane spoke a header with no status field, so a device error came back as
//! success, and a malformed request hit an `assert`. This protocol keeps its shape (a fixed
//! binary header, a cookie echoed so replies can come back out of order, payload after the
//! header) and adds what a product needs: a version, authentication, a status in every reply,
//! tenant registration with an SLO and a refusal that says why, and lengths that are checked
//! against the server's limit before they size anything.
//!
//! # Byte order and framing
//! All integers are **little-endian** (the byte order of every machine this runs on, so encoding
//! is a copy). Every message is a fixed header followed by `payload_len` bytes.
//!
//! Request header, [`REQUEST_HEADER_BYTES`] = 40:
//!
//! | off | size | field | meaning |
//! | --- | --- | --- | --- |
//! | 0 | 4 | magic | ASCII `ULRQ` |
//! | 4 | 1 | version | 1 |
//! | 5 | 1 | opcode | [`Opcode`] |
//! | 6 | 2 | flags | bit 0 = FUA (WRITE only); every other bit must be 0 |
//! | 8 | 8 | cookie | chosen by the client, echoed in the reply |
//! | 16 | 4 | handle | tenant handle from REGISTER; 0 = the session's default best-effort flow |
//! | 20 | 4 | payload_len | bytes following this header |
//! | 24 | 8 | offset_bytes | READ/WRITE/TRIM: byte offset in the session's volume |
//! | 32 | 4 | length_bytes | READ/TRIM: bytes; WRITE: must equal payload_len |
//! | 36 | 4 | reserved | must be 0 |
//!
//! Reply header, [`REPLY_HEADER_BYTES`] = 24:
//!
//! | off | size | field | meaning |
//! | --- | --- | --- | --- |
//! | 0 | 4 | magic | ASCII `ULRP` |
//! | 4 | 1 | version | 1 |
//! | 5 | 1 | opcode | the request's opcode, echoed |
//! | 6 | 2 | status | [`Status`]; 0 = OK |
//! | 8 | 8 | cookie | the request's cookie, echoed |
//! | 16 | 4 | payload_len | bytes following this header |
//! | 20 | 4 | reserved | 0 |
//!
//! A reply with a status other than OK carries an optional [`ErrorBody`] (a detail code and a
//! UTF-8 message) as its payload; an OK READ reply carries exactly `length_bytes` of data.
//!
//! # A session, worked through
//! 1. `HELLO` (cookie 1) with [`HelloBody`] `{tenant: "A", secret: "s3cret", volume: "vol0"}` →
//!    OK with [`HelloReply`] `{session_id, volume_size_bytes: 1 GiB, block_size_bytes: 512,
//!    max_payload_bytes: 32 MiB, access: ReadWrite}`. Every other request before a successful
//!    HELLO is answered `NOT_AUTHENTICATED`. The volume is fixed for the session; a client that
//!    wants two volumes opens two connections.
//! 2. `REGISTER` (cookie 2) with [`RegisterBody`] `LatencyCritical {p95_read_latency_ns:
//!    500_000, iops: 120_000, read_pct: 100, request_size_bytes: 4096}` → OK with
//!    [`RegisterReply`] `{handle: 7}`, or `REFUSED` with [`ErrorBody`] `{code:
//!    RefusalCode::CapacityExceeded, message: "needs 120000 tokens/s, 30000 left at p95 500us"}`.
//! 3. `READ` (cookie 3, handle 7, offset 8192, length 4096) and `WRITE` (cookie 4, handle 7,
//!    FUA, offset 0, 4096 bytes of payload) are both in flight; the server may answer cookie 4
//!    first. Each reply has a status; the READ reply's payload is the data.
//! 4. `UNREGISTER` (handle 7) returns the reservation to the pool; closing the connection does
//!    the same.
//!
//! # Decoding and what a bad frame costs
//! [`decode_request`] validates in two stages. From the 40-byte header alone: magic, version,
//! reserved field, opcode, and `payload_len` against the limit for that opcode (WRITE: the
//! server's `max_payload_bytes`; HELLO/REGISTER: [`CONTROL_PAYLOAD_MAX_BYTES`]; all others: 0).
//! A failure there means the stream can no longer be trusted ([`Disposition::Close`] or
//! [`Disposition::ReplyThenClose`]), and because it is found before the payload is awaited, a
//! header claiming 4 GB costs the server 40 bytes. Once the whole frame is present, per-request
//! checks (flags, WRITE length = payload, READ length within the limit, offset + length
//! overflow, body syntax) produce [`Disposition::ReplyAndContinue`]: the frame boundary is
//! known, so the connection can go on. [`decode_request_header`] runs only the first stage, for
//! servers that want to read a WRITE payload straight into an I/O buffer.
//!
//! # What it leaves out
//! No encryption or integrity protection (run it on a trusted network or under a tunnel); the
//! secret travels in clear text in HELLO. No per-request volume field: one volume per session.
//! STATS returns a server-defined JSON document rather than a fixed binary layout.
//!
//! # Limits that steer it
//! `max_payload_bytes` (server config; [`DEFAULT_MAX_PAYLOAD_BYTES`] = 32 MiB) bounds WRITE
//! payloads and READ lengths; [`CONTROL_PAYLOAD_MAX_BYTES`] bounds HELLO/REGISTER bodies and
//! error messages; [`STATS_PAYLOAD_MAX_BYTES`] bounds a STATS reply.

use thiserror::Error;

use crate::bytes::{ArrayWriter, Reader};
use crate::{Decode, Disposition};

/// Protocol version carried in every header.
pub const VERSION: u8 = 1;
/// First four bytes of every request.
pub const REQUEST_MAGIC: [u8; 4] = *b"ULRQ";
/// First four bytes of every reply.
pub const REPLY_MAGIC: [u8; 4] = *b"ULRP";
/// Size of a request header.
pub const REQUEST_HEADER_BYTES: usize = 40;
/// Size of a reply header.
pub const REPLY_HEADER_BYTES: usize = 24;
/// Largest HELLO/REGISTER body and largest error body: control messages are small, and bounding
/// them separately keeps a big data limit from becoming a big control-plane allocation.
pub const CONTROL_PAYLOAD_MAX_BYTES: u32 = 4096;
/// Largest STATS reply payload (a JSON document).
pub const STATS_PAYLOAD_MAX_BYTES: u32 = 1 << 20;
/// Default largest READ/WRITE: 32 MiB, what nbdcopy and qemu send at most.
pub const DEFAULT_MAX_PAYLOAD_BYTES: u32 = 32 << 20;
/// Longest tenant or volume name in HELLO.
pub const NAME_MAX_BYTES: usize = 255;
/// Longest secret in HELLO.
pub const SECRET_MAX_BYTES: usize = 1024;
/// Request flag bit 0: write through to stable storage before replying (WRITE only).
pub const FLAG_FUA: u16 = 1 << 0;
/// Size of a HELLO body's fixed part (three lengths and a reserved u16).
pub const HELLO_FIXED_BYTES: usize = 8;
/// Size of a REGISTER body.
pub const REGISTER_BODY_BYTES: usize = 24;
/// Size of an OK HELLO reply body.
pub const HELLO_REPLY_BYTES: usize = 32;
/// Size of an OK REGISTER reply body.
pub const REGISTER_REPLY_BYTES: usize = 8;

/// What a request asks for.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[repr(u8)]
pub enum Opcode {
    /// Authenticate and open a volume. Body: [`HelloBody`]. Reply: [`HelloReply`].
    Hello = 1,
    /// Register a tenant flow with a class and SLO. Body: [`RegisterBody`]. Reply:
    /// [`RegisterReply`] or `REFUSED` with an [`ErrorBody`] whose code is a [`RefusalCode`].
    Register = 2,
    /// Release the flow named by the header's handle.
    Unregister = 3,
    /// Read `length_bytes` at `offset_bytes`; the reply carries the data.
    Read = 4,
    /// Write the payload at `offset_bytes`; FUA flag allowed.
    Write = 5,
    /// Make every write completed before this request durable.
    Flush = 6,
    /// Discard `length_bytes` at `offset_bytes`.
    Trim = 7,
    /// Ask for the session's counters; the reply is a UTF-8 JSON document.
    Stats = 8,
}

impl Opcode {
    /// All opcodes, in wire order.
    pub const ALL: [Opcode; 8] = [
        Opcode::Hello,
        Opcode::Register,
        Opcode::Unregister,
        Opcode::Read,
        Opcode::Write,
        Opcode::Flush,
        Opcode::Trim,
        Opcode::Stats,
    ];

    /// The opcode with this wire value, if any.
    pub fn from_u8(value: u8) -> Option<Opcode> {
        Opcode::ALL.into_iter().find(|op| *op as u8 == value)
    }

    /// Upper-case name as used in docs and logs.
    pub fn name(self) -> &'static str {
        match self {
            Opcode::Hello => "HELLO",
            Opcode::Register => "REGISTER",
            Opcode::Unregister => "UNREGISTER",
            Opcode::Read => "READ",
            Opcode::Write => "WRITE",
            Opcode::Flush => "FLUSH",
            Opcode::Trim => "TRIM",
            Opcode::Stats => "STATS",
        }
    }

    /// Largest request payload this opcode may carry, given the server's data limit.
    pub fn request_payload_limit_bytes(self, max_payload_bytes: u32) -> u32 {
        match self {
            Opcode::Hello | Opcode::Register => CONTROL_PAYLOAD_MAX_BYTES,
            Opcode::Write => max_payload_bytes,
            _ => 0,
        }
    }

    /// Largest reply payload for this opcode (an error body always fits in the control limit).
    pub fn reply_payload_limit_bytes(self, max_payload_bytes: u32) -> u32 {
        match self {
            Opcode::Read => max_payload_bytes.max(CONTROL_PAYLOAD_MAX_BYTES),
            Opcode::Stats => STATS_PAYLOAD_MAX_BYTES,
            _ => CONTROL_PAYLOAD_MAX_BYTES,
        }
    }
}

impl std::fmt::Display for Opcode {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.name())
    }
}

/// The status in every reply. Unknown values from a newer peer decode to [`Status::Other`].
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Status {
    /// Success.
    Ok,
    /// The request was malformed (bad flags, lengths, body syntax).
    BadRequest,
    /// The header's version is not one this peer speaks.
    UnsupportedVersion,
    /// HELLO named an unknown tenant or a wrong secret (deliberately not told apart).
    AuthFailed,
    /// A request other than HELLO arrived before a successful HELLO.
    NotAuthenticated,
    /// HELLO named a volume that does not exist or that this tenant may not see.
    NoSuchVolume,
    /// offset + length lies beyond the end of the volume.
    OutOfRange,
    /// A WRITE or TRIM on a range this tenant may only read.
    ReadOnly,
    /// The tenant's ACL does not cover this range at all.
    AccessDenied,
    /// The payload or READ length exceeds the server's `max_payload_bytes`.
    TooLarge,
    /// REGISTER was refused by admission control; the error body's code is a [`RefusalCode`].
    Refused,
    /// The header's handle names no flow registered on this session.
    UnknownHandle,
    /// offset or length is not a multiple of the volume's block size.
    Misaligned,
    /// The backend failed the I/O.
    IoError,
    /// The server is draining; reconnect later.
    ShuttingDown,
    /// A limit was hit: HELLO of a tenant that holds `limits.max_connections_per_tenant`.
    Busy,
    /// A bug or resource failure inside the server.
    Internal,
    /// A status this build does not know.
    Other(u16),
}

impl Status {
    /// Wire value.
    pub fn to_u16(self) -> u16 {
        match self {
            Status::Ok => 0,
            Status::BadRequest => 1,
            Status::UnsupportedVersion => 2,
            Status::AuthFailed => 3,
            Status::NotAuthenticated => 4,
            Status::NoSuchVolume => 5,
            Status::OutOfRange => 6,
            Status::ReadOnly => 7,
            Status::AccessDenied => 8,
            Status::TooLarge => 9,
            Status::Refused => 10,
            Status::UnknownHandle => 11,
            Status::Misaligned => 12,
            Status::IoError => 13,
            Status::ShuttingDown => 14,
            Status::Busy => 15,
            Status::Internal => 16,
            Status::Other(v) => v,
        }
    }

    /// Decode a wire value; never fails.
    pub fn from_u16(value: u16) -> Status {
        match value {
            0 => Status::Ok,
            1 => Status::BadRequest,
            2 => Status::UnsupportedVersion,
            3 => Status::AuthFailed,
            4 => Status::NotAuthenticated,
            5 => Status::NoSuchVolume,
            6 => Status::OutOfRange,
            7 => Status::ReadOnly,
            8 => Status::AccessDenied,
            9 => Status::TooLarge,
            10 => Status::Refused,
            11 => Status::UnknownHandle,
            12 => Status::Misaligned,
            13 => Status::IoError,
            14 => Status::ShuttingDown,
            15 => Status::Busy,
            16 => Status::Internal,
            v => Status::Other(v),
        }
    }

    /// Short lower-case name for logs and error messages.
    pub fn name(self) -> &'static str {
        match self {
            Status::Ok => "ok",
            Status::BadRequest => "bad request",
            Status::UnsupportedVersion => "unsupported version",
            Status::AuthFailed => "authentication failed",
            Status::NotAuthenticated => "not authenticated",
            Status::NoSuchVolume => "no such volume",
            Status::OutOfRange => "out of range",
            Status::ReadOnly => "read-only grant",
            Status::AccessDenied => "access denied",
            Status::TooLarge => "too large",
            Status::Refused => "refused",
            Status::UnknownHandle => "unknown handle",
            Status::Misaligned => "misaligned",
            Status::IoError => "I/O error",
            Status::ShuttingDown => "shutting down",
            Status::Busy => "busy",
            Status::Internal => "internal error",
            Status::Other(_) => "unknown status",
        }
    }
}

impl std::fmt::Display for Status {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Status::Other(v) => write!(f, "unknown status {v}"),
            s => f.write_str(s.name()),
        }
    }
}

/// Why admission control refused a REGISTER: the `code` of the [`ErrorBody`] of a `REFUSED`
/// reply.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum RefusalCode {
    /// The sum of reservations would exceed the device's token rate at the strictest SLO.
    CapacityExceeded,
    /// The p95 target is stricter than the tightest point of the device's calibration table.
    SloTooStrict,
    /// The SLO is not meaningful (zero IOPS, zero size, read ratio out of range).
    InvalidSlo,
    /// The server's tenant limit is reached.
    TooManyTenants,
    /// The server's configuration does not let this tenant register this class.
    NotPermitted,
    /// A code this build does not know.
    Other(u32),
}

impl RefusalCode {
    /// Wire value.
    pub fn to_u32(self) -> u32 {
        match self {
            RefusalCode::CapacityExceeded => 1,
            RefusalCode::SloTooStrict => 2,
            RefusalCode::InvalidSlo => 3,
            RefusalCode::TooManyTenants => 4,
            RefusalCode::NotPermitted => 5,
            RefusalCode::Other(v) => v,
        }
    }
    /// Decode a wire value; never fails.
    pub fn from_u32(value: u32) -> RefusalCode {
        match value {
            1 => RefusalCode::CapacityExceeded,
            2 => RefusalCode::SloTooStrict,
            3 => RefusalCode::InvalidSlo,
            4 => RefusalCode::TooManyTenants,
            5 => RefusalCode::NotPermitted,
            v => RefusalCode::Other(v),
        }
    }
}

/// Whether a WRITE must be durable before its reply.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub enum WriteMode {
    /// Durable after a later FLUSH.
    #[default]
    WriteBack,
    /// Force Unit Access: durable before the reply.
    Fua,
}

/// A request header as it travels; the encoder's input and [`decode_request_header`]'s output.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RequestHeader {
    pub opcode: Opcode,
    pub flags: u16,
    pub cookie: u64,
    pub handle: u32,
    pub payload_len: u32,
    pub offset_bytes: u64,
    pub length_bytes: u32,
}

impl RequestHeader {
    fn plain(opcode: Opcode, cookie: u64, handle: u32) -> Self {
        RequestHeader {
            opcode,
            flags: 0,
            cookie,
            handle,
            payload_len: 0,
            offset_bytes: 0,
            length_bytes: 0,
        }
    }
    /// HELLO with a body of `body_len` bytes (see [`HelloBody::encoded_len`]).
    pub fn hello(cookie: u64, body_len: u32) -> Self {
        RequestHeader {
            payload_len: body_len,
            ..Self::plain(Opcode::Hello, cookie, 0)
        }
    }
    /// REGISTER; its body is [`REGISTER_BODY_BYTES`] long.
    pub fn register(cookie: u64) -> Self {
        RequestHeader {
            payload_len: REGISTER_BODY_BYTES as u32,
            ..Self::plain(Opcode::Register, cookie, 0)
        }
    }
    /// UNREGISTER `handle`.
    pub fn unregister(cookie: u64, handle: u32) -> Self {
        Self::plain(Opcode::Unregister, cookie, handle)
    }
    /// READ `length_bytes` at `offset_bytes`.
    pub fn read(cookie: u64, handle: u32, offset_bytes: u64, length_bytes: u32) -> Self {
        RequestHeader {
            offset_bytes,
            length_bytes,
            ..Self::plain(Opcode::Read, cookie, handle)
        }
    }
    /// WRITE of `length_bytes` (the payload that follows) at `offset_bytes`.
    pub fn write(
        cookie: u64,
        handle: u32,
        offset_bytes: u64,
        length_bytes: u32,
        mode: WriteMode,
    ) -> Self {
        RequestHeader {
            flags: match mode {
                WriteMode::WriteBack => 0,
                WriteMode::Fua => FLAG_FUA,
            },
            payload_len: length_bytes,
            offset_bytes,
            length_bytes,
            ..Self::plain(Opcode::Write, cookie, handle)
        }
    }
    /// FLUSH.
    pub fn flush(cookie: u64, handle: u32) -> Self {
        Self::plain(Opcode::Flush, cookie, handle)
    }
    /// TRIM `length_bytes` at `offset_bytes`.
    pub fn trim(cookie: u64, handle: u32, offset_bytes: u64, length_bytes: u32) -> Self {
        RequestHeader {
            offset_bytes,
            length_bytes,
            ..Self::plain(Opcode::Trim, cookie, handle)
        }
    }
    /// STATS for `handle` (0 = the whole session).
    pub fn stats(cookie: u64, handle: u32) -> Self {
        Self::plain(Opcode::Stats, cookie, handle)
    }

    /// The header's 40 bytes, built on the stack.
    pub fn encode(&self) -> [u8; REQUEST_HEADER_BYTES] {
        let mut out = [0u8; REQUEST_HEADER_BYTES];
        let mut w = ArrayWriter::new(&mut out);
        w.put(&REQUEST_MAGIC);
        w.put(&[VERSION, self.opcode as u8]);
        w.put(&self.flags.to_le_bytes());
        w.put(&self.cookie.to_le_bytes());
        w.put(&self.handle.to_le_bytes());
        w.put(&self.payload_len.to_le_bytes());
        w.put(&self.offset_bytes.to_le_bytes());
        w.put(&self.length_bytes.to_le_bytes());
        w.put(&0u32.to_le_bytes());
        debug_assert_eq!(w.written(), REQUEST_HEADER_BYTES);
        out
    }

    /// Total frame length: header plus payload.
    pub fn frame_len(&self) -> usize {
        REQUEST_HEADER_BYTES + self.payload_len as usize
    }
}

/// A reply header as it travels.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ReplyHeader {
    pub opcode: Opcode,
    pub status: Status,
    pub cookie: u64,
    pub payload_len: u32,
}

impl ReplyHeader {
    /// A reply to `opcode`/`cookie` with `status` and `payload_len` bytes to follow.
    pub fn new(opcode: Opcode, status: Status, cookie: u64, payload_len: u32) -> Self {
        ReplyHeader {
            opcode,
            status,
            cookie,
            payload_len,
        }
    }

    /// The header's 24 bytes, built on the stack.
    pub fn encode(&self) -> [u8; REPLY_HEADER_BYTES] {
        let mut out = [0u8; REPLY_HEADER_BYTES];
        let mut w = ArrayWriter::new(&mut out);
        w.put(&REPLY_MAGIC);
        w.put(&[VERSION, self.opcode as u8]);
        w.put(&self.status.to_u16().to_le_bytes());
        w.put(&self.cookie.to_le_bytes());
        w.put(&self.payload_len.to_le_bytes());
        w.put(&0u32.to_le_bytes());
        debug_assert_eq!(w.written(), REPLY_HEADER_BYTES);
        out
    }

    /// Total frame length: header plus payload.
    pub fn frame_len(&self) -> usize {
        REPLY_HEADER_BYTES + self.payload_len as usize
    }
}

/// A problem with a body's contents (HELLO, REGISTER, or a reply body).
#[derive(Debug, Clone, PartialEq, Eq, Error)]
pub enum BodyError {
    #[error("{field} needs {needed_bytes} bytes but only {available_bytes} remain")]
    Truncated {
        field: &'static str,
        needed_bytes: usize,
        available_bytes: usize,
    },
    #[error("{field} is {len_bytes} bytes; at most {max_bytes} allowed")]
    TooLong {
        field: &'static str,
        len_bytes: usize,
        max_bytes: usize,
    },
    #[error("{field} is not valid UTF-8")]
    NotUtf8 { field: &'static str },
    #[error("{count_bytes} unexpected bytes after the body; expected none")]
    TrailingBytes { count_bytes: usize },
    #[error("reserved field {field} is {value}; expected 0")]
    ReservedNonZero { field: &'static str, value: u64 },
    #[error("class {value}; expected 1 (latency-critical) or 2 (best-effort)")]
    BadClass { value: u8 },
    #[error("read_pct {value}; expected 0..=100")]
    BadReadPct { value: u8 },
    #[error("latency-critical SLO field {field} is 0; expected a positive value")]
    ZeroSloField { field: &'static str },
    #[error("best-effort registration carries SLO field {field} = {value}; expected 0")]
    BestEffortWithSlo { field: &'static str, value: u64 },
    #[error("access {value}; expected 1 (read-only) or 2 (read-write)")]
    BadAccess { value: u8 },
}

/// Why a frame was rejected. [`WireError::disposition`] says what the server should do;
/// [`WireError::status`] is the status to reply with.
#[derive(Debug, Clone, PartialEq, Eq, Error)]
pub enum WireError {
    #[error("bad magic {found:02x?}; expected {expected:02x?}")]
    BadMagic { found: [u8; 4], expected: [u8; 4] },
    #[error("protocol version {found}; this peer speaks {VERSION}")]
    UnsupportedVersion { found: u8, cookie: u64 },
    #[error("reserved header field is {value:#x}; expected 0")]
    ReservedNonZero { value: u32, cookie: u64 },
    #[error("unknown opcode {found}; expected 1..=8")]
    UnknownOpcode { found: u8, cookie: u64 },
    #[error("{opcode} claims a {claimed_bytes}-byte payload; at most {max_bytes} allowed")]
    PayloadTooLarge {
        opcode: Opcode,
        claimed_bytes: u32,
        max_bytes: u32,
        cookie: u64,
    },
    #[error("flags {flags:#06x} not allowed on {opcode}; allowed {allowed:#06x}")]
    BadFlags {
        opcode: Opcode,
        flags: u16,
        allowed: u16,
        cookie: u64,
        consumed_bytes: usize,
    },
    #[error("WRITE length_bytes {length_bytes} differs from payload_len {payload_bytes}")]
    LengthMismatch {
        length_bytes: u32,
        payload_bytes: u32,
        cookie: u64,
        consumed_bytes: usize,
    },
    #[error("{opcode} with length 0; expected a positive length")]
    ZeroLength {
        opcode: Opcode,
        cookie: u64,
        consumed_bytes: usize,
    },
    #[error("READ of {length_bytes} bytes; at most {max_bytes} allowed")]
    ReadTooLarge {
        length_bytes: u32,
        max_bytes: u32,
        cookie: u64,
        consumed_bytes: usize,
    },
    #[error("offset {offset_bytes} + length {length_bytes} overflows a 64-bit byte address")]
    RangeOverflow {
        offset_bytes: u64,
        length_bytes: u32,
        cookie: u64,
        consumed_bytes: usize,
    },
    #[error("{opcode} body: {problem}")]
    BadBody {
        opcode: Opcode,
        problem: BodyError,
        cookie: u64,
        consumed_bytes: usize,
    },
}

impl WireError {
    /// What the server should do with the connection.
    pub fn disposition(&self) -> Disposition {
        use WireError::*;
        match *self {
            BadMagic { .. } => Disposition::Close,
            UnsupportedVersion { cookie, .. }
            | ReservedNonZero { cookie, .. }
            | UnknownOpcode { cookie, .. }
            | PayloadTooLarge { cookie, .. } => Disposition::ReplyThenClose { cookie },
            BadFlags {
                cookie,
                consumed_bytes,
                ..
            }
            | LengthMismatch {
                cookie,
                consumed_bytes,
                ..
            }
            | ZeroLength {
                cookie,
                consumed_bytes,
                ..
            }
            | ReadTooLarge {
                cookie,
                consumed_bytes,
                ..
            }
            | RangeOverflow {
                cookie,
                consumed_bytes,
                ..
            }
            | BadBody {
                cookie,
                consumed_bytes,
                ..
            } => Disposition::ReplyAndContinue {
                cookie,
                consumed_bytes,
            },
        }
    }

    /// The status to put in the error reply.
    pub fn status(&self) -> Status {
        match self {
            WireError::UnsupportedVersion { .. } => Status::UnsupportedVersion,
            WireError::PayloadTooLarge { .. } | WireError::ReadTooLarge { .. } => Status::TooLarge,
            WireError::RangeOverflow { .. } => Status::OutOfRange,
            _ => Status::BadRequest,
        }
    }

    /// The opcode to echo in the error reply, when the header named a known one.
    pub fn opcode(&self) -> Option<Opcode> {
        use WireError::*;
        match *self {
            PayloadTooLarge { opcode, .. }
            | BadFlags { opcode, .. }
            | ZeroLength { opcode, .. }
            | BadBody { opcode, .. } => Some(opcode),
            LengthMismatch { .. } => Some(Opcode::Write),
            ReadTooLarge { .. } => Some(Opcode::Read),
            RangeOverflow { .. } => None,
            _ => None,
        }
    }
}

/// Decode and validate a request header (stage one). `Done.consumed_bytes` is the header only;
/// the payload (`header.payload_len` bytes) follows. Any error here is fatal for the connection.
pub fn decode_request_header(
    buf: &[u8],
    max_payload_bytes: u32,
) -> Result<Decode<RequestHeader>, WireError> {
    if buf.len() >= 4 && buf[..4] != REQUEST_MAGIC {
        return Err(bad_magic(buf, REQUEST_MAGIC));
    }
    if buf.len() < REQUEST_HEADER_BYTES {
        return Ok(Decode::NeedMore {
            total_bytes: REQUEST_HEADER_BYTES,
        });
    }
    let mut r = Reader::new(buf);
    let fields = (|| {
        r.take(4)?;
        Some((
            r.u8()?,
            r.u8()?,
            r.u16_le()?,
            r.u64_le()?,
            r.u32_le()?,
            r.u32_le()?,
            r.u64_le()?,
            r.u32_le()?,
            r.u32_le()?,
        ))
    })();
    let Some((version, op, flags, cookie, handle, payload_len, offset_bytes, length_bytes, rsv)) =
        fields
    else {
        return Ok(Decode::NeedMore {
            total_bytes: REQUEST_HEADER_BYTES,
        });
    };
    if version != VERSION {
        return Err(WireError::UnsupportedVersion {
            found: version,
            cookie,
        });
    }
    if rsv != 0 {
        return Err(WireError::ReservedNonZero { value: rsv, cookie });
    }
    let opcode = Opcode::from_u8(op).ok_or(WireError::UnknownOpcode { found: op, cookie })?;
    let limit = opcode.request_payload_limit_bytes(max_payload_bytes);
    if payload_len > limit {
        return Err(WireError::PayloadTooLarge {
            opcode,
            claimed_bytes: payload_len,
            max_bytes: limit,
            cookie,
        });
    }
    Ok(Decode::Done {
        frame: RequestHeader {
            opcode,
            flags,
            cookie,
            handle,
            payload_len,
            offset_bytes,
            length_bytes,
        },
        consumed_bytes: REQUEST_HEADER_BYTES,
    })
}

fn bad_magic(buf: &[u8], expected: [u8; 4]) -> WireError {
    let mut found = [0u8; 4];
    found.copy_from_slice(&buf[..4]);
    WireError::BadMagic { found, expected }
}

/// A fully decoded, validated request; data payloads borrow from the input buffer.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Request<'a> {
    pub cookie: u64,
    /// Tenant handle from REGISTER (0 = the session's default best-effort flow).
    pub handle: u32,
    pub command: Command<'a>,
}

/// The typed content of a request.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Command<'a> {
    Hello(HelloBody<'a>),
    Register(RegisterBody),
    Unregister,
    Read {
        offset_bytes: u64,
        length_bytes: u32,
    },
    Write {
        offset_bytes: u64,
        mode: WriteMode,
        data: &'a [u8],
    },
    Flush,
    Trim {
        offset_bytes: u64,
        length_bytes: u32,
    },
    Stats,
}

impl Command<'_> {
    /// The opcode this command travels under.
    pub fn opcode(&self) -> Opcode {
        match self {
            Command::Hello(_) => Opcode::Hello,
            Command::Register(_) => Opcode::Register,
            Command::Unregister => Opcode::Unregister,
            Command::Read { .. } => Opcode::Read,
            Command::Write { .. } => Opcode::Write,
            Command::Flush => Opcode::Flush,
            Command::Trim { .. } => Opcode::Trim,
            Command::Stats => Opcode::Stats,
        }
    }
}

/// Decode one complete request from the front of `buf` (both stages). Returns `NeedMore` until
/// the whole frame is present, but only after the header has passed stage one, so the
/// `total_bytes` it asks for is already within the limit.
pub fn decode_request(
    buf: &[u8],
    max_payload_bytes: u32,
) -> Result<Decode<Request<'_>>, WireError> {
    let header = match decode_request_header(buf, max_payload_bytes)? {
        Decode::Done { frame, .. } => frame,
        Decode::NeedMore { total_bytes } => return Ok(Decode::NeedMore { total_bytes }),
    };
    let frame_len = header.frame_len();
    let Some(payload) = buf.get(REQUEST_HEADER_BYTES..frame_len) else {
        return Ok(Decode::NeedMore {
            total_bytes: frame_len,
        });
    };
    let request = validate_request(&header, payload, max_payload_bytes)?;
    Ok(Decode::Done {
        frame: request,
        consumed_bytes: frame_len,
    })
}

/// Stage two: per-request checks of a header whose payload is in hand. Errors here are
/// [`Disposition::ReplyAndContinue`].
pub fn validate_request<'a>(
    header: &RequestHeader,
    payload: &'a [u8],
    max_payload_bytes: u32,
) -> Result<Request<'a>, WireError> {
    let cookie = header.cookie;
    let consumed_bytes = header.frame_len();
    let opcode = header.opcode;
    let allowed = if opcode == Opcode::Write { FLAG_FUA } else { 0 };
    if header.flags & !allowed != 0 {
        return Err(WireError::BadFlags {
            opcode,
            flags: header.flags,
            allowed,
            cookie,
            consumed_bytes,
        });
    }
    let bad_body = |problem| WireError::BadBody {
        opcode,
        problem,
        cookie,
        consumed_bytes,
    };
    let check_range = |offset_bytes: u64, length_bytes: u32| {
        if length_bytes == 0 {
            return Err(WireError::ZeroLength {
                opcode,
                cookie,
                consumed_bytes,
            });
        }
        if offset_bytes.checked_add(u64::from(length_bytes)).is_none() {
            return Err(WireError::RangeOverflow {
                offset_bytes,
                length_bytes,
                cookie,
                consumed_bytes,
            });
        }
        Ok(())
    };
    let command = match opcode {
        Opcode::Hello => Command::Hello(HelloBody::decode(payload).map_err(bad_body)?),
        Opcode::Register => Command::Register(RegisterBody::decode(payload).map_err(bad_body)?),
        Opcode::Unregister => Command::Unregister,
        Opcode::Flush => Command::Flush,
        Opcode::Stats => Command::Stats,
        Opcode::Read => {
            check_range(header.offset_bytes, header.length_bytes)?;
            if header.length_bytes > max_payload_bytes {
                return Err(WireError::ReadTooLarge {
                    length_bytes: header.length_bytes,
                    max_bytes: max_payload_bytes,
                    cookie,
                    consumed_bytes,
                });
            }
            Command::Read {
                offset_bytes: header.offset_bytes,
                length_bytes: header.length_bytes,
            }
        }
        Opcode::Trim => {
            check_range(header.offset_bytes, header.length_bytes)?;
            Command::Trim {
                offset_bytes: header.offset_bytes,
                length_bytes: header.length_bytes,
            }
        }
        Opcode::Write => {
            if header.length_bytes != header.payload_len {
                return Err(WireError::LengthMismatch {
                    length_bytes: header.length_bytes,
                    payload_bytes: header.payload_len,
                    cookie,
                    consumed_bytes,
                });
            }
            check_range(header.offset_bytes, header.length_bytes)?;
            Command::Write {
                offset_bytes: header.offset_bytes,
                mode: if header.flags & FLAG_FUA != 0 {
                    WriteMode::Fua
                } else {
                    WriteMode::WriteBack
                },
                data: payload,
            }
        }
    };
    Ok(Request {
        cookie,
        handle: header.handle,
        command,
    })
}

/// A decoded reply; the payload borrows from the input buffer.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Reply<'a> {
    pub header: ReplyHeader,
    pub payload: &'a [u8],
}

/// Decode and check a reply header (client side). The payload limit depends on the echoed
/// opcode ([`Opcode::reply_payload_limit_bytes`]).
pub fn decode_reply_header(
    buf: &[u8],
    max_payload_bytes: u32,
) -> Result<Decode<ReplyHeader>, WireError> {
    if buf.len() >= 4 && buf[..4] != REPLY_MAGIC {
        return Err(bad_magic(buf, REPLY_MAGIC));
    }
    let mut r = Reader::new(buf);
    let fields = (|| {
        r.take(4)?;
        Some((
            r.u8()?,
            r.u8()?,
            r.u16_le()?,
            r.u64_le()?,
            r.u32_le()?,
            r.u32_le()?,
        ))
    })();
    let Some((version, op, status, cookie, payload_len, rsv)) = fields else {
        return Ok(Decode::NeedMore {
            total_bytes: REPLY_HEADER_BYTES,
        });
    };
    if version != VERSION {
        return Err(WireError::UnsupportedVersion {
            found: version,
            cookie,
        });
    }
    if rsv != 0 {
        return Err(WireError::ReservedNonZero { value: rsv, cookie });
    }
    let opcode = Opcode::from_u8(op).ok_or(WireError::UnknownOpcode { found: op, cookie })?;
    let limit = opcode.reply_payload_limit_bytes(max_payload_bytes);
    if payload_len > limit {
        return Err(WireError::PayloadTooLarge {
            opcode,
            claimed_bytes: payload_len,
            max_bytes: limit,
            cookie,
        });
    }
    Ok(Decode::Done {
        frame: ReplyHeader {
            opcode,
            status: Status::from_u16(status),
            cookie,
            payload_len,
        },
        consumed_bytes: REPLY_HEADER_BYTES,
    })
}

/// Decode one complete reply from the front of `buf`.
pub fn decode_reply(buf: &[u8], max_payload_bytes: u32) -> Result<Decode<Reply<'_>>, WireError> {
    let header = match decode_reply_header(buf, max_payload_bytes)? {
        Decode::Done { frame, .. } => frame,
        Decode::NeedMore { total_bytes } => return Ok(Decode::NeedMore { total_bytes }),
    };
    let frame_len = header.frame_len();
    match buf.get(REPLY_HEADER_BYTES..frame_len) {
        Some(payload) => Ok(Decode::Done {
            frame: Reply { header, payload },
            consumed_bytes: frame_len,
        }),
        None => Ok(Decode::NeedMore {
            total_bytes: frame_len,
        }),
    }
}

fn take_field<'a>(
    r: &mut Reader<'a>,
    field: &'static str,
    n: usize,
) -> Result<&'a [u8], BodyError> {
    let available_bytes = r.remaining();
    r.take(n).ok_or(BodyError::Truncated {
        field,
        needed_bytes: n,
        available_bytes,
    })
}

fn fixed<'a, T>(
    r: &mut Reader<'a>,
    field: &'static str,
    n: usize,
    get: impl FnOnce(&mut Reader<'a>) -> Option<T>,
) -> Result<T, BodyError> {
    let available_bytes = r.remaining();
    get(r).ok_or(BodyError::Truncated {
        field,
        needed_bytes: n,
        available_bytes,
    })
}

fn no_trailing(r: &Reader<'_>) -> Result<(), BodyError> {
    match r.remaining() {
        0 => Ok(()),
        count_bytes => Err(BodyError::TrailingBytes { count_bytes }),
    }
}

fn utf8<'a>(bytes: &'a [u8], field: &'static str) -> Result<&'a str, BodyError> {
    std::str::from_utf8(bytes).map_err(|_| BodyError::NotUtf8 { field })
}

fn bounded(len: usize, field: &'static str, max_bytes: usize) -> Result<(), BodyError> {
    if len > max_bytes {
        return Err(BodyError::TooLong {
            field,
            len_bytes: len,
            max_bytes,
        });
    }
    Ok(())
}

/// HELLO body: `u16 tenant_len, u16 secret_len, u16 volume_len, u16 reserved (0)`, then the
/// tenant name (UTF-8), the secret (bytes) and the volume name (UTF-8), nothing after.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HelloBody<'a> {
    pub tenant: &'a str,
    pub secret: &'a [u8],
    pub volume: &'a str,
}

impl<'a> HelloBody<'a> {
    /// Parse a HELLO payload.
    pub fn decode(payload: &'a [u8]) -> Result<Self, BodyError> {
        let mut r = Reader::new(payload);
        let tenant_len = fixed(&mut r, "tenant_len", 2, Reader::u16_le)? as usize;
        let secret_len = fixed(&mut r, "secret_len", 2, Reader::u16_le)? as usize;
        let volume_len = fixed(&mut r, "volume_len", 2, Reader::u16_le)? as usize;
        let reserved = fixed(&mut r, "reserved", 2, Reader::u16_le)?;
        if reserved != 0 {
            return Err(BodyError::ReservedNonZero {
                field: "reserved",
                value: reserved.into(),
            });
        }
        bounded(tenant_len, "tenant", NAME_MAX_BYTES)?;
        bounded(secret_len, "secret", SECRET_MAX_BYTES)?;
        bounded(volume_len, "volume", NAME_MAX_BYTES)?;
        let tenant = utf8(take_field(&mut r, "tenant", tenant_len)?, "tenant")?;
        let secret = take_field(&mut r, "secret", secret_len)?;
        let volume = utf8(take_field(&mut r, "volume", volume_len)?, "volume")?;
        no_trailing(&r)?;
        Ok(HelloBody {
            tenant,
            secret,
            volume,
        })
    }

    /// Encoded size, for [`RequestHeader::hello`].
    pub fn encoded_len(&self) -> usize {
        HELLO_FIXED_BYTES + self.tenant.len() + self.secret.len() + self.volume.len()
    }

    /// Append the body to `out`. Fails (naming the field) if a field exceeds its limit.
    pub fn encode_into(&self, out: &mut Vec<u8>) -> Result<(), BodyError> {
        bounded(self.tenant.len(), "tenant", NAME_MAX_BYTES)?;
        bounded(self.secret.len(), "secret", SECRET_MAX_BYTES)?;
        bounded(self.volume.len(), "volume", NAME_MAX_BYTES)?;
        out.extend_from_slice(&(self.tenant.len() as u16).to_le_bytes());
        out.extend_from_slice(&(self.secret.len() as u16).to_le_bytes());
        out.extend_from_slice(&(self.volume.len() as u16).to_le_bytes());
        out.extend_from_slice(&0u16.to_le_bytes());
        out.extend_from_slice(self.tenant.as_bytes());
        out.extend_from_slice(self.secret);
        out.extend_from_slice(self.volume.as_bytes());
        Ok(())
    }
}

/// A latency-critical tenant's service-level objective.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Slo {
    /// Target 95th-percentile read latency, nanoseconds.
    pub p95_read_latency_ns: u64,
    /// I/Os per second the tenant will issue and must be served.
    pub iops: u64,
    /// Percentage of reads in its traffic, 0..=100.
    pub read_pct: u8,
    /// Typical request size, bytes (the cost model's size factor).
    pub request_size_bytes: u32,
}

/// The class a flow registers as.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum TenantClass {
    /// Latency-critical, with a reservation derived from its SLO.
    LatencyCritical(Slo),
    /// Best-effort: shares what LC tenants leave.
    BestEffort,
}

/// REGISTER body, [`REGISTER_BODY_BYTES`] = 24: `u8 class (1 = LC, 2 = BE), u8 read_pct,
/// u16 reserved, u32 request_size_bytes, u64 iops, u64 p95_read_latency_ns`. A best-effort
/// registration has all SLO fields 0.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct RegisterBody {
    pub class: TenantClass,
}

const CLASS_LC: u8 = 1;
const CLASS_BE: u8 = 2;

impl RegisterBody {
    /// Parse a REGISTER payload.
    pub fn decode(payload: &[u8]) -> Result<Self, BodyError> {
        let mut r = Reader::new(payload);
        let class = fixed(&mut r, "class", 1, Reader::u8)?;
        let read_pct = fixed(&mut r, "read_pct", 1, Reader::u8)?;
        let reserved = fixed(&mut r, "reserved", 2, Reader::u16_le)?;
        let request_size_bytes = fixed(&mut r, "request_size_bytes", 4, Reader::u32_le)?;
        let iops = fixed(&mut r, "iops", 8, Reader::u64_le)?;
        let p95_read_latency_ns = fixed(&mut r, "p95_read_latency_ns", 8, Reader::u64_le)?;
        no_trailing(&r)?;
        if reserved != 0 {
            return Err(BodyError::ReservedNonZero {
                field: "reserved",
                value: reserved.into(),
            });
        }
        let class = match class {
            CLASS_LC => {
                if read_pct > 100 {
                    return Err(BodyError::BadReadPct { value: read_pct });
                }
                for (field, v) in [
                    ("request_size_bytes", u64::from(request_size_bytes)),
                    ("iops", iops),
                    ("p95_read_latency_ns", p95_read_latency_ns),
                ] {
                    if v == 0 {
                        return Err(BodyError::ZeroSloField { field });
                    }
                }
                TenantClass::LatencyCritical(Slo {
                    p95_read_latency_ns,
                    iops,
                    read_pct,
                    request_size_bytes,
                })
            }
            CLASS_BE => {
                for (field, value) in [
                    ("read_pct", u64::from(read_pct)),
                    ("request_size_bytes", u64::from(request_size_bytes)),
                    ("iops", iops),
                    ("p95_read_latency_ns", p95_read_latency_ns),
                ] {
                    if value != 0 {
                        return Err(BodyError::BestEffortWithSlo { field, value });
                    }
                }
                TenantClass::BestEffort
            }
            value => return Err(BodyError::BadClass { value }),
        };
        Ok(RegisterBody { class })
    }

    /// The body's 24 bytes.
    pub fn encode(&self) -> [u8; REGISTER_BODY_BYTES] {
        let (class, slo) = match self.class {
            TenantClass::LatencyCritical(slo) => (CLASS_LC, slo),
            TenantClass::BestEffort => (
                CLASS_BE,
                Slo {
                    p95_read_latency_ns: 0,
                    iops: 0,
                    read_pct: 0,
                    request_size_bytes: 0,
                },
            ),
        };
        let mut out = [0u8; REGISTER_BODY_BYTES];
        let mut w = ArrayWriter::new(&mut out);
        w.put(&[class, slo.read_pct]);
        w.put(&0u16.to_le_bytes());
        w.put(&slo.request_size_bytes.to_le_bytes());
        w.put(&slo.iops.to_le_bytes());
        w.put(&slo.p95_read_latency_ns.to_le_bytes());
        out
    }
}

/// What a session may do on its volume (its best right anywhere on the volume; the ACL may
/// still deny particular ranges).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Access {
    ReadOnly,
    ReadWrite,
}

/// OK HELLO reply body, [`HELLO_REPLY_BYTES`] = 32: `u64 session_id, u64 volume_size_bytes,
/// u32 block_size_bytes, u32 max_payload_bytes, u8 access (1 = RO, 2 = RW), 7 bytes reserved`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct HelloReply {
    pub session_id: u64,
    pub volume_size_bytes: u64,
    /// Offsets and lengths must be multiples of this (1 = no alignment).
    pub block_size_bytes: u32,
    /// Largest READ/WRITE the server accepts.
    pub max_payload_bytes: u32,
    pub access: Access,
}

impl HelloReply {
    /// Parse an OK HELLO reply payload.
    pub fn decode(payload: &[u8]) -> Result<Self, BodyError> {
        let mut r = Reader::new(payload);
        let session_id = fixed(&mut r, "session_id", 8, Reader::u64_le)?;
        let volume_size_bytes = fixed(&mut r, "volume_size_bytes", 8, Reader::u64_le)?;
        let block_size_bytes = fixed(&mut r, "block_size_bytes", 4, Reader::u32_le)?;
        let max_payload_bytes = fixed(&mut r, "max_payload_bytes", 4, Reader::u32_le)?;
        let access = match fixed(&mut r, "access", 1, Reader::u8)? {
            1 => Access::ReadOnly,
            2 => Access::ReadWrite,
            value => return Err(BodyError::BadAccess { value }),
        };
        let _reserved = take_field(&mut r, "reserved", 7)?;
        no_trailing(&r)?;
        Ok(HelloReply {
            session_id,
            volume_size_bytes,
            block_size_bytes,
            max_payload_bytes,
            access,
        })
    }

    /// The body's 32 bytes.
    pub fn encode(&self) -> [u8; HELLO_REPLY_BYTES] {
        let mut out = [0u8; HELLO_REPLY_BYTES];
        let mut w = ArrayWriter::new(&mut out);
        w.put(&self.session_id.to_le_bytes());
        w.put(&self.volume_size_bytes.to_le_bytes());
        w.put(&self.block_size_bytes.to_le_bytes());
        w.put(&self.max_payload_bytes.to_le_bytes());
        w.put(&[match self.access {
            Access::ReadOnly => 1,
            Access::ReadWrite => 2,
        }]);
        out
    }
}

/// OK REGISTER reply body, [`REGISTER_REPLY_BYTES`] = 8: `u32 handle (never 0), u32 reserved`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct RegisterReply {
    pub handle: u32,
}

impl RegisterReply {
    /// Parse an OK REGISTER reply payload.
    pub fn decode(payload: &[u8]) -> Result<Self, BodyError> {
        let mut r = Reader::new(payload);
        let handle = fixed(&mut r, "handle", 4, Reader::u32_le)?;
        let _reserved = fixed(&mut r, "reserved", 4, Reader::u32_le)?;
        no_trailing(&r)?;
        Ok(RegisterReply { handle })
    }

    /// The body's 8 bytes.
    pub fn encode(&self) -> [u8; REGISTER_REPLY_BYTES] {
        let mut out = [0u8; REGISTER_REPLY_BYTES];
        out[..4].copy_from_slice(&self.handle.to_le_bytes());
        out
    }
}

/// Optional payload of any non-OK reply: `u32 code, UTF-8 message (the rest)`. For `REFUSED`
/// the code is a [`RefusalCode`]; for other statuses it is 0 unless documented otherwise. An
/// empty payload means code 0 and no message.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ErrorBody<'a> {
    pub code: u32,
    pub message: &'a str,
}

impl<'a> ErrorBody<'a> {
    /// Parse an error payload (empty = code 0, no message). Invalid UTF-8 is an error.
    pub fn decode(payload: &'a [u8]) -> Result<Self, BodyError> {
        if payload.is_empty() {
            return Ok(ErrorBody {
                code: 0,
                message: "",
            });
        }
        let mut r = Reader::new(payload);
        let code = fixed(&mut r, "code", 4, Reader::u32_le)?;
        let message = utf8(r.rest(), "message")?;
        Ok(ErrorBody { code, message })
    }

    /// Encoded size; a message longer than the control limit is cut (at a char boundary).
    pub fn encoded_len(&self) -> usize {
        4 + self.clipped_message().len()
    }

    fn clipped_message(&self) -> &'a str {
        let max = CONTROL_PAYLOAD_MAX_BYTES as usize - 4;
        if self.message.len() <= max {
            return self.message;
        }
        let mut end = max;
        while !self.message.is_char_boundary(end) {
            end -= 1;
        }
        &self.message[..end]
    }

    /// Append the body to `out`.
    pub fn encode_into(&self, out: &mut Vec<u8>) {
        out.extend_from_slice(&self.code.to_le_bytes());
        out.extend_from_slice(self.clipped_message().as_bytes());
    }
}
