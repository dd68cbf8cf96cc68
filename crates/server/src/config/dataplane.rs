//! `[dataplane]`: the worker threads and their loop: how many workers, how big a batch one
//! loop step takes, what an idle worker does (spin, or spin then block), how long a worker
//! pauses under pipelined load to gather a batch (`coalesce`), and whether sockets are read
//! through epoll or io_uring.
//!
//! Worked example: the defaults are 2 workers, batches of up to 64 requests, block after a
//! 5 µs spin, coalescing pauses of up to 160 µs, epoll; `workers = 0` or `batch_limit = 65` is
//! refused naming the key and its range.

use serde::Deserialize;

use super::{invalid, ConfigError};

/// Most requests one dataplane step takes from its sockets: the adaptive batch cap.
pub const MAX_BATCH_LIMIT: usize = 64;

/// What a worker does when a loop iteration found nothing to do.
#[derive(Debug, Clone, Copy, Deserialize, PartialEq, Eq, Default)]
#[serde(rename_all = "kebab-case")]
pub enum IdlePolicy {
    /// Poll forever: lowest latency, one core per worker at 100 %.
    Spin,
    /// Poll for `idle_spin_ns`, then sleep in `epoll_wait` until a socket or the ring wakes us.
    #[default]
    BlockAfterSpin,
}

/// The flag's spelling (`ullstack serve --idle`): the config's names, and `block` for
/// `block-after-spin`.
impl std::str::FromStr for IdlePolicy {
    type Err = String;
    fn from_str(s: &str) -> Result<IdlePolicy, String> {
        match s {
            "spin" => Ok(IdlePolicy::Spin),
            "block-after-spin" | "block" => Ok(IdlePolicy::BlockAfterSpin),
            other => Err(format!(
                "idle policy {other:?}: expected `spin` or `block-after-spin`"
            )),
        }
    }
}

/// `[dataplane]`: the worker threads and their loop.
#[derive(Debug, Clone, Deserialize, PartialEq, Eq)]
#[serde(deny_unknown_fields)]
pub struct DataplaneConfig {
    /// Worker threads (thread per core); each owns its connections, ring and scheduler share.
    #[serde(default = "default_workers")]
    pub workers: usize,
    /// Most requests one loop step takes in (adaptive batching: what is ready, up to this).
    #[serde(default = "default_batch_limit")]
    pub batch_limit: usize,
    #[serde(default)]
    pub idle: IdlePolicy,
    /// How long an idle worker keeps polling before it blocks (block-after-spin only).
    #[serde(default = "default_idle_spin_ns")]
    pub idle_spin_ns: u64,
    /// Under pipelined load, the longest pause between loop steps so the next step takes a batch;
    /// the worker picks a shorter one when a longer one would not gather more (0: never pause;
    /// see `coalesce`).
    #[serde(default = "default_coalesce_ns")]
    pub coalesce_ns: u64,
    /// How workers do their socket I/O: `epoll` (readiness, then `read`/`writev` per
    /// connection) or `uring` (receives and sends as io_uring operations, all of a step in one
    /// `io_uring_enter`; falls back to epoll where io_uring is refused). See `worker`.
    #[serde(default)]
    pub socket_io: SocketIo,
    /// How `socket_io = "uring"` receives: `single` (one RECV per connection and step into its
    /// input buffer) or `multishot` (one RECV per connection that stays armed, filling buffers
    /// from a per-worker provided-buffer ring; single-shot where the kernel refuses those).
    /// Single is the default: multishot measured even with it, within this machine's noise
    /// (docs/server.md). See `sockring`.
    #[serde(default)]
    pub socket_recv: SocketRecv,
    /// How a `socket_io = "uring"` worker's blocking wait counts: `first` (wake at the first
    /// completion), `batch` (`min_complete` = the step's sends plus the receives recent
    /// wakes brought, bounded by a timeout) or `min-wait` (the same count, its bound the
    /// kernel's `min_wait_usec`, past which one completion ends the same wait; `batch` where
    /// the kernel lacks it, before Linux 6.12). See `ringwait`.
    #[serde(default)]
    pub ring_wait: RingWait,
    /// How long a `socket_io = "uring"` worker spins on its ring before it blocks: `fixed`
    /// (`idle_spin_ns`) or `sized` (from the measured sleep-and-wake cost and the recent idle
    /// gaps). See `ringwait`.
    #[serde(default)]
    pub ring_spin: RingSpin,
    /// `socket_io = "uring"` with a kernel thread polling each worker's submission queue
    /// (`IORING_SETUP_SQPOLL`), asleep after this many idle milliseconds (`sq_thread_idle`);
    /// 0 (the default): the worker submits with its `io_uring_enter`. The thread's CPU is the
    /// server's. Off by default: it cost more CPU per I/O than it saved on this 2-core VM
    /// (docs/server.md). See `sockring`, *A polled submission queue*.
    #[serde(default)]
    pub ring_sqpoll_idle_ms: u32,
    /// Where a `socket_io = "uring"` worker's file volumes put their io_uring operations:
    /// `own-ring` (each volume's own ring per worker, watched through epoll) or `socket-ring`
    /// (into the worker's socket ring: one `io_uring_enter` per step submits and waits for the
    /// sockets and the files). The epoll socket path always uses `own-ring`. `own-ring` is the
    /// default: the socket ring cut syscalls per I/O but served as many I/Os per CPU-second,
    /// within this machine's noise (docs/server.md). See `backend/file.rs`, *One ring per
    /// worker*.
    #[serde(default)]
    pub file_io: FileIo,
    /// Whether `socket_io = "uring"` sends large replies zero-copy (`SENDMSG_ZC`): `off`,
    /// `large` (messages with 16 KiB of payload or more) or a byte threshold. Off by default:
    /// over loopback the kernel copies anyway, and zero-copy served fewer I/Os per second
    /// and, in most runs, per CPU-second (docs/server.md). See `sockring::zc`.
    #[serde(default)]
    pub send_zc: SendZcSetting,
}

