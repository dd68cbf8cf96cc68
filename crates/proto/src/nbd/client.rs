//! The client side of NBD: the fixed-newstyle handshake and a reader of simple replies, sans I/O.
//!
//! The server side ([`super::handshake`], [`super::transmission`]) answers `nbdinfo`, fio and
//! the kernel; this is the other end, for `ullstack calibrate nbd://…` (which measures a
//! remote export) and the server's own protocol tests. It shares the constants and the
//! request/reply codecs with the server side, so the two ends cannot drift apart.
//!
//! # The handshake ([`ClientHandshake`])
//! server → greeting (18 bytes: `NBDMAGIC`, `IHAVEOPT`, handshake flags); client → its flags
//! (`C_FIXED_NEWSTYLE`, plus `C_NO_ZEROES` if the server offers it), then one option at a
//! time, each answered by option replies (20-byte header — magic `0x0003e889045565a9`, the
//! option, the reply type, the length — then the data) ending in `NBD_REP_ACK` or an error:
//! 1. `NBD_OPT_STRUCTURED_REPLY` if asked for ([`ClientOptions::structured_replies`]); an
//!    error reply means the server keeps simple replies.
//! 2. `NBD_OPT_SET_META_CONTEXT` with `base:allocation` for the export if asked for and
//!    structured replies were accepted (block status needs them); the context id comes back
//!    in `NBD_REP_META_CONTEXT`.
//! 3. `NBD_OPT_GO` for the export with one info request, `NBD_INFO_BLOCK_SIZE` (the client
//!    promises to honour the block sizes it is told); `NBD_REP_INFO` replies carry the size,
//!    the transmission flags and the block sizes, and `NBD_REP_ACK` starts transmission. A
//!    server that answers GO with `NBD_REP_ERR_UNSUP` (older than GO) gets
//!    `NBD_OPT_EXPORT_NAME`, which has no error reply: the server answers size and flags (and
//!    124 zero bytes unless both sides said NO_ZEROES) or closes.
//!
//! Worked example (what `ullstack serve --memory 64MiB` answers): greeting
//! `NBDMAGIC IHAVEOPT 0003`; client → `00000003`, then `IHAVEOPT 00000007 0000000f
//! 00000007 "default" 0001 0003` (GO, 15 bytes: the name, one info request, BLOCK_SIZE);
//! server → `REP_INFO(EXPORT: size 67108864, flags …)`, `REP_INFO(BLOCK_SIZE 1/4096/33554432)`,
//! `REP_ACK`: [`Connected`] with `size_bytes` 67,108,864 and the block sizes.
//!
//! [`ClientHandshake::wanted_bytes`] says how many bytes the frame being read still needs, so a
//! blocking caller reads exactly those and never reads into the transmission phase;
//! [`handshake`] is that blocking caller, over any `Read + Write`.
//!
//! # Replies ([`SimpleReplyReader`])
//! In transmission, without structured replies, every request is answered by a 16-byte simple
//! reply (`0x67446698`, errno, cookie) followed, for a successful READ, by the read's data. The
//! data's length is not in the reply: only the client knows it, from the cookie. The reader
//! takes the byte stream in whatever pieces it arrives, asks the caller for a cookie's data
//! length, skips the data and reports each reply once its last byte is in — the moment a
//! latency measurement should stop its clock.
//!
//! # What it leaves out
//! TLS (`nbds://`), `NBD_OPT_LIST`/`INFO`, extended headers, structured-reply parsing in the
//! streaming reader (a caller that negotiates structured replies reads chunks itself with
//! [`super::transmission::ChunkHeader`]).

use std::io::{Read, Write};

use thiserror::Error;

use super::transmission::{SimpleReply, SIMPLE_REPLY_BYTES};
use super::{
    BlockSizes, TransmissionFlags, FLAG_C_FIXED_NEWSTYLE, FLAG_C_NO_ZEROES, FLAG_FIXED_NEWSTYLE,
    FLAG_NO_ZEROES, IHAVEOPT, INFO_BLOCK_SIZE, INFO_EXPORT, META_BASE_ALLOCATION, NBDMAGIC,
    OPTION_REPLY_MAGIC, OPT_EXPORT_NAME, OPT_GO, OPT_SET_META_CONTEXT, OPT_STRUCTURED_REPLY,
    REP_ACK, REP_ERR_UNKNOWN, REP_ERR_UNSUP, REP_INFO, REP_META_CONTEXT, STRING_MAX_BYTES,
};
use crate::bytes::Reader;

