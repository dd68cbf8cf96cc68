//! The NBD fixed-newstyle handshake as a sans-I/O state machine (server side).
//!
//! # How a server drives it
//! ```text
//! let mut hs = Handshake::new(HandshakeLimits::default());   // greeting queued
//! loop {
//!     write(hs.pending_output()); hs.consume_output(n_written);
//!     let step = hs.receive(&inbuf)?;  inbuf.drain(..step.consumed_bytes);
//!     match step.event {
//!         Some(ExportRequested(q)) => hs.answer_export(lookup(&q.name)),
//!         Some(ListRequested)      => hs.answer_list(&exports),
//!         Some(Transmission { export }) => break,   // remaining inbuf = first requests
//!         Some(Closed(_))          => { flush output; close }
//!         None                     => read more into inbuf,
//!     }
//! }
//! ```
//! [`Handshake::receive`] consumes as much input as it can and stops at the first event that
//! needs the server (an export lookup, a list) or ends the phase. While an answer is pending it
//! consumes nothing. Option data is only consumed when complete, so the caller's input buffer
//! holds at most one option (bounded by [`HandshakeLimits::max_option_bytes`]); a longer option
//! is skipped in pieces as it arrives and answered `NBD_REP_ERR_TOO_BIG`, except
//! `NBD_OPT_EXPORT_NAME`, which cannot carry an error and so ends the session.
//!
//! # Choices, each per the NBD spec
//! * Greeting flags `FIXED_NEWSTYLE | NO_ZEROES`; client flags other than those two bits close
//!   the session (the spec's MUST). A client without `C_FIXED_NEWSTYLE` may still send
//!   `NBD_OPT_EXPORT_NAME`; any other option from it closes the session, since it could not
//!   parse an option reply.
//! * `NBD_OPT_INFO`/`NBD_OPT_GO`: replies `NBD_REP_INFO` with `NBD_INFO_EXPORT` always,
//!   `NBD_INFO_NAME` and `NBD_INFO_DESCRIPTION` when asked, `NBD_INFO_BLOCK_SIZE` whenever the
//!   export has block sizes (as qemu's server does), then `NBD_REP_ACK`; GO then enters
//!   transmission. Refusals become `NBD_REP_ERR_UNKNOWN` / `POLICY` / `SHUTDOWN` with a message.
//! * `NBD_OPT_LIST`: one `NBD_REP_SERVER` per export, then `NBD_REP_ACK`.
//! * `NBD_OPT_ABORT`: `NBD_REP_ACK`, then the session closes.
//! * `NBD_OPT_STRUCTURED_REPLY` (no data): `NBD_REP_ACK`; READ and BLOCK_STATUS then answer in
//!   chunks. `NBD_OPT_LIST_META_CONTEXT` / `SET_META_CONTEXT` know one context,
//!   `base:allocation`: LIST with no query or a `base:` / `base:allocation` query lists it;
//!   SET selects it when named exactly (id [`META_BASE_ALLOCATION_ID`]) and needs structured
//!   replies first (`NBD_REP_ERR_INVALID` otherwise); every SET replaces the previous
//!   selection. The selection is tied to the export name it was made for: a GO or EXPORT_NAME
//!   for another name enters transmission without it (the export names themselves are checked
//!   at GO, not here).
//! * `NBD_OPT_STARTTLS` (no data), only with [`TlsPolicy::Required`]: `NBD_REP_ACK` sent in
//!   clear, then [`HandshakeEvent::StartTls`]; the server runs TLS and feeds the decrypted
//!   bytes back. Everything negotiated before it (structured replies, meta contexts) is
//!   forgotten. Before TLS, every other option but ABORT is answered `NBD_REP_ERR_TLS_REQD`
//!   and `NBD_OPT_EXPORT_NAME` closes the session (the spec's FORCEDTLS mode). A second
//!   STARTTLS is `NBD_REP_ERR_INVALID`; STARTTLS on a server without TLS is `NBD_REP_ERR_UNSUP`.
//! * Everything else (extended headers, unknown numbers): `NBD_REP_ERR_UNSUP` with a message
//!   naming the option.
//! * At most [`HandshakeLimits::max_options`] options per session, so a client cannot keep a
//!   handshake slot forever by looping on LIST (the server's handshake timeout is the other
//!   guard).