/// `[dataplane] file_io`: which io_uring a uring worker's file volumes use.
#[derive(Debug, Clone, Copy, Deserialize, PartialEq, Eq, Default)]
#[serde(rename_all = "kebab-case")]
pub enum FileIo {
    /// The worker's socket ring carries the file volumes' operations too.
    SocketRing,
    /// Each file volume keeps its own ring per worker, watched through epoll.
    #[default]
    OwnRing,
}

impl FileIo {
    /// As the config and the logs name it.
    pub fn name(self) -> &'static str {
        match self {
            FileIo::SocketRing => "socket-ring",
            FileIo::OwnRing => "own-ring",
        }
    }
}

/// `[dataplane] send_zc`: when the io_uring socket path sends zero-copy.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum SendZcSetting {
    /// Every send copies (SENDMSG).
    #[default]
    Off,
    /// Messages with at least `sockring::zc::SEND_ZC_LARGE_BYTES` of payload go zero-copy.
    Large,
    /// Messages with at least this many bytes of payload go zero-copy.
    MinBytes(u64),
}

/// Most a `send_zc` byte threshold may be: one 32 MiB read's reply (`limits`'s largest
/// request); a larger one would never apply.
pub const MAX_SEND_ZC_BYTES: u64 = 32 << 20;

impl SendZcSetting {
    /// As the config and the logs name it.
    pub fn name(self) -> String {
        match self {
            SendZcSetting::Off => "\"off\"".to_string(),
            SendZcSetting::Large => "\"large\"".to_string(),
            SendZcSetting::MinBytes(n) => n.to_string(),
        }
    }

    /// The payload bytes from which a message goes zero-copy, given the `large` threshold
    /// (None: off).
    pub fn min_bytes(self, large_bytes: usize) -> Option<usize> {
        match self {
            SendZcSetting::Off => None,
            SendZcSetting::Large => Some(large_bytes),
            SendZcSetting::MinBytes(n) => Some(usize::try_from(n).unwrap_or(usize::MAX)),
        }
    }
}