/// Bytes of the server's greeting.
pub const GREETING_BYTES: usize = 18;
/// Bytes of an option reply's header.
pub const OPTION_REPLY_HEADER_BYTES: usize = 20;
/// Longest option reply data the client accepts: the longest a conforming reply to the
/// options sent here can be is a 4,096-byte string plus its 2-byte info type; 64 KiB leaves
/// room for chattier servers and still stops a hostile length before it sizes anything.
pub const MAX_OPTION_REPLY_BYTES: u32 = 64 << 10;
/// Bytes of the answer to `NBD_OPT_EXPORT_NAME` (size, flags) without the zero padding.
const EXPORT_NAME_ANSWER_BYTES: usize = 10;
/// Zero padding after that answer unless both sides said NO_ZEROES.
const EXPORT_NAME_PAD_BYTES: usize = 124;
/// An oldstyle server's second magic (instead of `IHAVEOPT`).
const OLDSTYLE_MAGIC: u64 = 0x0000_4202_8186_1253;

/// What the client asks for.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ClientOptions {
    /// The export's name (empty = the server's default export).
    pub export: String,
    /// Ask for structured replies (needed for block status).
    pub structured_replies: bool,
    /// Ask for the `base:allocation` metadata context (only with structured replies).
    pub base_allocation: bool,
}

impl ClientOptions {
    /// Simple replies, no metadata: what a data path wants.
    pub fn simple(export: &str) -> ClientOptions {
        ClientOptions {
            export: export.to_owned(),
            structured_replies: false,
            base_allocation: false,
        }
    }
}

/// The export the handshake ended in.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Connected {
    pub size_bytes: u64,
    pub flags: TransmissionFlags,
    /// `None` if the server sent no `NBD_INFO_BLOCK_SIZE` (then any 512-byte multiple is fine
    /// by the spec's defaults, and 4 KiB requests always are).
    pub block_sizes: Option<BlockSizes>,
    /// Structured replies were acknowledged.
    pub structured_replies: bool,
    /// The id of `base:allocation` if the server selected it for this export.
    pub base_allocation_id: Option<u32>,
}

/// Why the handshake or the reply stream failed; each names the value and what was expected.
#[derive(Debug, Error)]
pub enum ClientError {
    #[error("greeting magic {found:#018x}; expected NBDMAGIC {NBDMAGIC:#018x}: not an NBD server")]
    NotNbd { found: u64 },
    #[error("second greeting magic {found:#018x}: an oldstyle NBD server; expected IHAVEOPT (fixed newstyle)")]
    Oldstyle { found: u64 },
    #[error("handshake flags {flags:#06x} lack FIXED_NEWSTYLE, which the options need")]
    NotFixedNewstyle { flags: u16 },
    #[error("export {export:?} does not exist on the server ({message})")]
    UnknownExport { export: String, message: String },
    #[error(
        "option {option} for export {export:?} refused with reply {reply_type:#010x} ({message})"
    )]
    Refused {
        export: String,
        option: u32,
        reply_type: u32,
        message: String,
    },
    #[error("NBD protocol: {0}")]
    Protocol(String),
    #[error("NBD connection: {0}")]
    Io(#[from] std::io::Error),
}

/// Where the handshake is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Stage {
    Greeting,
    /// Reading the replies to one option.
    Replies(u32),
    /// Reading the answer to `NBD_OPT_EXPORT_NAME`.
    ExportName,
    Done,
}

/// Result of [`ClientHandshake::receive`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Progress {
    /// Send [`ClientHandshake::pending_output`], then read [`ClientHandshake::wanted_bytes`].
    NeedMore,
    /// Transmission starts.
    Connected(Connected),
}

/// The client's handshake state machine; see the module essay.
#[derive(Debug, Clone)]
pub struct ClientHandshake {
    options: ClientOptions,
    stage: Stage,
    input: Vec<u8>,
    out: Vec<u8>,
    out_pos: usize,
    no_zeroes: bool,
    structured: bool,
    meta_id: Option<u32>,
    export_info: Option<(u64, u16)>,
    block_sizes: Option<BlockSizes>,
}

