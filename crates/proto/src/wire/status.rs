//! What a reply says: its [`Status`], and for a refused REGISTER the [`RefusalCode`] its error
//! body carries.

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
///
/// [`ErrorBody`]: super::ErrorBody
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
