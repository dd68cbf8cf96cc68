//! Arbitrary bytes through the SPC ASCII trace reader; see `trace_common` for what is checked.
#![no_main]

use libfuzzer_sys::fuzz_target;
use workload::trace::TraceFormat;

#[path = "trace_common.rs"]
mod common;

fuzz_target!(|data: &[u8]| common::check(data, TraceFormat::Spc));