impl ClientHandshake {
    /// A handshake waiting for the server's greeting. An export name longer than the
    /// protocol's 4,096 bytes is refused here rather than by the server.
    pub fn new(options: ClientOptions) -> Result<ClientHandshake, ClientError> {
        if options.export.len() > STRING_MAX_BYTES {
            return Err(ClientError::Protocol(format!(
                "export name of {} bytes; at most {STRING_MAX_BYTES} allowed",
                options.export.len()
            )));
        }
        Ok(ClientHandshake {
            options,
            stage: Stage::Greeting,
            input: Vec::new(),
            out: Vec::new(),
            out_pos: 0,
            no_zeroes: false,
            structured: false,
            meta_id: None,
            export_info: None,
            block_sizes: None,
        })
    }

    /// Bytes waiting to be sent to the server.
    pub fn pending_output(&self) -> &[u8] {
        &self.out[self.out_pos..]
    }

    /// `n` bytes of [`Self::pending_output`] were sent.
    pub fn consume_output(&mut self, n: usize) {
        self.out_pos = (self.out_pos + n).min(self.out.len());
        if self.out_pos == self.out.len() {
            self.out.clear();
            self.out_pos = 0;
        }
    }

    /// Input bytes the frame being read still needs (0 once connected).
    pub fn wanted_bytes(&self) -> usize {
        let have = self.input.len();
        match self.stage {
            Stage::Greeting => GREETING_BYTES.saturating_sub(have),
            Stage::Replies(_) => {
                if have < OPTION_REPLY_HEADER_BYTES {
                    return OPTION_REPLY_HEADER_BYTES - have;
                }
                let len = u32::from_be_bytes([
                    self.input[16],
                    self.input[17],
                    self.input[18],
                    self.input[19],
                ]) as usize;
                (OPTION_REPLY_HEADER_BYTES + len).saturating_sub(have)
            }
            Stage::ExportName => self.export_name_answer_bytes().saturating_sub(have),
            Stage::Done => 0,
        }
    }

    fn export_name_answer_bytes(&self) -> usize {
        if self.no_zeroes {
            EXPORT_NAME_ANSWER_BYTES
        } else {
            EXPORT_NAME_ANSWER_BYTES + EXPORT_NAME_PAD_BYTES
        }
    }

    /// Takes bytes from the server (any split); parses every complete frame.
    pub fn receive(&mut self, input: &[u8]) -> Result<Progress, ClientError> {
        if self.stage == Stage::Done {
            return Err(ClientError::Protocol(format!(
                "{} bytes from the server after the handshake ended, before any request",
                input.len()
            )));
        }
        self.input.extend_from_slice(input);
        loop {
            match self.stage {
                Stage::Greeting => {
                    if self.input.len() < GREETING_BYTES {
                        return Ok(Progress::NeedMore);
                    }
                    self.greeting()?;
                    self.input.drain(..GREETING_BYTES);
                }
                Stage::Replies(option) => {
                    if self.input.len() < OPTION_REPLY_HEADER_BYTES {
                        return Ok(Progress::NeedMore);
                    }
                    let mut r = Reader::new(&self.input);
                    let (magic, replied_to, reply_type, len) = (
                        r.u64_be().unwrap_or(0),
                        r.u32_be().unwrap_or(0),
                        r.u32_be().unwrap_or(0),
                        r.u32_be().unwrap_or(0),
                    );
                    if magic != OPTION_REPLY_MAGIC {
                        return Err(ClientError::Protocol(format!(
                            "option reply magic {magic:#018x}; expected {OPTION_REPLY_MAGIC:#018x}"
                        )));
                    }
                    if replied_to != option {
                        return Err(ClientError::Protocol(format!(
                            "a reply to option {replied_to} while option {option} was asked"
                        )));
                    }
                    if len > MAX_OPTION_REPLY_BYTES {
                        return Err(ClientError::Protocol(format!(
                            "option reply of {len} bytes; at most {MAX_OPTION_REPLY_BYTES} accepted"
                        )));
                    }
                    let end = OPTION_REPLY_HEADER_BYTES + len as usize;
                    if self.input.len() < end {
                        return Ok(Progress::NeedMore);
                    }
                    let data: Vec<u8> = self.input[OPTION_REPLY_HEADER_BYTES..end].to_vec();
                    self.input.drain(..end);
                    if let Some(done) = self.option_reply(option, reply_type, &data)? {
                        return self.finish(done);
                    }
                }
                Stage::ExportName => {
                    let need = self.export_name_answer_bytes();
                    if self.input.len() < need {
                        return Ok(Progress::NeedMore);
                    }
                    let mut r = Reader::new(&self.input);
                    let size = r.u64_be().unwrap_or(0);
                    let flags = r.u16_be().unwrap_or(0);
                    self.input.drain(..need);
                    self.export_info = Some((size, flags));
                    // EXPORT_NAME cannot negotiate anything else.
                    self.structured = false;
                    self.meta_id = None;
                    let done = self.connected()?;
                    return self.finish(done);
                }
                Stage::Done => return Ok(Progress::NeedMore),
            }
        }
    }