use thiserror::Error;

use super::{
    ExportInfo, FLAG_C_FIXED_NEWSTYLE, FLAG_C_NO_ZEROES, FLAG_FIXED_NEWSTYLE, FLAG_NO_ZEROES,
    IHAVEOPT, INFO_BLOCK_SIZE, INFO_DESCRIPTION, INFO_EXPORT, INFO_NAME, META_BASE_ALLOCATION,
    META_BASE_ALLOCATION_ID, NBDMAGIC, OPTION_REPLY_MAGIC, OPT_ABORT, OPT_EXPORT_NAME, OPT_GO,
    OPT_INFO, OPT_LIST, OPT_LIST_META_CONTEXT, OPT_SET_META_CONTEXT, OPT_STARTTLS,
    OPT_STRUCTURED_REPLY, REP_ACK, REP_ERR_INVALID, REP_ERR_POLICY, REP_ERR_SHUTDOWN,
    REP_ERR_TLS_REQD, REP_ERR_TOO_BIG, REP_ERR_UNKNOWN, REP_ERR_UNSUP, REP_INFO, REP_META_CONTEXT,
    REP_SERVER, STRING_MAX_BYTES,
};
use crate::bytes::Reader;

/// Size of the server's greeting.
pub const GREETING_BYTES: usize = 18;
/// Size of an option header (`IHAVEOPT`, option, length).
pub const OPTION_HEADER_BYTES: usize = 16;
/// Default largest option payload held in memory: a 4096-byte name plus INFO's framing and
/// a generous list of info requests.
pub const DEFAULT_MAX_OPTION_BYTES: u32 = 8192;
/// Default largest number of options per session.
pub const DEFAULT_MAX_OPTIONS: u32 = 1024;
/// Zero padding after an EXPORT_NAME reply when the client did not ask for NO_ZEROES.
const EXPORT_NAME_PAD_BYTES: usize = 124;

/// Bounds on what a client can make the handshake hold or do.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct HandshakeLimits {
    /// Largest option payload buffered; longer ones are discarded and refused.
    pub max_option_bytes: u32,
    /// Options after which the session is closed.
    pub max_options: u32,
}

impl Default for HandshakeLimits {
    fn default() -> Self {
        HandshakeLimits {
            max_option_bytes: DEFAULT_MAX_OPTION_BYTES,
            max_options: DEFAULT_MAX_OPTIONS,
        }
    }
}

/// Whether the server insists on TLS before anything but `NBD_OPT_STARTTLS` and `NBD_OPT_ABORT`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum TlsPolicy {
    /// No TLS: `NBD_OPT_STARTTLS` is answered `NBD_REP_ERR_UNSUP`.
    #[default]
    Off,
    /// The spec's FORCEDTLS mode: every other option before TLS is answered
    /// `NBD_REP_ERR_TLS_REQD` (`NBD_OPT_EXPORT_NAME`, which cannot carry an error, closes).
    Required,
}

/// What the client negotiated for the transmission phase ([`Handshake::negotiated`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Negotiated {
    /// `NBD_OPT_STRUCTURED_REPLY` was acknowledged: READ and BLOCK_STATUS answer in chunks.
    pub structured_replies: bool,
    /// `base:allocation` was selected (id [`META_BASE_ALLOCATION_ID`]) for the export that
    /// entered transmission: `NBD_CMD_BLOCK_STATUS` is allowed.
    pub base_allocation: bool,
    /// The session runs over TLS (STARTTLS was acknowledged).
    pub tls: bool,
}

/// Which option asked about an export.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ExportPurpose {
    /// `NBD_OPT_INFO`: describe it, stay in negotiation.
    Info,
    /// `NBD_OPT_GO`: describe it and start transmission.
    Go,
    /// `NBD_OPT_EXPORT_NAME`: start transmission; a refusal closes the session.
    ExportName,
}

/// A client's question about an export, to be answered with [`Handshake::answer_export`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ExportQuery {
    /// The name as sent; empty = the default export.
    pub name: String,
    pub purpose: ExportPurpose,
    /// Which `NBD_INFO_*` items the client listed (always empty for EXPORT_NAME).
    pub requested: InfoRequests,
}

