//! NBD transmission phase: request parsing and simple-reply encoding.
//!
//! A request is 28 big-endian bytes — magic `0x25609513`, u16 command flags, u16 type,
//! u64 cookie, u64 offset, u32 length — followed by `length` bytes of data for `NBD_CMD_WRITE`
//! only. A simple reply is 16 bytes — magic `0x67446698`, u32 errno, u64 cookie — followed by
//! `length` bytes of data for a successful `NBD_CMD_READ`.
//!
//! # Worked example
//! `25609513 0001 0001 0000000000000007 0000000000100000 00001000` + 4096 bytes decodes as
//! `WRITE, FUA, cookie 7, offset 1 MiB, length 4096` with the payload borrowed from the input;
//! the reply is [`SimpleReply::ok(7)`](SimpleReply::ok) = `67446698 00000000 0000000000000007`.
//!
//! # Structured replies
//! Once `NBD_OPT_STRUCTURED_REPLY` was negotiated, READ and BLOCK_STATUS are answered in chunks:
//! a 20-byte header — magic `0x668e33ef`, u16 flags (`DONE` = 1 on the last chunk), u16 type,
//! u64 cookie, u32 length — then `length` bytes. This server sends a successful READ as one
//! `OFFSET_DATA` chunk (u64 offset, then the data) with `DONE`, a failed READ or BLOCK_STATUS as
//! one `ERROR` chunk (u32 errno, u16 message length, message) with `DONE`, and a BLOCK_STATUS as
//! one `BLOCK_STATUS` chunk (u32 context id, then (u32 length, u32 flags) per extent) with
//! `DONE`, since it offers one context. Other commands keep simple replies, as the spec allows.
//! Worked example: a 4 KiB READ at 1 MiB, cookie 7, answers
//! `668e33ef 0001 0001 0000000000000007 00001008 0000000000100000` + 4096 bytes.
//!
//! # Limits
//! Only READ and WRITE lengths size a buffer. Both are checked against the caller's
//! `max_payload_bytes` (32 MiB default, [`crate::wire::DEFAULT_MAX_PAYLOAD_BYTES`]) as soon
//! as the 28-byte header is in, before the WRITE payload is awaited: an oversize READ is
//! answered `EINVAL` (simple replies; the spec keeps `EOVERFLOW` for structured ones) and the
//! connection goes on; an oversize WRITE is answered the same and its payload skipped unread
//! if it is at most [`SKIPPABLE_PAYLOAD_BYTES`] (2^25, which the spec says SHOULD NOT be taken
//! for an attack), else the connection is closed. TRIM and WRITE_ZEROES lengths are
//! ranges, not buffers, and are not limited here. Semantic checks against the export (flags the
//! export did not advertise, writes on a read-only export, ranges past the end) are in
//! [`check_request`], separate from framing.

use thiserror::Error;

use super::handshake::Negotiated;
use super::{Errno, TransmissionFlags, REQUEST_MAGIC, SIMPLE_REPLY_MAGIC, STRUCTURED_REPLY_MAGIC};
use crate::bytes::Reader;
use crate::{Decode, Disposition};

/// Size of a request header.
pub const REQUEST_HEADER_BYTES: usize = 28;
/// Size of a simple reply header.
pub const SIMPLE_REPLY_BYTES: usize = 16;

/// Command flag bits.
pub const CMD_FLAG_FUA: u16 = 1 << 0;
pub const CMD_FLAG_NO_HOLE: u16 = 1 << 1;
pub const CMD_FLAG_DF: u16 = 1 << 2;
pub const CMD_FLAG_REQ_ONE: u16 = 1 << 3;
pub const CMD_FLAG_FAST_ZERO: u16 = 1 << 4;

/// The request's command.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum CommandType {
    Read,
    Write,
    /// Soft disconnect: no reply; finish in-flight requests, then close.
    Disc,
    Flush,
    Trim,
    Cache,
    WriteZeroes,
    BlockStatus,
    Resize,
    /// A type this server does not know; answer `EINVAL`.
    Other(u16),
}

