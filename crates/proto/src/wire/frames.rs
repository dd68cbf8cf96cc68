//! Frames: what a request asks for ([`Opcode`]), the request and reply headers, decoding a
//! whole request or reply in two stages, and why a frame is rejected ([`WireError`]).

use thiserror::Error;

use super::{
    BodyError, HelloBody, RegisterBody, Status, CONTROL_PAYLOAD_MAX_BYTES, FLAG_FUA,
    REGISTER_BODY_BYTES, REPLY_HEADER_BYTES, REPLY_MAGIC, REQUEST_HEADER_BYTES, REQUEST_MAGIC,
    STATS_PAYLOAD_MAX_BYTES, VERSION,
};
use crate::bytes::{ArrayWriter, Reader};
use crate::{Decode, Disposition};

/// What a request asks for.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[repr(u8)]
pub enum Opcode {
    /// Authenticate and open a volume. Body: [`HelloBody`]. Reply:
    /// [`HelloReply`](super::HelloReply).
    Hello = 1,
    /// Register a tenant flow with a class and SLO. Body: [`RegisterBody`]. Reply:
    /// [`RegisterReply`](super::RegisterReply) or `REFUSED` with an
    /// [`ErrorBody`](super::ErrorBody) whose code is a [`RefusalCode`](super::RefusalCode).
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
    let Some((opening, (handle, payload_len, offset_bytes, length_bytes, reserved))) =
        read_header(buf, REQUEST_MAGIC, REQUEST_HEADER_BYTES, |r| {
            Some((
                r.u32_le()?,
                r.u32_le()?,
                r.u64_le()?,
                r.u32_le()?,
                r.u32_le()?,
            ))
        })?
    else {
        return Ok(Decode::NeedMore {
            total_bytes: REQUEST_HEADER_BYTES,
        });
    };
    let opcode = check_header(&opening, payload_len, reserved, |opcode| {
        opcode.request_payload_limit_bytes(max_payload_bytes)
    })?;
    Ok(Decode::Done {
        frame: RequestHeader {
            opcode,
            flags: opening.word,
            cookie: opening.cookie,
            handle,
            payload_len,
            offset_bytes,
            length_bytes,
        },
        consumed_bytes: REQUEST_HEADER_BYTES,
    })
}

/// What every header opens with after its magic: the version, the opcode, a 16-bit word (a
/// request's flags, a reply's status) and the cookie.
struct Opening {
    version: u8,
    op: u8,
    word: u16,
    cookie: u64,
}

/// The header at the front of `buf` once all `header_bytes` of it are in (`None` until then):
/// its [`Opening`], and the fields `rest` reads after it. A wrong magic is refused as soon as
/// its four bytes are in.
fn read_header<T>(
    buf: &[u8],
    magic: [u8; 4],
    header_bytes: usize,
    rest: impl FnOnce(&mut Reader<'_>) -> Option<T>,
) -> Result<Option<(Opening, T)>, WireError> {
    if buf.len() >= 4 && buf[..4] != magic {
        let mut found = [0u8; 4];
        found.copy_from_slice(&buf[..4]);
        return Err(WireError::BadMagic {
            found,
            expected: magic,
        });
    }
    if buf.len() < header_bytes {
        return Ok(None);
    }
    let mut r = Reader::new(buf);
    r.take(magic.len());
    let (Some(version), Some(op), Some(word), Some(cookie)) =
        (r.u8(), r.u8(), r.u16_le(), r.u64_le())
    else {
        return Ok(None);
    };
    let opening = Opening {
        version,
        op,
        word,
        cookie,
    };
    Ok(rest(&mut r).map(|rest| (opening, rest)))
}

/// The checks a request header and a reply header share, in this order: the version, the
/// reserved field, the opcode, and `payload_len` against `limit` for that opcode. A failure is
/// fatal for the connection: the stream can no longer be trusted.
fn check_header(
    opening: &Opening,
    payload_len: u32,
    reserved: u32,
    limit: impl FnOnce(Opcode) -> u32,
) -> Result<Opcode, WireError> {
    let cookie = opening.cookie;
    if opening.version != VERSION {
        return Err(WireError::UnsupportedVersion {
            found: opening.version,
            cookie,
        });
    }
    if reserved != 0 {
        return Err(WireError::ReservedNonZero {
            value: reserved,
            cookie,
        });
    }
    let found = opening.op;
    let opcode = Opcode::from_u8(found).ok_or(WireError::UnknownOpcode { found, cookie })?;
    let max_bytes = limit(opcode);
    if payload_len > max_bytes {
        return Err(WireError::PayloadTooLarge {
            opcode,
            claimed_bytes: payload_len,
            max_bytes,
            cookie,
        });
    }
    Ok(opcode)
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
    let Some((opening, (payload_len, reserved))) =
        read_header(buf, REPLY_MAGIC, REPLY_HEADER_BYTES, |r| {
            Some((r.u32_le()?, r.u32_le()?))
        })?
    else {
        return Ok(Decode::NeedMore {
            total_bytes: REPLY_HEADER_BYTES,
        });
    };
    let opcode = check_header(&opening, payload_len, reserved, |opcode| {
        opcode.reply_payload_limit_bytes(max_payload_bytes)
    })?;
    Ok(Decode::Done {
        frame: ReplyHeader {
            opcode,
            status: Status::from_u16(opening.word),
            cookie: opening.cookie,
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
