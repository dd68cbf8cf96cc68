//! Arbitrary bytes through the DiskSim/MQSim ASCII (first input byte's top bit picks DiskSim's decimal milliseconds) trace reader; see `trace_common` for what is checked.
#![no_main]

use libfuzzer_sys::fuzz_target;
use workload::trace::TraceFormat;

#[path = "trace_common.rs"]
mod common;

fuzz_target!(|data: &[u8]| {
    let format = match data.first() {
        Some(b) if b & 0x80 != 0 => TraceFormat::Disksim,
        _ => TraceFormat::Mqsim,
    };
    common::check(data, format);
});
