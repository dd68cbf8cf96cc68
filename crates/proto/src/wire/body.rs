//! The control bodies: HELLO and REGISTER requests, their OK replies, and the error body of any
//! other reply; each decoded field by field, naming the field that is wrong.

use thiserror::Error;

use super::{
    CONTROL_PAYLOAD_MAX_BYTES, HELLO_FIXED_BYTES, HELLO_REPLY_BYTES, NAME_MAX_BYTES,
    REGISTER_BODY_BYTES, REGISTER_REPLY_BYTES, SECRET_MAX_BYTES,
};
use crate::bytes::{ArrayWriter, Reader};
use crate::Access;

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
    ///
    /// [`RequestHeader::hello`]: super::RequestHeader::hello
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

/// A latency-critical tenant's service-level objective, as a REGISTER body carries it.
///
/// The scheduler's own SLO is `qos::LcSlo` (the same four facts, the request size a `u64`).
/// This crate is the wire format and depends on no model or scheduler crate, so it keeps the
/// wire's image: field for field the body's layout, the request size the `u32` the frame
/// holds. The one conversion to `qos::LcSlo` is where the server admits a REGISTER
/// (`server::native`); the one conversion from `qos::TenantSpec`, which a scenario's tenants
/// carry, is `client::register_class`.
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

/// What a REGISTER asks for: the flow's class (the scheduler's `lc` or `be`) and, for a
/// latency-critical flow, its SLO. The wire image of `qos::TenantSpec` (whose best-effort arm
/// also carries a declared mix the wire does not send), for the reason given at [`Slo`].
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum RegisterClass {
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
    pub class: RegisterClass,
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
                RegisterClass::LatencyCritical(Slo {
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
                RegisterClass::BestEffort
            }
            value => return Err(BodyError::BadClass { value }),
        };
        Ok(RegisterBody { class })
    }

    /// The body's 24 bytes.
    pub fn encode(&self) -> [u8; REGISTER_BODY_BYTES] {
        let (class, slo) = match self.class {
            RegisterClass::LatencyCritical(slo) => (CLASS_LC, slo),
            RegisterClass::BestEffort => (
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
///
/// [`RefusalCode`]: super::RefusalCode
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