/// The `NBD_INFO_*` items a client listed in INFO/GO.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct InfoRequests {
    pub name: bool,
    pub description: bool,
    /// The client will honour the advertised minimum and maximum block sizes.
    pub block_size: bool,
}

/// Why the server will not serve an export.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RefusalKind {
    /// No such export (`NBD_REP_ERR_UNKNOWN`).
    Unknown,
    /// Exists, but not for this client (`NBD_REP_ERR_POLICY`).
    Policy,
    /// The server is draining (`NBD_REP_ERR_SHUTDOWN`).
    ShuttingDown,
}

/// A refusal with a message for the human at the client.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ExportRefusal {
    pub kind: RefusalKind,
    pub message: String,
}

/// Something the server must know about or act on.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum HandshakeEvent {
    /// Answer with [`Handshake::answer_export`] before calling `receive` again.
    ExportRequested(ExportQuery),
    /// Answer with [`Handshake::answer_list`] before calling `receive` again.
    ListRequested,
    /// Negotiation is over; input after the consumed bytes belongs to the transmission phase.
    /// `info` is what the server answered for this export.
    Transmission { info: ExportInfo },
    /// The session ends: send what [`Handshake::pending_output`] holds, then close.
    Closed(CloseReason),
    /// `NBD_OPT_STARTTLS` was acknowledged: send what [`Handshake::pending_output`] holds in
    /// clear, then run the server side of a TLS handshake; every byte after the consumed input
    /// is TLS, and the option haggling goes on inside it (call `receive` with plaintext).
    StartTls,
}

/// Why the handshake ended without transmission.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CloseReason {
    /// The client sent `NBD_OPT_ABORT` (acknowledged).
    Aborted,
    /// `NBD_OPT_EXPORT_NAME` was refused; the protocol has no way to say so but closing.
    ExportNameRefused,
    /// `NBD_OPT_EXPORT_NAME` before TLS on a server that requires TLS (the spec's MUST
    /// terminate: the option cannot carry `NBD_REP_ERR_TLS_REQD`).
    TlsRequired,
}

/// Result of one [`Handshake::receive`] call.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Step {
    /// Bytes of the input that were used; drop them from the front of the buffer.
    pub consumed_bytes: usize,
    /// `None` = all usable input consumed; read more.
    pub event: Option<HandshakeEvent>,
}

/// The client broke the protocol badly enough that the session must be closed at once.
#[derive(Debug, Clone, PartialEq, Eq, Error)]
pub enum HandshakeError {
    #[error("client flags {flags:#010x}; expected only bits {allowed:#x} (C_FIXED_NEWSTYLE|C_NO_ZEROES)")]
    BadClientFlags { flags: u32, allowed: u32 },
    #[error("option magic {found:#018x}; expected IHAVEOPT {IHAVEOPT:#018x}")]
    BadOptionMagic { found: u64 },
    #[error("NBD_OPT_EXPORT_NAME of {len_bytes} bytes; at most {max_bytes} allowed")]
    ExportNameTooLong { len_bytes: u32, max_bytes: u32 },
    #[error(
        "option {option} from a client without C_FIXED_NEWSTYLE; only EXPORT_NAME (1) is allowed"
    )]
    NotFixedNewstyle { option: u32 },
    #[error("more than {max_options} options in one handshake")]
    TooManyOptions { max_options: u32 },
}

/// Where the handshake is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Phase {
    /// Consuming input.
    Negotiating,
    /// Stopped at an event; waiting for the server's answer.
    AwaitingAnswer,
    /// Done; transmission follows.
    Transmission,
    /// Done; close after flushing output.
    Closed,
}

#[derive(Debug, Clone, PartialEq, Eq)]
enum State {
    ClientFlags,
    OptionHeader,
    OptionData { option: u32, len: u32 },
    Discard { option: u32, remaining: u32 },
    AwaitExport(ExportQuery),
    AwaitList,
    Transmission,
    Closed,
}