impl CommandType {
    /// Decode a wire value.
    pub fn from_u16(value: u16) -> CommandType {
        match value {
            0 => CommandType::Read,
            1 => CommandType::Write,
            2 => CommandType::Disc,
            3 => CommandType::Flush,
            4 => CommandType::Trim,
            5 => CommandType::Cache,
            6 => CommandType::WriteZeroes,
            7 => CommandType::BlockStatus,
            8 => CommandType::Resize,
            v => CommandType::Other(v),
        }
    }
    /// Wire value.
    pub fn to_u16(self) -> u16 {
        match self {
            CommandType::Read => 0,
            CommandType::Write => 1,
            CommandType::Disc => 2,
            CommandType::Flush => 3,
            CommandType::Trim => 4,
            CommandType::Cache => 5,
            CommandType::WriteZeroes => 6,
            CommandType::BlockStatus => 7,
            CommandType::Resize => 8,
            CommandType::Other(v) => v,
        }
    }
}

/// A request header.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RequestHeader {
    pub flags: u16,
    pub command: CommandType,
    pub cookie: u64,
    pub offset_bytes: u64,
    pub length_bytes: u32,
}

impl RequestHeader {
    /// Bytes of payload that follow this header (WRITE only).
    pub fn payload_len(&self) -> usize {
        match self.command {
            CommandType::Write => self.length_bytes as usize,
            _ => 0,
        }
    }

    /// Whether the FUA flag is set.
    pub fn fua(&self) -> bool {
        self.flags & CMD_FLAG_FUA != 0
    }

    /// Encode (for clients and tests).
    pub fn encode(&self) -> [u8; REQUEST_HEADER_BYTES] {
        let mut out = [0u8; REQUEST_HEADER_BYTES];
        out[0..4].copy_from_slice(&REQUEST_MAGIC.to_be_bytes());
        out[4..6].copy_from_slice(&self.flags.to_be_bytes());
        out[6..8].copy_from_slice(&self.command.to_u16().to_be_bytes());
        out[8..16].copy_from_slice(&self.cookie.to_be_bytes());
        out[16..24].copy_from_slice(&self.offset_bytes.to_be_bytes());
        out[24..28].copy_from_slice(&self.length_bytes.to_be_bytes());
        out
    }
}

/// A complete request; a WRITE's data borrows from the input.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Request<'a> {
    pub header: RequestHeader,
    pub payload: &'a [u8],
}

/// A framing problem.
#[derive(Debug, Clone, PartialEq, Eq, Error)]
pub enum TransmissionError {
    #[error("request magic {found:#010x}; expected {REQUEST_MAGIC:#010x}")]
    BadMagic { found: u32 },
    #[error("{command:?} of {length_bytes} bytes; at most {max_bytes} allowed")]
    TooLarge {
        command: CommandType,
        length_bytes: u32,
        max_bytes: u32,
        cookie: u64,
    },
}

/// The largest oversize WRITE payload a server skips instead of closing the connection: the
/// NBD spec says a payload of up to 2^25 bytes SHOULD NOT be considered a denial of service
/// even when it exceeds the advertised maximum.
pub const SKIPPABLE_PAYLOAD_BYTES: u32 = 1 << 25;

impl TransmissionError {
    /// What the server should do with the connection.
    pub fn disposition(&self) -> Disposition {
        match *self {
            TransmissionError::BadMagic { .. } => Disposition::Close,
            // The spec: a payload of at most 2^25 bytes SHOULD NOT be taken for a denial of
            // service, even above the advertised maximum: skip it and go on. Larger: close.
            TransmissionError::TooLarge {
                command: CommandType::Write,
                cookie,
                length_bytes,
                ..
            } if length_bytes <= SKIPPABLE_PAYLOAD_BYTES => Disposition::ReplyAndContinue {
                cookie,
                consumed_bytes: REQUEST_HEADER_BYTES + length_bytes as usize,
            },
            TransmissionError::TooLarge {
                command: CommandType::Write,
                cookie,
                ..
            } => Disposition::ReplyThenClose { cookie },
            TransmissionError::TooLarge { cookie, .. } => Disposition::ReplyAndContinue {
                cookie,
                consumed_bytes: REQUEST_HEADER_BYTES,
            },
        }
    }

    /// The errno for the error reply, when one is sent.
    pub fn errno(&self) -> Errno {
        match self {
            TransmissionError::BadMagic { .. } => Errno::Inval,
            // `NBD_EOVERFLOW` is for structured replies and extended headers (a READ with the
            // DF flag, an oversize effect length); with simple replies an over-length request
            // fails with `NBD_EINVAL`, which every client maps.
            TransmissionError::TooLarge { .. } => Errno::Inval,
        }
    }
}