    fn finish(&mut self, done: Connected) -> Result<Progress, ClientError> {
        self.stage = Stage::Done;
        if !self.input.is_empty() {
            return Err(ClientError::Protocol(format!(
                "{} bytes from the server after the handshake ended, before any request",
                self.input.len()
            )));
        }
        Ok(Progress::Connected(done))
    }

    fn greeting(&mut self) -> Result<(), ClientError> {
        let mut r = Reader::new(&self.input);
        let magic = r.u64_be().unwrap_or(0);
        let second = r.u64_be().unwrap_or(0);
        let flags = r.u16_be().unwrap_or(0);
        if magic != NBDMAGIC {
            return Err(ClientError::NotNbd { found: magic });
        }
        if second == OLDSTYLE_MAGIC || second != IHAVEOPT {
            return Err(ClientError::Oldstyle { found: second });
        }
        if flags & FLAG_FIXED_NEWSTYLE == 0 {
            return Err(ClientError::NotFixedNewstyle { flags });
        }
        self.no_zeroes = flags & FLAG_NO_ZEROES != 0;
        let mut client_flags = FLAG_C_FIXED_NEWSTYLE;
        if self.no_zeroes {
            client_flags |= FLAG_C_NO_ZEROES;
        }
        self.out.extend_from_slice(&client_flags.to_be_bytes());
        if self.options.structured_replies {
            self.send_option(OPT_STRUCTURED_REPLY, &[]);
        } else {
            self.send_go();
        }
        Ok(())
    }

    fn send_option(&mut self, option: u32, data: &[u8]) {
        self.out.extend_from_slice(&IHAVEOPT.to_be_bytes());
        self.out.extend_from_slice(&option.to_be_bytes());
        self.out
            .extend_from_slice(&(data.len() as u32).to_be_bytes());
        self.out.extend_from_slice(data);
        self.stage = Stage::Replies(option);
    }

    fn send_go(&mut self) {
        let name = self.options.export.as_bytes();
        let mut data = Vec::with_capacity(8 + name.len());
        data.extend_from_slice(&(name.len() as u32).to_be_bytes());
        data.extend_from_slice(name);
        data.extend_from_slice(&1u16.to_be_bytes());
        data.extend_from_slice(&INFO_BLOCK_SIZE.to_be_bytes());
        self.send_option(OPT_GO, &data);
    }

    fn send_meta_context(&mut self) {
        let name = self.options.export.as_bytes();
        let query = META_BASE_ALLOCATION.as_bytes();
        let mut data = Vec::new();
        data.extend_from_slice(&(name.len() as u32).to_be_bytes());
        data.extend_from_slice(name);
        data.extend_from_slice(&1u32.to_be_bytes());
        data.extend_from_slice(&(query.len() as u32).to_be_bytes());
        data.extend_from_slice(query);
        self.send_option(OPT_SET_META_CONTEXT, &data);
    }