/// The handshake state machine; see the module essay.
#[derive(Debug, Clone)]
pub struct Handshake {
    limits: HandshakeLimits,
    state: State,
    fixed_newstyle: bool,
    no_zeroes: bool,
    options_seen: u32,
    tls_policy: TlsPolicy,
    tls_active: bool,
    structured: bool,
    /// The export `NBD_OPT_SET_META_CONTEXT` last selected `base:allocation` for.
    meta_export: Option<String>,
    negotiated: Negotiated,
    out: Vec<u8>,
    out_pos: usize,
}

impl Handshake {
    /// A new handshake without TLS, the greeting already queued for output.
    pub fn new(limits: HandshakeLimits) -> Self {
        Self::with_tls(limits, TlsPolicy::Off)
    }

    /// A new handshake with the given TLS policy, the greeting already queued for output.
    pub fn with_tls(limits: HandshakeLimits, tls_policy: TlsPolicy) -> Self {
        let mut out = Vec::with_capacity(256);
        out.extend_from_slice(&NBDMAGIC.to_be_bytes());
        out.extend_from_slice(&IHAVEOPT.to_be_bytes());
        out.extend_from_slice(&(FLAG_FIXED_NEWSTYLE | FLAG_NO_ZEROES).to_be_bytes());
        debug_assert_eq!(out.len(), GREETING_BYTES);
        Handshake {
            limits,
            state: State::ClientFlags,
            fixed_newstyle: false,
            no_zeroes: false,
            options_seen: 0,
            tls_policy,
            tls_active: false,
            structured: false,
            meta_export: None,
            negotiated: Negotiated::default(),
            out,
            out_pos: 0,
        }
    }

    /// Bytes waiting to be sent to the client.
    pub fn pending_output(&self) -> &[u8] {
        &self.out[self.out_pos..]
    }

    /// Mark `n` bytes of [`Self::pending_output`] as sent.
    pub fn consume_output(&mut self, n: usize) {
        self.out_pos = (self.out_pos + n).min(self.out.len());
        if self.out_pos == self.out.len() {
            self.out.clear();
            self.out_pos = 0;
        }
    }

    /// Where the handshake is.
    pub fn phase(&self) -> Phase {
        match self.state {
            State::AwaitExport(_) | State::AwaitList => Phase::AwaitingAnswer,
            State::Transmission => Phase::Transmission,
            State::Closed => Phase::Closed,
            _ => Phase::Negotiating,
        }
    }

    /// What was negotiated for transmission; meaningful once
    /// [`HandshakeEvent::Transmission`] was returned.
    pub fn negotiated(&self) -> Negotiated {
        self.negotiated
    }

    /// Whether the session runs over TLS.
    pub fn tls_active(&self) -> bool {
        self.tls_active
    }

    /// Whether the client asked to omit the 124 zero bytes.
    pub fn client_no_zeroes(&self) -> bool {
        self.no_zeroes
    }