/// Decode a request header. READ and WRITE lengths are checked against `max_payload_bytes`.
pub fn decode_request_header(
    buf: &[u8],
    max_payload_bytes: u32,
) -> Result<Decode<RequestHeader>, TransmissionError> {
    let mut r = Reader::new(buf);
    if let Some(found) = r.u32_be() {
        if found != REQUEST_MAGIC {
            return Err(TransmissionError::BadMagic { found });
        }
    }
    let fields = (|| {
        Some((
            r.u16_be()?,
            r.u16_be()?,
            r.u64_be()?,
            r.u64_be()?,
            r.u32_be()?,
        ))
    })();
    let Some((flags, command, cookie, offset_bytes, length_bytes)) = fields else {
        return Ok(Decode::NeedMore {
            total_bytes: REQUEST_HEADER_BYTES,
        });
    };
    let command = CommandType::from_u16(command);
    if matches!(command, CommandType::Read | CommandType::Write) && length_bytes > max_payload_bytes
    {
        return Err(TransmissionError::TooLarge {
            command,
            length_bytes,
            max_bytes: max_payload_bytes,
            cookie,
        });
    }
    Ok(Decode::Done {
        frame: RequestHeader {
            flags,
            command,
            cookie,
            offset_bytes,
            length_bytes,
        },
        consumed_bytes: REQUEST_HEADER_BYTES,
    })
}

/// Decode one complete request (header and, for WRITE, its payload).
pub fn decode_request(
    buf: &[u8],
    max_payload_bytes: u32,
) -> Result<Decode<Request<'_>>, TransmissionError> {
    let header = match decode_request_header(buf, max_payload_bytes)? {
        Decode::Done { frame, .. } => frame,
        Decode::NeedMore { total_bytes } => return Ok(Decode::NeedMore { total_bytes }),
    };
    let frame_len = REQUEST_HEADER_BYTES + header.payload_len();
    match buf.get(REQUEST_HEADER_BYTES..frame_len) {
        Some(payload) => Ok(Decode::Done {
            frame: Request { header, payload },
            consumed_bytes: frame_len,
        }),
        None => Ok(Decode::NeedMore {
            total_bytes: frame_len,
        }),
    }
}

/// Check a request against what the export advertised and its size, for a session that
/// negotiated nothing beyond simple replies. See [`check_request_in`].
pub fn check_request(
    header: &RequestHeader,
    flags: TransmissionFlags,
    export_size_bytes: u64,
) -> Result<(), Errno> {
    check_request_in(header, flags, export_size_bytes, Negotiated::default())
}

/// Check a request against what the export advertised, its size and what the session
/// negotiated. `Err` is the errno to reply with; the connection continues. DISC always passes
/// (it has no reply). BLOCK_STATUS needs `base:allocation` selected, a non-zero length inside
/// the export, and no flag but REQ_ONE (and FUA, if advertised, which it ignores).
pub fn check_request_in(
    header: &RequestHeader,
    flags: TransmissionFlags,
    export_size_bytes: u64,
    negotiated: Negotiated,
) -> Result<(), Errno> {
    use CommandType as C;
    let read_only = flags.contains(TransmissionFlags::READ_ONLY);
    let allowed_flags = {
        let mut allowed = 0;
        if flags.contains(TransmissionFlags::SEND_FUA) {
            allowed |= CMD_FLAG_FUA; // valid on every command once negotiated
        }
        if header.command == C::BlockStatus {
            allowed |= CMD_FLAG_REQ_ONE;
        }
        if header.command == C::WriteZeroes {
            allowed |= CMD_FLAG_NO_HOLE;
            if flags.contains(TransmissionFlags::SEND_FAST_ZERO) {
                allowed |= CMD_FLAG_FAST_ZERO;
            }
        }
        allowed
    };
    let supported = match header.command {
        C::Read | C::Disc => true,
        C::Write => true,
        C::Flush => flags.contains(TransmissionFlags::SEND_FLUSH),
        C::Trim => flags.contains(TransmissionFlags::SEND_TRIM),
        C::WriteZeroes => flags.contains(TransmissionFlags::SEND_WRITE_ZEROES),
        C::BlockStatus => negotiated.base_allocation,
        C::Cache | C::Resize | C::Other(_) => false,
    };
    if header.command == C::Disc {
        return Ok(());
    }
    let writes = matches!(header.command, C::Write | C::Trim | C::WriteZeroes);
    if writes && read_only {
        return Err(Errno::Perm);
    }
    if !supported || header.flags & !allowed_flags != 0 {
        return Err(Errno::Inval);
    }
    if header.command == C::BlockStatus && header.length_bytes == 0 {
        return Err(Errno::Inval);
    }
    if matches!(
        header.command,
        C::Read | C::Write | C::Trim | C::WriteZeroes | C::BlockStatus
    ) {
        let end = header
            .offset_bytes
            .checked_add(u64::from(header.length_bytes));
        match end {
            Some(end) if end <= export_size_bytes => {}
            _ if header.command == C::Write || header.command == C::WriteZeroes => {
                return Err(Errno::NoSpc);
            }
            _ => return Err(Errno::Inval),
        }
    }
    Ok(())
}