    /// Handles one option reply; `Some` when the handshake is over.
    fn option_reply(
        &mut self,
        option: u32,
        reply_type: u32,
        data: &[u8],
    ) -> Result<Option<Connected>, ClientError> {
        let is_error = reply_type & (1 << 31) != 0;
        match option {
            OPT_STRUCTURED_REPLY => {
                if reply_type == REP_ACK || is_error {
                    self.structured = reply_type == REP_ACK;
                    if self.structured && self.options.base_allocation {
                        self.send_meta_context();
                    } else {
                        self.send_go();
                    }
                }
                Ok(None)
            }
            OPT_SET_META_CONTEXT => {
                if reply_type == REP_META_CONTEXT {
                    let mut r = Reader::new(data);
                    let id = r.u32_be().ok_or_else(|| {
                        ClientError::Protocol(format!(
                            "NBD_REP_META_CONTEXT of {} bytes; expected an id and a name",
                            data.len()
                        ))
                    })?;
                    if r.rest() == META_BASE_ALLOCATION.as_bytes() {
                        self.meta_id = Some(id);
                    }
                } else if reply_type == REP_ACK || is_error {
                    if is_error {
                        self.meta_id = None;
                    }
                    self.send_go();
                }
                Ok(None)
            }
            OPT_GO => match reply_type {
                REP_INFO => {
                    self.info(data)?;
                    Ok(None)
                }
                REP_ACK => self.connected().map(Some),
                REP_ERR_UNSUP => {
                    // A server older than GO: EXPORT_NAME, which cannot negotiate more.
                    let name = self.options.export.clone();
                    self.out.extend_from_slice(&IHAVEOPT.to_be_bytes());
                    self.out.extend_from_slice(&OPT_EXPORT_NAME.to_be_bytes());
                    self.out
                        .extend_from_slice(&(name.len() as u32).to_be_bytes());
                    self.out.extend_from_slice(name.as_bytes());
                    self.stage = Stage::ExportName;
                    Ok(None)
                }
                REP_ERR_UNKNOWN => Err(ClientError::UnknownExport {
                    export: self.options.export.clone(),
                    message: String::from_utf8_lossy(data).into_owned(),
                }),
                t if is_error => Err(ClientError::Refused {
                    export: self.options.export.clone(),
                    option,
                    reply_type: t,
                    message: String::from_utf8_lossy(data).into_owned(),
                }),
                other => Err(ClientError::Protocol(format!(
                    "reply type {other:#x} to NBD_OPT_GO; expected INFO, ACK or an error"
                ))),
            },
            other => Err(ClientError::Protocol(format!(
                "replies to option {other}, which this client never sends"
            ))),
        }
    }

    fn info(&mut self, data: &[u8]) -> Result<(), ClientError> {
        let mut r = Reader::new(data);
        let bad = |what: &str| {
            ClientError::Protocol(format!(
                "NBD_REP_INFO {what} of {} bytes; too short",
                data.len()
            ))
        };
        match r.u16_be() {
            Some(INFO_EXPORT) => {
                let size = r.u64_be().ok_or_else(|| bad("EXPORT"))?;
                let flags = r.u16_be().ok_or_else(|| bad("EXPORT"))?;
                self.export_info = Some((size, flags));
            }
            Some(INFO_BLOCK_SIZE) => {
                let minimum_bytes = r.u32_be().ok_or_else(|| bad("BLOCK_SIZE"))?;
                let preferred_bytes = r.u32_be().ok_or_else(|| bad("BLOCK_SIZE"))?;
                let maximum_bytes = r.u32_be().ok_or_else(|| bad("BLOCK_SIZE"))?;
                self.block_sizes = Some(BlockSizes {
                    minimum_bytes,
                    preferred_bytes,
                    maximum_bytes,
                });
            }
            // NAME, DESCRIPTION and types this client does not know are allowed and ignored.
            Some(_) => {}
            None => return Err(bad("")),
        }
        Ok(())
    }

    fn connected(&self) -> Result<Connected, ClientError> {
        let (size_bytes, flags) = self.export_info.ok_or_else(|| {
            ClientError::Protocol(format!(
                "the server started transmission of {:?} without NBD_INFO_EXPORT (size and flags)",
                self.options.export
            ))
        })?;
        Ok(Connected {
            size_bytes,
            flags: TransmissionFlags::from_bits(flags),
            block_sizes: self.block_sizes,
            structured_replies: self.structured,
            base_allocation_id: if self.structured { self.meta_id } else { None },
        })
    }
}

/// Runs the handshake over a blocking stream, reading exactly what each frame needs.
pub fn handshake<S: Read + Write>(
    stream: &mut S,
    options: ClientOptions,
) -> Result<Connected, ClientError> {
    let mut hs = ClientHandshake::new(options)?;
    let mut buf = Vec::new();
    loop {
        let out = hs.pending_output();
        if !out.is_empty() {
            stream.write_all(out)?;
            stream.flush()?;
            let n = out.len();
            hs.consume_output(n);
        }
        buf.resize(hs.wanted_bytes(), 0);
        stream.read_exact(&mut buf).map_err(|e| match e.kind() {
            std::io::ErrorKind::UnexpectedEof => ClientError::Protocol(
                "the server closed the connection during the handshake".into(),
            ),
            _ => ClientError::Io(e),
        })?;
        if let Progress::Connected(c) = hs.receive(&buf)? {
            return Ok(c);
        }
    }
}

/// Reads a stream of simple replies; see the module essay.
#[derive(Debug, Clone, Default)]
pub struct SimpleReplyReader {
    head: [u8; SIMPLE_REPLY_BYTES],
    have: usize,
    /// The reply whose READ data is being skipped, and the bytes still to come.
    data: Option<(SimpleReply, u64)>,
}

