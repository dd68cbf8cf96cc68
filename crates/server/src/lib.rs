//! server (essay to come)
pub mod backend;
pub mod buf;
pub mod config;
pub mod metrics;
pub mod native;
pub mod nbd;
pub mod sched;
pub mod server;
pub mod tenant;
pub mod worker;

pub use server::{start, BoundAddrs, ServerHandle, StartError};