/// A simple reply header; a successful READ's data follows it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SimpleReply {
    /// 0 on success, else an [`Errno`] value.
    pub error: u32,
    pub cookie: u64,
}

impl SimpleReply {
    /// Success.
    pub fn ok(cookie: u64) -> Self {
        SimpleReply { error: 0, cookie }
    }
    /// Failure with `errno`.
    pub fn error(cookie: u64, errno: Errno) -> Self {
        SimpleReply {
            error: errno.to_u32(),
            cookie,
        }
    }
    /// The 16 bytes, built on the stack.
    pub fn encode(&self) -> [u8; SIMPLE_REPLY_BYTES] {
        let mut out = [0u8; SIMPLE_REPLY_BYTES];
        out[0..4].copy_from_slice(&SIMPLE_REPLY_MAGIC.to_be_bytes());
        out[4..8].copy_from_slice(&self.error.to_be_bytes());
        out[8..16].copy_from_slice(&self.cookie.to_be_bytes());
        out
    }
    /// Decode (for clients and tests). `None` = fewer than 16 bytes or a wrong magic.
    pub fn decode(buf: &[u8]) -> Option<SimpleReply> {
        let mut r = Reader::new(buf);
        if r.u32_be()? != SIMPLE_REPLY_MAGIC {
            return None;
        }
        Some(SimpleReply {
            error: r.u32_be()?,
            cookie: r.u64_be()?,
        })
    }
}

/// Size of a structured reply chunk header.
pub const STRUCTURED_REPLY_HEADER_BYTES: usize = 20;
/// Chunk flag: the last chunk of the reply.
pub const REPLY_FLAG_DONE: u16 = 1 << 0;
/// Chunk types.
pub const REPLY_TYPE_NONE: u16 = 0;
pub const REPLY_TYPE_OFFSET_DATA: u16 = 1;
pub const REPLY_TYPE_OFFSET_HOLE: u16 = 2;
pub const REPLY_TYPE_BLOCK_STATUS: u16 = 5;
pub const REPLY_TYPE_ERROR: u16 = (1 << 15) + 1;
pub const REPLY_TYPE_ERROR_OFFSET: u16 = (1 << 15) + 2;
/// Bytes of an `OFFSET_DATA` chunk before its data: header and offset.
pub const OFFSET_DATA_HEAD_BYTES: usize = STRUCTURED_REPLY_HEADER_BYTES + 8;
/// Bytes of an `ERROR` chunk without a message: header, errno, message length.
pub const ERROR_CHUNK_BYTES: usize = STRUCTURED_REPLY_HEADER_BYTES + 6;
/// Bytes one block-status extent descriptor takes.
pub const EXTENT_BYTES: usize = 8;

/// A structured reply chunk header.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ChunkHeader {
    pub flags: u16,
    pub reply_type: u16,
    pub cookie: u64,
    /// Bytes of chunk payload that follow.
    pub length_bytes: u32,
}

impl ChunkHeader {
    /// The 20 bytes.
    pub fn encode(&self) -> [u8; STRUCTURED_REPLY_HEADER_BYTES] {
        let mut out = [0u8; STRUCTURED_REPLY_HEADER_BYTES];
        out[0..4].copy_from_slice(&STRUCTURED_REPLY_MAGIC.to_be_bytes());
        out[4..6].copy_from_slice(&self.flags.to_be_bytes());
        out[6..8].copy_from_slice(&self.reply_type.to_be_bytes());
        out[8..16].copy_from_slice(&self.cookie.to_be_bytes());
        out[16..20].copy_from_slice(&self.length_bytes.to_be_bytes());
        out
    }