impl SimpleReplyReader {
    pub fn new() -> SimpleReplyReader {
        SimpleReplyReader::default()
    }

    /// Whether the stream is between replies (no partial header or data pending).
    pub fn is_between_replies(&self) -> bool {
        self.have == 0 && self.data.is_none()
    }

    /// Takes the next bytes of the stream. `data_len(cookie)` gives the data length a
    /// successful reply to that cookie carries (a READ's length, 0 otherwise) or `None` for a
    /// cookie the caller never sent; `done` is called once per reply, when its last byte is in.
    pub fn push(
        &mut self,
        mut input: &[u8],
        mut data_len: impl FnMut(u64) -> Option<u32>,
        mut done: impl FnMut(SimpleReply),
    ) -> Result<(), ClientError> {
        while !input.is_empty() {
            if let Some((reply, left)) = self.data {
                let take = (input.len() as u64).min(left);
                input = &input[take as usize..];
                if take == left {
                    self.data = None;
                    done(reply);
                } else {
                    self.data = Some((reply, left - take));
                }
                continue;
            }
            let take = (SIMPLE_REPLY_BYTES - self.have).min(input.len());
            self.head[self.have..self.have + take].copy_from_slice(&input[..take]);
            self.have += take;
            input = &input[take..];
            if self.have < SIMPLE_REPLY_BYTES {
                continue;
            }
            self.have = 0;
            let reply = SimpleReply::decode(&self.head).ok_or_else(|| {
                ClientError::Protocol(format!(
                    "reply magic {:#010x}; expected a simple reply ({:#010x})",
                    u32::from_be_bytes([self.head[0], self.head[1], self.head[2], self.head[3]]),
                    super::SIMPLE_REPLY_MAGIC
                ))
            })?;
            let len = data_len(reply.cookie).ok_or_else(|| {
                ClientError::Protocol(format!(
                    "a reply for cookie {}, which no request in flight has",
                    reply.cookie
                ))
            })?;
            if reply.error == 0 && len > 0 {
                self.data = Some((reply, u64::from(len)));
            } else {
                done(reply);
            }
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::nbd::handshake::{
        ExportRefusal, Handshake, HandshakeEvent, HandshakeLimits, RefusalKind,
    };
    use crate::nbd::transmission::SimpleReply;
    use crate::nbd::{Access, ExportInfo, REP_ERR_POLICY};

    fn export(name: &str) -> ExportInfo {
        ExportInfo {
            name: name.into(),
            description: String::new(),
            size_bytes: 64 << 20,
            flags: TransmissionFlags::builder(Access::ReadWrite)
                .flush(true)
                .fua(true)
                .build(),
            block_sizes: Some(BlockSizes {
                minimum_bytes: 1,
                preferred_bytes: 4096,
                maximum_bytes: 32 << 20,
            }),
        }
    }

    /// Runs the client against the server's own handshake in memory, delivering each side's
    /// output to the other `chunk` bytes at a time; the server knows only `known` and answers
    /// `refusal` for any other name.
    fn exchange(
        options: ClientOptions,
        known: &str,
        chunk: usize,
    ) -> (Result<Connected, ClientError>, Handshake) {
        let mut server = Handshake::new(HandshakeLimits::default());
        let mut client = ClientHandshake::new(options).expect("valid options");
        let mut to_server: Vec<u8> = Vec::new();
        for _round in 0..10_000 {
            let s_out = server.pending_output().to_vec();
            server.consume_output(s_out.len());
            for piece in s_out.chunks(chunk.max(1)) {
                match client.receive(piece) {
                    Ok(Progress::Connected(c)) => return (Ok(c), server),
                    Ok(Progress::NeedMore) => {}
                    Err(e) => return (Err(e), server),
                }
            }
            let c_out = client.pending_output().to_vec();
            client.consume_output(c_out.len());
            to_server.extend_from_slice(&c_out);
            loop {
                let step = server
                    .receive(&to_server)
                    .expect("server accepts the client");
                to_server.drain(..step.consumed_bytes);
                match step.event {
                    Some(HandshakeEvent::ExportRequested(q)) => {
                        let answer = if q.name == known {
                            Ok(export(known))
                        } else {
                            Err(ExportRefusal {
                                kind: RefusalKind::Unknown,
                                message: format!("no export {:?}", q.name),
                            })
                        };
                        server.answer_export(answer);
                    }
                    Some(other) => panic!("unexpected server event {other:?}"),
                    None => break,
                }
                if to_server.is_empty() {
                    break;
                }
            }
        }
        panic!("the handshake did not finish in 10,000 rounds");
    }

    #[test]
    fn go_with_structured_replies_and_block_status_against_the_server() {
        for chunk in [1, 3, 7, 20, 4096] {
            let options = ClientOptions {
                export: "vol".into(),
                structured_replies: true,
                base_allocation: true,
            };
            let (c, server) = exchange(options, "vol", chunk);
            let c = c.expect("connected");
            assert_eq!(c.size_bytes, 64 << 20);
            assert_eq!(c.flags, export("vol").flags);
            assert_eq!(c.block_sizes, export("vol").block_sizes);
            assert!(c.structured_replies);
            assert_eq!(
                c.base_allocation_id,
                Some(crate::nbd::META_BASE_ALLOCATION_ID)
            );
            let n = server.negotiated();
            assert!(n.structured_replies && n.base_allocation, "{n:?}");
        }
    }

    #[test]
    fn simple_go_negotiates_nothing_more() {
        let (c, server) = exchange(ClientOptions::simple(""), "", 5);
        let c = c.expect("connected");
        assert!(!c.structured_replies);
        assert_eq!(c.base_allocation_id, None);
        assert!(!server.negotiated().structured_replies);
    }

    #[test]
    fn an_unknown_export_is_named() {
        let (c, _) = exchange(ClientOptions::simple("nope"), "vol", 64);
        let e = c.expect_err("refused");
        assert!(matches!(e, ClientError::UnknownExport { .. }), "{e:?}");
        let text = e.to_string();
        assert!(
            text.contains("\"nope\"") && text.contains("no export"),
            "{text}"
        );
    }

    #[test]
    fn greetings_that_are_not_fixed_newstyle_are_refused_by_value() {
        let mut hs = ClientHandshake::new(ClientOptions::simple("")).unwrap();
        let e = hs.receive(b"HTTP/1.1 400 Bad Req").unwrap_err();
        assert!(matches!(e, ClientError::NotNbd { .. }), "{e}");
        let mut old = NBDMAGIC.to_be_bytes().to_vec();
        old.extend_from_slice(&OLDSTYLE_MAGIC.to_be_bytes());
        old.extend_from_slice(&[0, 0]);
        let mut hs = ClientHandshake::new(ClientOptions::simple("")).unwrap();
        let e = hs.receive(&old).unwrap_err();
        assert!(e.to_string().contains("oldstyle"), "{e}");
        let mut plain = NBDMAGIC.to_be_bytes().to_vec();
        plain.extend_from_slice(&IHAVEOPT.to_be_bytes());
        plain.extend_from_slice(&0u16.to_be_bytes());
        let mut hs = ClientHandshake::new(ClientOptions::simple("")).unwrap();
        let e = hs.receive(&plain).unwrap_err();
        assert!(e.to_string().contains("FIXED_NEWSTYLE"), "{e}");
    }

    /// Builds one option reply frame.
    fn option_reply(option: u32, reply_type: u32, data: &[u8]) -> Vec<u8> {
        let mut v = OPTION_REPLY_MAGIC.to_be_bytes().to_vec();
        v.extend_from_slice(&option.to_be_bytes());
        v.extend_from_slice(&reply_type.to_be_bytes());
        v.extend_from_slice(&(data.len() as u32).to_be_bytes());
        v.extend_from_slice(data);
        v
    }

    fn greeting(flags: u16) -> Vec<u8> {
        let mut g = NBDMAGIC.to_be_bytes().to_vec();
        g.extend_from_slice(&IHAVEOPT.to_be_bytes());
        g.extend_from_slice(&flags.to_be_bytes());
        g
    }

    #[test]
    fn a_server_without_go_gets_export_name() {
        // Without NO_ZEROES the answer carries 124 zero bytes, which wanted_bytes asks for.
        let mut hs = ClientHandshake::new(ClientOptions::simple("x")).unwrap();
        assert_eq!(hs.wanted_bytes(), GREETING_BYTES);
        assert_eq!(
            hs.receive(&greeting(FLAG_FIXED_NEWSTYLE)).unwrap(),
            Progress::NeedMore
        );
        let sent = hs.pending_output().to_vec();
        assert_eq!(&sent[..4], &FLAG_C_FIXED_NEWSTYLE.to_be_bytes());
        hs.consume_output(sent.len());
        let unsup = option_reply(OPT_GO, REP_ERR_UNSUP, b"");
        assert_eq!(hs.receive(&unsup).unwrap(), Progress::NeedMore);
        let sent = hs.pending_output().to_vec();
        assert_eq!(&sent[8..12], &OPT_EXPORT_NAME.to_be_bytes());
        assert_eq!(&sent[16..], b"x");
        hs.consume_output(sent.len());
        assert_eq!(hs.wanted_bytes(), 134);
        let mut answer = (1u64 << 30).to_be_bytes().to_vec();
        answer.extend_from_slice(&1u16.to_be_bytes());
        answer.extend_from_slice(&[0u8; 124]);
        match hs.receive(&answer).unwrap() {
            Progress::Connected(c) => {
                assert_eq!(c.size_bytes, 1 << 30);
                assert!(!c.structured_replies);
            }
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn refusals_and_lies_are_errors_naming_the_value() {
        let mut hs = ClientHandshake::new(ClientOptions::simple("x")).unwrap();
        hs.receive(&greeting(FLAG_FIXED_NEWSTYLE | FLAG_NO_ZEROES))
            .unwrap();
        let e = hs
            .receive(&option_reply(OPT_GO, REP_ERR_POLICY, b"not for you"))
            .unwrap_err();
        assert!(e.to_string().contains("not for you"), "{e}");
        let mut hs = ClientHandshake::new(ClientOptions::simple("x")).unwrap();
        hs.receive(&greeting(FLAG_FIXED_NEWSTYLE)).unwrap();
        let mut huge = option_reply(OPT_GO, REP_INFO, b"");
        huge[16..20].copy_from_slice(&u32::MAX.to_be_bytes());
        let e = hs.receive(&huge).unwrap_err();
        assert!(e.to_string().contains("4294967295"), "{e}");
        let mut hs = ClientHandshake::new(ClientOptions::simple("x")).unwrap();
        hs.receive(&greeting(FLAG_FIXED_NEWSTYLE)).unwrap();
        let e = hs.receive(&option_reply(OPT_GO, REP_ACK, b"")).unwrap_err();
        assert!(e.to_string().contains("NBD_INFO_EXPORT"), "{e}");
    }

    #[test]
    fn simple_replies_complete_once_their_data_is_in_whatever_the_split() {
        // cookie 1: READ 4096 ok; 2: WRITE ok; 3: READ failed (no data); 4: READ 512 ok.
        let mut stream = Vec::new();
        stream.extend_from_slice(&SimpleReply::ok(1).encode());
        stream.extend_from_slice(&[7u8; 4096]);
        stream.extend_from_slice(&SimpleReply::ok(2).encode());
        stream.extend_from_slice(
            &SimpleReply {
                error: 5,
                cookie: 3,
            }
            .encode(),
        );
        stream.extend_from_slice(&SimpleReply::ok(4).encode());
        stream.extend_from_slice(&[9u8; 512]);
        let len = |c: u64| match c {
            1 => Some(4096),
            2 => Some(0),
            3 => Some(4096),
            4 => Some(512),
            _ => None,
        };
        for chunk in [1, 2, 15, 16, 17, 4095, 4112, stream.len()] {
            let mut r = SimpleReplyReader::new();
            let mut seen = Vec::new();
            let mut ends = Vec::new();
            let mut at = 0;
            for piece in stream.chunks(chunk) {
                at += piece.len();
                r.push(piece, len, |rep| {
                    seen.push((rep.cookie, rep.error));
                    ends.push(at);
                })
                .unwrap();
            }
            assert_eq!(seen, vec![(1, 0), (2, 0), (3, 5), (4, 0)], "chunk {chunk}");
            assert!(r.is_between_replies());
            // A reply is reported in the piece that carries its last byte, not before.
            let last_byte = [4112, 4128, 4144, stream.len()];
            for (end, last) in ends.iter().zip(last_byte) {
                assert!(
                    *end >= last && *end < last + chunk,
                    "chunk {chunk}: {ends:?}"
                );
            }
        }
        let mut r = SimpleReplyReader::new();
        let e = r
            .push(&SimpleReply::ok(99).encode(), len, |_| {})
            .unwrap_err();
        assert!(e.to_string().contains("99"), "{e}");
        let e = SimpleReplyReader::new()
            .push(&[0xab; 16], len, |_| {})
            .unwrap_err();
        assert!(e.to_string().contains("0xabababab"), "{e}");
    }
}
