//! The simulation engine: the few things every model in ullstack shares.
//!
//! - [`SimTime`]: simulated time as integer nanoseconds, printed readably (`12.6µs`).
//! - [`EventQueue`]: a priority queue of timestamped events with a deterministic tie-break
//!   (events at equal times pop in the order they were scheduled), built for tens of millions
//!   of events per second.
//! - [`U32Map`]: a small open-addressing map from `u32` keys for an event loop's hot paths
//!   (no iteration, so no order a result could depend on).
//! - [`rng`]: random streams derived from `(run seed, component name)`, so adding a component
//!   never perturbs the draws of another and one seed reproduces a whole run.
//! - [`stats`]: HDR latency histograms summarised at the percentiles storage papers quote
//!   (p50 … p99.999, max) and plain counters.
//! - [`Switch`]: the on/off word every model's config uses for a mechanism it can leave out.
//! - [`stats::is_zero`]: the `skip_serializing_if` of report counters omitted while 0.
//! - [`toml_merge`]: a config file is a preset plus overrides; the deep merge that lays a
//!   file's TOML over its preset and refuses unknown keys by their dotted path, for every
//!   model's config (`device`, `host`).
//! - [`units`]: sizes, durations and counts as people write them (`4KiB`, `4KB`, `500us`,
//!   `120k`): one grammar and one set of errors for every config, spec and flag (fio job
//!   files keep fio's own, in `workload`).
//!
//! Nothing here knows about storage; the models (`device`, `host`) build on it.

pub mod intmap;
pub mod io;
pub mod queue;
pub mod rng;
pub mod stats;
pub mod switch;
pub mod time;
pub mod toml_merge;
pub mod units;

pub use intmap::U32Map;
pub use io::{IoClass, IoOp};
pub use queue::{EventQueue, Reservation};
pub use rng::{stream, SimRng};
pub use stats::{LatencyHistogram, LatencySummary};
pub use switch::Switch;
pub use time::SimTime;