    /// Decode (for clients and tests). `None` = fewer than 20 bytes or a wrong magic.
    pub fn decode(buf: &[u8]) -> Option<ChunkHeader> {
        let mut r = Reader::new(buf);
        if r.u32_be()? != STRUCTURED_REPLY_MAGIC {
            return None;
        }
        Some(ChunkHeader {
            flags: r.u16_be()?,
            reply_type: r.u16_be()?,
            cookie: r.u64_be()?,
            length_bytes: r.u32_be()?,
        })
    }

    /// Whether this is the reply's last chunk.
    pub fn done(&self) -> bool {
        self.flags & REPLY_FLAG_DONE != 0
    }
}

/// The head of a READ's one `OFFSET_DATA` chunk (with `DONE`); `data_len_bytes` of data follow.
pub fn offset_data_head(
    cookie: u64,
    offset_bytes: u64,
    data_len_bytes: u32,
) -> [u8; OFFSET_DATA_HEAD_BYTES] {
    let header = ChunkHeader {
        flags: REPLY_FLAG_DONE,
        reply_type: REPLY_TYPE_OFFSET_DATA,
        cookie,
        length_bytes: 8 + data_len_bytes,
    };
    let mut out = [0u8; OFFSET_DATA_HEAD_BYTES];
    out[..STRUCTURED_REPLY_HEADER_BYTES].copy_from_slice(&header.encode());
    out[STRUCTURED_REPLY_HEADER_BYTES..].copy_from_slice(&offset_bytes.to_be_bytes());
    out
}

/// A final `ERROR` chunk without a message (the errno says it all; no allocation).
pub fn error_chunk(cookie: u64, errno: Errno) -> [u8; ERROR_CHUNK_BYTES] {
    let header = ChunkHeader {
        flags: REPLY_FLAG_DONE,
        reply_type: REPLY_TYPE_ERROR,
        cookie,
        length_bytes: 6,
    };
    let mut out = [0u8; ERROR_CHUNK_BYTES];
    out[..STRUCTURED_REPLY_HEADER_BYTES].copy_from_slice(&header.encode());
    out[20..24].copy_from_slice(&errno.to_u32().to_be_bytes());
    // Message length 0: bytes 24..26 stay zero.
    out
}

/// One block-status extent: `length_bytes` with the context's `flags`
/// (`base:allocation`: [`super::STATE_HOLE`], [`super::STATE_ZERO`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Extent {
    pub length_bytes: u32,
    pub flags: u32,
}

/// Append a final `BLOCK_STATUS` chunk for `context_id` with `extents` to `out`.
pub fn encode_block_status(cookie: u64, context_id: u32, extents: &[Extent], out: &mut Vec<u8>) {
    let length_bytes = 4 + extents.len() * EXTENT_BYTES;
    let header = ChunkHeader {
        flags: REPLY_FLAG_DONE,
        reply_type: REPLY_TYPE_BLOCK_STATUS,
        cookie,
        length_bytes: u32::try_from(length_bytes).unwrap_or(u32::MAX),
    };
    out.reserve(STRUCTURED_REPLY_HEADER_BYTES + length_bytes);
    out.extend_from_slice(&header.encode());
    out.extend_from_slice(&context_id.to_be_bytes());
    for e in extents {
        out.extend_from_slice(&e.length_bytes.to_be_bytes());
        out.extend_from_slice(&e.flags.to_be_bytes());
    }
}

/// Decode a `BLOCK_STATUS` chunk payload into its context id and extents (clients, tests).
/// `None` = shorter than 4 bytes or not a whole number of extents.
pub fn decode_block_status(payload: &[u8]) -> Option<(u32, Vec<Extent>)> {
    let mut r = Reader::new(payload);
    let id = r.u32_be()?;
    if !r.remaining().is_multiple_of(EXTENT_BYTES) {
        return None;
    }
    let mut extents = Vec::with_capacity(r.remaining() / EXTENT_BYTES);
    while r.remaining() > 0 {
        extents.push(Extent {
            length_bytes: r.u32_be()?,
            flags: r.u32_be()?,
        });
    }
    Some((id, extents))
}
