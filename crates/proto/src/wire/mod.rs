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
//! [`Disposition::Close`]: crate::Disposition::Close
//! [`Disposition::ReplyThenClose`]: crate::Disposition::ReplyThenClose
//! [`Disposition::ReplyAndContinue`]: crate::Disposition::ReplyAndContinue
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
//!
//! # Where each part lives
//! `frames.rs`: the opcodes, the two headers, decoding a request or a reply and why a frame is
//! rejected ([`WireError`]); `status.rs`: the status of a reply and the code of a refusal;
//! `body.rs`: the control bodies (HELLO, REGISTER, their OK replies, the error body).

mod body;
mod frames;
mod status;

pub use crate::Access;
pub use body::{
    BodyError, ErrorBody, HelloBody, HelloReply, RegisterBody, RegisterClass, RegisterReply, Slo,
};
pub use frames::{
    decode_reply, decode_reply_header, decode_request, decode_request_header, validate_request,
    Command, Opcode, Reply, ReplyHeader, Request, RequestHeader, WireError, WriteMode,
};
pub use status::{RefusalCode, Status};

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
