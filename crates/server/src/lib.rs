//! server (essay to come)
pub mod backend;
pub mod buf;
pub mod config;
pub mod metrics;
pub mod native;
pub mod nbd;
pub mod sched;
pub mod server;
pub mod signals;
pub mod tenant;
pub mod worker;

pub use server::{start, BoundAddrs, ServerHandle, StartError};

/// Logs to stderr; `RUST_LOG` filters (default `info`). Safe to call twice.
pub fn init_logging() {
    let filter = tracing_subscriber::EnvFilter::try_from_default_env()
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("info"));
    let _ = tracing_subscriber::fmt().with_env_filter(filter).with_writer(std::io::stderr).try_init();
}