    /// Consume what input can be consumed; stop at the first event.
    pub fn receive(&mut self, input: &[u8]) -> Result<Step, HandshakeError> {
        let mut pos = 0usize;
        loop {
            let avail = &input[pos..];
            match self.state.clone() {
                State::ClientFlags => {
                    let Some(flags) = Reader::new(avail).u32_be() else {
                        return Ok(Self::step(pos, None));
                    };
                    pos += 4;
                    let allowed = FLAG_C_FIXED_NEWSTYLE | FLAG_C_NO_ZEROES;
                    if flags & !allowed != 0 {
                        self.state = State::Closed;
                        return Err(HandshakeError::BadClientFlags { flags, allowed });
                    }
                    self.fixed_newstyle = flags & FLAG_C_FIXED_NEWSTYLE != 0;
                    self.no_zeroes = flags & FLAG_C_NO_ZEROES != 0;
                    self.state = State::OptionHeader;
                }
                State::OptionHeader => {
                    let mut r = Reader::new(avail);
                    let (Some(magic), Some(option), Some(len)) =
                        (r.u64_be(), r.u32_be(), r.u32_be())
                    else {
                        return Ok(Self::step(pos, None));
                    };
                    pos += OPTION_HEADER_BYTES;
                    if magic != IHAVEOPT {
                        self.state = State::Closed;
                        return Err(HandshakeError::BadOptionMagic { found: magic });
                    }
                    self.options_seen += 1;
                    if self.options_seen > self.limits.max_options {
                        self.state = State::Closed;
                        return Err(HandshakeError::TooManyOptions {
                            max_options: self.limits.max_options,
                        });
                    }
                    if !self.fixed_newstyle && option != OPT_EXPORT_NAME {
                        self.state = State::Closed;
                        return Err(HandshakeError::NotFixedNewstyle { option });
                    }
                    if len > self.limits.max_option_bytes {
                        if option == OPT_EXPORT_NAME {
                            self.state = State::Closed;
                            return Err(HandshakeError::ExportNameTooLong {
                                len_bytes: len,
                                max_bytes: self.limits.max_option_bytes,
                            });
                        }
                        self.state = State::Discard {
                            option,
                            remaining: len,
                        };
                    } else {
                        self.state = State::OptionData { option, len };
                    }
                }
                State::Discard { option, remaining } => {
                    let n = avail.len().min(remaining as usize);
                    pos += n;
                    let remaining = remaining - n as u32;
                    if remaining > 0 {
                        self.state = State::Discard { option, remaining };
                        return Ok(Self::step(pos, None));
                    }
                    let msg = format!(
                        "option {option} data exceeds this server's {} byte limit",
                        self.limits.max_option_bytes
                    );
                    self.option_reply(option, REP_ERR_TOO_BIG, msg.as_bytes());
                    self.state = State::OptionHeader;
                }
                State::OptionData { option, len } => {
                    let Some(data) = avail.get(..len as usize) else {
                        return Ok(Self::step(pos, None));
                    };
                    pos += len as usize;
                    self.state = State::OptionHeader;
                    if let Some(event) = self.handle_option(option, data) {
                        return Ok(Self::step(pos, Some(event)));
                    }
                }
                State::AwaitExport(_) | State::AwaitList | State::Transmission | State::Closed => {
                    return Ok(Self::step(pos, None));
                }
            }
        }
    }

    fn step(consumed_bytes: usize, event: Option<HandshakeEvent>) -> Step {
        Step {
            consumed_bytes,
            event,
        }
    }