impl<'de> Deserialize<'de> for SendZcSetting {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        #[derive(Deserialize)]
        #[serde(untagged)]
        enum Spelled {
            Name(String),
            Bytes(u64),
        }
        match Spelled::deserialize(d)? {
            Spelled::Name(name) if name == "off" => Ok(SendZcSetting::Off),
            Spelled::Name(name) if name == "large" => Ok(SendZcSetting::Large),
            Spelled::Name(other) => Err(serde::de::Error::custom(format!(
                "send_zc {other:?}: expected \"off\", \"large\" or a byte threshold"
            ))),
            Spelled::Bytes(n) => Ok(SendZcSetting::MinBytes(n)),
        }
    }
}

/// `[dataplane] ring_wait`: how many completions a uring worker's blocking wait asks for.
#[derive(Debug, Clone, Copy, Deserialize, PartialEq, Eq, Default)]
#[serde(rename_all = "kebab-case")]
pub enum RingWait {
    /// One: the first completion wakes the worker.
    #[default]
    First,
    /// The step's sends plus the receives recent wakes brought, with a timeout.
    Batch,
    /// As `Batch`, its timeout the kernel's minimum wait (`min_wait_usec`): past it the same
    /// enter goes on waiting for any one completion.
    MinWait,
}

impl RingWait {
    /// As the config and the logs name it.
    pub fn name(self) -> &'static str {
        match self {
            RingWait::First => "first",
            RingWait::Batch => "batch",
            RingWait::MinWait => "min-wait",
        }
    }
}

/// `[dataplane] ring_spin`: how long an idle uring worker spins before it blocks.
#[derive(Debug, Clone, Copy, Deserialize, PartialEq, Eq, Default)]
#[serde(rename_all = "kebab-case")]
pub enum RingSpin {
    /// `idle_spin_ns`, polling through the worker's loop.
    #[default]
    Fixed,
    /// Up to the measured sleep-and-wake cost on the completion queue, while recent idle
    /// gaps say the spin pays for itself.
    Sized,
}

impl RingSpin {
    /// As the config and the logs name it.
    pub fn name(self) -> &'static str {
        match self {
            RingSpin::Fixed => "fixed",
            RingSpin::Sized => "sized",
        }
    }
}

/// `[dataplane] socket_recv`: how the io_uring socket path receives.
#[derive(Debug, Clone, Copy, Deserialize, PartialEq, Eq, Default)]
#[serde(rename_all = "kebab-case")]
pub enum SocketRecv {
    /// A single-shot RECV per connection and step into its input buffer's spare room.
    #[default]
    Single,
    /// A multishot RECV per connection into the worker's provided buffers, copied into the
    /// connection's input as it completes.
    Multishot,
}

impl SocketRecv {
    /// As the config and the logs name it.
    pub fn name(self) -> &'static str {
        match self {
            SocketRecv::Multishot => "multishot",
            SocketRecv::Single => "single",
        }
    }
}

/// `[dataplane] socket_io`: how a worker reads and writes its sockets.
#[derive(Debug, Clone, Copy, Deserialize, PartialEq, Eq, Default)]
#[serde(rename_all = "kebab-case")]
pub enum SocketIo {
    /// Level-triggered epoll; one `read` and one `writev` per connection and step.
    #[default]
    Epoll,
    /// A per-worker io_uring: one RECV armed per connection that wants input, one SENDMSG
    /// per connection with output, submitted and reaped with one `io_uring_enter` per step.
    Uring,
}

impl SocketIo {
    /// As the config and the logs name it.
    pub fn name(self) -> &'static str {
        match self {
            SocketIo::Epoll => "epoll",
            SocketIo::Uring => "uring",
        }
    }
}

fn default_workers() -> usize {
    2
}
fn default_batch_limit() -> usize {
    MAX_BATCH_LIMIT
}
/// 5 µs: catches a request that is already on its way (a pipelining client's next command)
/// without a sleep/wake-up, and costs little CPU: measured here, 20 µs of spinning cut the
/// I/Os served per CPU-second by ~20 % under fio iodepth 32, while 0 and 5 µs were equal.
fn default_idle_spin_ns() -> u64 {
    5_000
}

