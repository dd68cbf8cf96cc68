//! The FastDrain family (experiments.md, `fastdrain`): write-back that drains before it
//! overflows. Each configuration adds to the one before: `fd-buf` (the flusher's victimization
//! hint and the device's watermark eviction, `device/src/drain.rs`), `fd-ftl` (plus the
//! latency-aware FTL, `device/src/ftl/alloc.rs`), `fd` (plus the host's adaptive dirty
//! thresholds, `host/src/pagecache.rs`). Beside them: `oracle` (an unbounded device buffer, the
//! upper bound) and the FTL alternatives on top of `fd-buf`, `fd-ftl-sequential` (pages in
//! order, the baseline allocator) and `fd-ftl-lsb-skip` (only LSB pages, skipping the rest).
//!
//! The study runs these on a device whose buffer flushes only when full
//! (`device.cache.flush = "on-full"`, the published baseline): that is the study's system file,
//! not a stack, so `vanilla` stays the stack that sets nothing.

use super::def::Stack;

pub static STACKS: [Stack; 6] = [
    Stack {
        name: "fd-buf",
        based_on: Some("vanilla"),
        about: "FastDrain buffer: victimization hint + watermark foreground/background eviction",
        sets: &[
            ("host.pagecache.victim_hint", "\"on\""),
            ("device.cache.drain", "\"fastdrain\""),
        ],
    },
    Stack {
        name: "fd-ftl",
        based_on: Some("fd-buf"),
        about: "plus the latency-aware FTL (urgent evictions to LSB pages across dies)",
        sets: &[("device.ftl.alloc", "\"latency-aware\"")],
    },
    Stack {
        name: "fd",
        based_on: Some("fd-ftl"),
        about: "plus adaptive dirty thresholds driven by the buffer status in completions",
        sets: &[("host.pagecache.adaptive_dirty", "\"on\"")],
    },
    Stack {
        name: "oracle",
        based_on: Some("vanilla"),
        about: "an unbounded device write buffer (no write ever waits): the upper bound",
        sets: &[("device.cache.drain", "\"oracle\"")],
    },
    Stack {
        name: "fd-ftl-sequential",
        based_on: Some("fd-buf"),
        about: "fd-buf with the baseline allocator: pages in order, LSB, CSB, MSB",
        sets: &[("device.ftl.alloc", "\"sequential\"")],
    },
    Stack {
        name: "fd-ftl-lsb-skip",
        based_on: Some("fd-buf"),
        about: "fd-buf with an allocator that skips to LSB pages, wasting the others",
        sets: &[("device.ftl.alloc", "\"lsb-skip\"")],
    },
];