    fn handle_option(&mut self, option: u32, data: &[u8]) -> Option<HandshakeEvent> {
        let tls_missing = self.tls_policy == TlsPolicy::Required && !self.tls_active;
        if tls_missing && !matches!(option, OPT_STARTTLS | OPT_ABORT) {
            if option == OPT_EXPORT_NAME {
                self.state = State::Closed;
                return Some(HandshakeEvent::Closed(CloseReason::TlsRequired));
            }
            let msg =
                format!("option {option} refused: this server requires NBD_OPT_STARTTLS first");
            self.option_reply(option, REP_ERR_TLS_REQD, msg.as_bytes());
            return None;
        }
        match option {
            OPT_STARTTLS => {
                let refusal = if !data.is_empty() {
                    Some((
                        REP_ERR_INVALID,
                        format!(
                            "NBD_OPT_STARTTLS carries {} bytes; expected none",
                            data.len()
                        ),
                    ))
                } else if self.tls_policy == TlsPolicy::Off {
                    Some((
                        REP_ERR_UNSUP,
                        "NBD_OPT_STARTTLS: this server has no TLS configured".to_owned(),
                    ))
                } else if self.tls_active {
                    Some((
                        REP_ERR_INVALID,
                        "NBD_OPT_STARTTLS: TLS is already active".to_owned(),
                    ))
                } else {
                    None
                };
                if let Some((rep, msg)) = refusal {
                    self.option_reply(option, rep, msg.as_bytes());
                    return None;
                }
                self.option_reply(option, REP_ACK, &[]);
                // Nothing negotiated in clear survives the upgrade.
                self.tls_active = true;
                self.structured = false;
                self.meta_export = None;
                Some(HandshakeEvent::StartTls)
            }
            OPT_STRUCTURED_REPLY => {
                if !data.is_empty() {
                    let msg = format!(
                        "NBD_OPT_STRUCTURED_REPLY carries {} bytes; expected none",
                        data.len()
                    );
                    self.option_reply(option, REP_ERR_INVALID, msg.as_bytes());
                    return None;
                }
                self.structured = true;
                self.option_reply(option, REP_ACK, &[]);
                None
            }
            OPT_LIST_META_CONTEXT | OPT_SET_META_CONTEXT => {
                let set = option == OPT_SET_META_CONTEXT;
                if set && !self.structured {
                    let msg = "NBD_OPT_SET_META_CONTEXT before NBD_OPT_STRUCTURED_REPLY";
                    self.option_reply(option, REP_ERR_INVALID, msg.as_bytes());
                    return None;
                }
                let (export, queries) = match parse_meta_request(data) {
                    Ok(parsed) => parsed,
                    Err(msg) => {
                        self.option_reply(option, REP_ERR_INVALID, msg.as_bytes());
                        return None;
                    }
                };
                let matched = if set {
                    // SET selects exact names only; no queries selects nothing.
                    queries.contains(&META_BASE_ALLOCATION)
                } else {
                    queries.is_empty()
                        || queries
                            .iter()
                            .any(|q| *q == META_BASE_ALLOCATION || *q == "base:")
                };
                if set {
                    self.meta_export = matched.then(|| export.to_owned());
                }
                if matched {
                    let mut body = Vec::with_capacity(4 + META_BASE_ALLOCATION.len());
                    let id = if set { META_BASE_ALLOCATION_ID } else { 0 };
                    body.extend_from_slice(&id.to_be_bytes());
                    body.extend_from_slice(META_BASE_ALLOCATION.as_bytes());
                    self.option_reply(option, REP_META_CONTEXT, &body);
                }
                self.option_reply(option, REP_ACK, &[]);
                None
            }
            OPT_EXPORT_NAME => {
                let Ok(name) = std::str::from_utf8(data) else {
                    // Cannot reply to EXPORT_NAME; the server closes.
                    self.state = State::Closed;
                    return Some(HandshakeEvent::Closed(CloseReason::ExportNameRefused));
                };
                let query = ExportQuery {
                    name: name.to_owned(),
                    purpose: ExportPurpose::ExportName,
                    requested: InfoRequests::default(),
                };
                self.state = State::AwaitExport(query.clone());
                Some(HandshakeEvent::ExportRequested(query))
            }
            OPT_INFO | OPT_GO => {
                let purpose = if option == OPT_GO {
                    ExportPurpose::Go
                } else {
                    ExportPurpose::Info
                };
                match parse_info_request(data) {
                    Ok((name, requested)) => {
                        let query = ExportQuery {
                            name: name.to_owned(),
                            purpose,
                            requested,
                        };
                        self.state = State::AwaitExport(query.clone());
                        Some(HandshakeEvent::ExportRequested(query))
                    }
                    Err(msg) => {
                        self.option_reply(option, REP_ERR_INVALID, msg.as_bytes());
                        None
                    }
                }
            }
            OPT_LIST => {
                if !data.is_empty() {
                    let msg = format!("NBD_OPT_LIST carries {} bytes; expected none", data.len());
                    self.option_reply(option, REP_ERR_INVALID, msg.as_bytes());
                    return None;
                }
                self.state = State::AwaitList;
                Some(HandshakeEvent::ListRequested)
            }
            OPT_ABORT => {
                self.option_reply(option, REP_ACK, &[]);
                self.state = State::Closed;
                Some(HandshakeEvent::Closed(CloseReason::Aborted))
            }
            _ => {
                let what = format!("option {option} is not supported");
                self.option_reply(option, REP_ERR_UNSUP, what.as_bytes());
                None
            }
        }
    }

