//! server (essay to come)
pub mod backend;
pub mod buf;
pub mod config;
pub mod metrics;
pub mod tenant;
