//! Errors of the client library.

use proto::wire::{Opcode, RefusalCode, Status};
use thiserror::Error;

/// Why a client call failed.
#[derive(Debug, Error)]
pub enum ClientError {
    /// TCP connect failed.
    #[error("cannot connect: {source}")]
    Connect { source: std::io::Error },
    /// The TLS session could not be set up (handshake refused, wrong key, certificate not
    /// trusted, or a local setup problem).
    #[error("TLS: {detail}")]
    Tls { detail: String },
    /// The connection failed while sending.
    #[error("connection I/O failed: {0}")]
    Io(#[source] std::io::Error),
    /// The connection is closed (by the server, or after a failure to read or write it);
    /// requests in flight when it closed fail with this.
    #[error("connection closed")]
    Closed,
    /// The server answered with a status other than OK.
    #[error("server answered {opcode} with {status}{}", fmt_detail(*.code, .message))]
    Server {
        opcode: Opcode,
        status: Status,
        /// Detail code from the error body (0 if none).
        code: u32,
        /// The server's message (may be empty).
        message: String,
    },
    /// REGISTER was refused by admission control.
    #[error("registration refused ({code:?}): {reason}")]
    Refused { code: RefusalCode, reason: String },
    /// The server broke the protocol (bad reply framing, unknown cookie, wrong lengths).
    #[error("protocol violation by the server: {detail}")]
    Protocol { detail: String },
    /// The fleet registry (etcd) could not be reached or named no server to connect to
    /// ([`Client::connect_via_registry`](crate::Client::connect_via_registry)).
    #[error("registry: {0}")]
    Registry(String),
    /// The caller asked for something the protocol or the session cannot carry.
    #[error("invalid argument: {0}")]
    InvalidArgument(String),
}

fn fmt_detail(code: u32, message: &str) -> String {
    match (code, message.is_empty()) {
        (0, true) => String::new(),
        (0, false) => format!(": {message}"),
        (c, true) => format!(" (code {c})"),
        (c, false) => format!(" (code {c}): {message}"),
    }
}

impl ClientError {
    /// The server's status, when the failure was the server's answer.
    pub fn status(&self) -> Option<Status> {
        match self {
            ClientError::Server { status, .. } => Some(*status),
            ClientError::Refused { .. } => Some(Status::Refused),
            _ => None,
        }
    }
}