    /// Answer the pending [`HandshakeEvent::ExportRequested`]. Returns the event that follows,
    /// if any: `Transmission` after a successful GO or EXPORT_NAME, `Closed` after a refused
    /// EXPORT_NAME. Calling it with no export question pending does nothing and returns `None`.
    pub fn answer_export(
        &mut self,
        answer: Result<ExportInfo, ExportRefusal>,
    ) -> Option<HandshakeEvent> {
        let State::AwaitExport(query) = self.state.clone() else {
            return None;
        };
        let option = match query.purpose {
            ExportPurpose::Info => OPT_INFO,
            ExportPurpose::Go => OPT_GO,
            ExportPurpose::ExportName => OPT_EXPORT_NAME,
        };
        match (query.purpose, answer) {
            (ExportPurpose::ExportName, Ok(info)) => {
                self.enter_transmission(&info.name);
                self.out.extend_from_slice(&info.size_bytes.to_be_bytes());
                self.out.extend_from_slice(&info.flags.bits().to_be_bytes());
                if !self.no_zeroes {
                    self.out.extend_from_slice(&[0u8; EXPORT_NAME_PAD_BYTES]);
                }
                self.state = State::Transmission;
                Some(HandshakeEvent::Transmission { info })
            }
            (ExportPurpose::ExportName, Err(_)) => {
                self.state = State::Closed;
                Some(HandshakeEvent::Closed(CloseReason::ExportNameRefused))
            }
            (purpose, Ok(info)) => {
                let mut body = Vec::with_capacity(12);
                body.extend_from_slice(&INFO_EXPORT.to_be_bytes());
                body.extend_from_slice(&info.size_bytes.to_be_bytes());
                body.extend_from_slice(&info.flags.bits().to_be_bytes());
                self.option_reply(option, REP_INFO, &body);
                if query.requested.name {
                    let name = clip(&info.name);
                    body.clear();
                    body.extend_from_slice(&INFO_NAME.to_be_bytes());
                    body.extend_from_slice(name.as_bytes());
                    self.option_reply(option, REP_INFO, &body);
                }
                if query.requested.description && !info.description.is_empty() {
                    let description = clip(&info.description);
                    body.clear();
                    body.extend_from_slice(&INFO_DESCRIPTION.to_be_bytes());
                    body.extend_from_slice(description.as_bytes());
                    self.option_reply(option, REP_INFO, &body);
                }
                if let Some(bs) = info.block_sizes {
                    body.clear();
                    body.extend_from_slice(&INFO_BLOCK_SIZE.to_be_bytes());
                    body.extend_from_slice(&bs.minimum_bytes.to_be_bytes());
                    body.extend_from_slice(&bs.preferred_bytes.to_be_bytes());
                    body.extend_from_slice(&bs.maximum_bytes.to_be_bytes());
                    self.option_reply(option, REP_INFO, &body);
                }
                self.option_reply(option, REP_ACK, &[]);
                if purpose == ExportPurpose::Go {
                    self.enter_transmission(&info.name);
                    self.state = State::Transmission;
                    Some(HandshakeEvent::Transmission { info })
                } else {
                    self.state = State::OptionHeader;
                    None
                }
            }
            (_, Err(refusal)) => {
                let rep = match refusal.kind {
                    RefusalKind::Unknown => REP_ERR_UNKNOWN,
                    RefusalKind::Policy => REP_ERR_POLICY,
                    RefusalKind::ShuttingDown => REP_ERR_SHUTDOWN,
                };
                self.option_reply(option, rep, clip(&refusal.message).as_bytes());
                self.state = State::OptionHeader;
                None
            }
        }
    }

    /// Fixes what transmission with export `name` may use: a metadata context selected for
    /// another export does not carry over (the spec ties a selection to its export name).
    fn enter_transmission(&mut self, name: &str) {
        self.negotiated = Negotiated {
            structured_replies: self.structured,
            base_allocation: self.structured && self.meta_export.as_deref() == Some(name),
            tls: self.tls_active,
        };
    }

    /// Answer the pending [`HandshakeEvent::ListRequested`] with `(name, description)` pairs.
    /// Calling it with no list pending does nothing.
    pub fn answer_list(&mut self, exports: &[(&str, &str)]) {
        if self.state != State::AwaitList {
            return;
        }
        let mut body = Vec::new();
        for (name, description) in exports {
            let name = clip(name);
            body.clear();
            body.extend_from_slice(&(name.len() as u32).to_be_bytes());
            body.extend_from_slice(name.as_bytes());
            body.extend_from_slice(clip(description).as_bytes());
            self.option_reply(OPT_LIST, REP_SERVER, &body);
        }
        self.option_reply(OPT_LIST, REP_ACK, &[]);
        self.state = State::OptionHeader;
    }