/// 160 µs, the longest pause (the coalescer climbs to it only while doubling its pause at least
/// 1.5×'s its batch, and stops at a 16-request batch; see `coalesce`): under fio iodepth 32 a
/// fixed 50 µs pause took the server from ~1.5 to ~6 requests per step; the ladder reaches
/// ~20 (the runs are in CHANGELOG.md); a QD1 client never triggers it.
fn default_coalesce_ns() -> u64 {
    160_000
}
/// Longest `ring_sqpoll_idle_ms` a config may set: a second, the kernel's own default idle.
pub const MAX_SQPOLL_IDLE_MS: u32 = 1_000;

/// Longest coalescing window a config may set.
pub const MAX_COALESCE_NS: u64 = 1_000_000;

impl Default for DataplaneConfig {
    fn default() -> Self {
        DataplaneConfig {
            workers: default_workers(),
            batch_limit: default_batch_limit(),
            idle: IdlePolicy::default(),
            idle_spin_ns: default_idle_spin_ns(),
            coalesce_ns: default_coalesce_ns(),
            socket_io: SocketIo::default(),
            socket_recv: SocketRecv::default(),
            ring_wait: RingWait::default(),
            ring_spin: RingSpin::default(),
            ring_sqpoll_idle_ms: 0,
            file_io: FileIo::default(),
            send_zc: SendZcSetting::default(),
        }
    }
}

impl DataplaneConfig {
    /// Checks the ranges serde cannot.
    pub fn validate(&self) -> Result<(), ConfigError> {
        let d = self;
        if d.workers == 0 || d.workers > 256 {
            return Err(invalid(
                "dataplane.workers",
                d.workers,
                "1..=256 worker threads",
            ));
        }
        if d.batch_limit == 0 || d.batch_limit > MAX_BATCH_LIMIT {
            return Err(invalid(
                "dataplane.batch_limit",
                d.batch_limit,
                format!("1..={MAX_BATCH_LIMIT} requests per loop step"),
            ));
        }
        if d.idle_spin_ns > 1_000_000_000 {
            return Err(invalid(
                "dataplane.idle_spin_ns",
                d.idle_spin_ns,
                "at most 1 s (1000000000 ns)",
            ));
        }
        if d.coalesce_ns > MAX_COALESCE_NS {
            return Err(invalid(
                "dataplane.coalesce_ns",
                d.coalesce_ns,
                format!("at most {MAX_COALESCE_NS} ns (0 turns coalescing off)"),
            ));
        }
        if d.socket_recv == SocketRecv::Multishot && d.socket_io != SocketIo::Uring {
            return Err(invalid(
                "dataplane.socket_recv",
                d.socket_recv.name(),
                "\"single\" unless socket_io = \"uring\" (multishot receives are an io_uring path)",
            ));
        }
        if d.ring_sqpoll_idle_ms > MAX_SQPOLL_IDLE_MS {
            return Err(invalid(
                "dataplane.ring_sqpoll_idle_ms",
                d.ring_sqpoll_idle_ms,
                format!("at most {MAX_SQPOLL_IDLE_MS} ms (0 turns the polling thread off)"),
            ));
        }
        if d.ring_sqpoll_idle_ms > 0 && d.socket_io != SocketIo::Uring {
            return Err(invalid(
                "dataplane.ring_sqpoll_idle_ms",
                d.ring_sqpoll_idle_ms,
                "0 unless socket_io = \"uring\" (a polling thread is an io_uring path)",
            ));
        }
        if d.send_zc != SendZcSetting::Off && d.socket_io != SocketIo::Uring {
            return Err(invalid(
                "dataplane.send_zc",
                d.send_zc.name(),
                "\"off\" unless socket_io = \"uring\" (zero-copy sends are an io_uring path)",
            ));
        }
        if let SendZcSetting::MinBytes(n) = d.send_zc {
            if n == 0 || n > MAX_SEND_ZC_BYTES {
                return Err(invalid(
                    "dataplane.send_zc",
                    n,
                    format!("1..={MAX_SEND_ZC_BYTES} bytes of payload per message"),
                ));
            }
        }
        Ok(())
    }
}