    fn option_reply(&mut self, option: u32, reply_type: u32, data: &[u8]) {
        self.out
            .extend_from_slice(&OPTION_REPLY_MAGIC.to_be_bytes());
        self.out.extend_from_slice(&option.to_be_bytes());
        self.out.extend_from_slice(&reply_type.to_be_bytes());
        self.out
            .extend_from_slice(&(data.len() as u32).to_be_bytes());
        self.out.extend_from_slice(data);
    }
}

/// Cut a string to the protocol's 4096-byte limit at a char boundary.
fn clip(s: &str) -> &str {
    if s.len() <= STRING_MAX_BYTES {
        return s;
    }
    let mut end = STRING_MAX_BYTES;
    while !s.is_char_boundary(end) {
        end -= 1;
    }
    &s[..end]
}

/// Parse LIST/SET_META_CONTEXT data: `u32 name_len, name, u32 count, count × (u32 len,
/// query)`. Returns the export name and the queries.
fn parse_meta_request(data: &[u8]) -> Result<(&str, Vec<&str>), String> {
    fn string<'a>(r: &mut Reader<'a>, what: &str) -> Result<&'a str, String> {
        let len = r
            .u32_be()
            .ok_or_else(|| format!("meta-context data ends before the {what} length"))?;
        if len as usize > STRING_MAX_BYTES {
            return Err(format!(
                "{what} length {len}; at most {STRING_MAX_BYTES} allowed"
            ));
        }
        let bytes = r
            .take(len as usize)
            .ok_or_else(|| format!("{what} length {len} exceeds the bytes that follow"))?;
        std::str::from_utf8(bytes).map_err(|_| format!("{what} is not UTF-8"))
    }
    let mut r = Reader::new(data);
    let name = string(&mut r, "export name")?;
    let count = r
        .u32_be()
        .ok_or_else(|| "meta-context data ends before the query count".to_owned())?;
    // Each query takes at least 4 bytes: a count beyond that is a lie, caught before looping.
    if count as usize > r.remaining() / 4 {
        return Err(format!(
            "{count} queries claimed in {} remaining bytes",
            r.remaining()
        ));
    }
    let mut queries = Vec::with_capacity(count as usize);
    for _ in 0..count {
        queries.push(string(&mut r, "query")?);
    }
    if r.remaining() != 0 {
        return Err(format!(
            "{} unexpected bytes after the queries",
            r.remaining()
        ));
    }
    Ok((name, queries))
}

/// Parse INFO/GO data: `u32 name_len, name, u16 count, count × u16 info type`.
fn parse_info_request(data: &[u8]) -> Result<(&str, InfoRequests), String> {
    let mut r = Reader::new(data);
    let name_len = r
        .u32_be()
        .ok_or_else(|| format!("INFO/GO data of {} bytes; needs at least 6", data.len()))?;
    if name_len as usize > STRING_MAX_BYTES {
        return Err(format!(
            "export name length {name_len}; at most {STRING_MAX_BYTES} allowed"
        ));
    }
    let name = r.take(name_len as usize).ok_or_else(|| {
        format!(
            "export name length {name_len} exceeds the {} bytes that follow",
            data.len() - 4
        )
    })?;
    let name = std::str::from_utf8(name).map_err(|_| "export name is not UTF-8".to_owned())?;
    let count = r
        .u16_be()
        .ok_or_else(|| "INFO/GO data ends before the info-request count".to_owned())?;
    let mut requested = InfoRequests::default();
    for i in 0..count {
        let info = r
            .u16_be()
            .ok_or_else(|| format!("INFO/GO lists {count} info requests but ends after {i}"))?;
        match info {
            INFO_NAME => requested.name = true,
            INFO_DESCRIPTION => requested.description = true,
            INFO_BLOCK_SIZE => requested.block_size = true,
            _ => {} // INFO_EXPORT is always sent; unknown items are ignored, as the spec allows.
        }
    }
    if r.remaining() != 0 {
        return Err(format!(
            "{} unexpected bytes after the info requests",
            r.remaining()
        ));
    }
    Ok((name, requested))
}
