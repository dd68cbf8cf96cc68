//! The FlashShare family (experiments.md, `flashshare`): latency classes across the stack. Each
//! configuration adds to the one before:
//!
//! - `cacheopt`: the workload attribute reaches the device (`host.attr`, `host/src/config.rs`),
//!   whose DRAM cache is split by class with ways moving each epoch
//!   (`device/src/cache_split.rs`) and picks its prefetch size with ghost caches
//!   (`device/src/ghost.rs`); the device's stream-detecting read-ahead
//!   (`device.cache.readahead_units`, the preset's) stays on under the ghost-chosen prefetch,
//!   as the presets ship it (the study's cache sensitivity runs turn it off to isolate the
//!   prefetch);
//! - `kernelopt`: plus the block-layer bypass for latency-critical I/O with the hazard rule
//!   (`host/src/blk_bypass.rs`) and a latency-critical SQ beside each SQ, arbitrated with
//!   strict priority and the drain rule (`host/src/nvme.rs`, `device/src/ctrl.rs`);
//! - `selectisr`: plus selective completion, polling latency-critical I/O and interrupting the
//!   rest (`host/src/machine/nvme_complete.rs`);
//! - `xler`: plus the queue accelerator (`host/src/accel.rs`, `machine/accel_path.rs`): the driver
//!   writes requests into its registers, it merges same-LBA requests in its CAM, rings the
//!   doorbell, polls the CQ in hardware and interrupts the driver (so no thread polls);
//! - `dedcore`: `selectisr` with a core dedicated to polling that hands completions to the
//!   application cores (`host/src/machine/dedcore.rs`); the alternative to `xler`.

use super::def::Stack;

pub static STACKS: [Stack; 5] = [
    Stack {
        name: "cacheopt",
        based_on: Some("vanilla"),
        about: "FlashShare cache: the class reaches the device; cache split by class (dynamic ways) with ghost prefetch",
        sets: &[
            ("host.attr", "\"on\""),
            // The split moves ways of a set-associative cache: 16 ways, zssd's (a device whose
            // DRAM is fully associative, nvme-tlc's, has no sets to split).
            ("device.cache.ways", "16"),
            ("device.cache.partition", "\"dynamic\""),
            ("device.cache.prefetch", "\"ghost\""),
        ],
    },
    Stack {
        name: "kernelopt",
        based_on: Some("cacheopt"),
        about: "plus the block-layer bypass for LC I/O (hazard rule) and a strict-priority LC SQ per core",
        sets: &[
            ("host.blk.bypass_lc", "\"on\""),
            ("host.nvme.lc_queue", "\"on\""),
        ],
    },
    Stack {
        name: "selectisr",
        based_on: Some("kernelopt"),
        about: "plus selective completion: LC I/O polled, the rest interrupts",
        sets: &[("host.nvme.completion", "\"selective\"")],
    },
    Stack {
        name: "xler",
        based_on: Some("selectisr"),
        about: "plus the queue accelerator: CAM merge, hardware CQ polling and interrupt to the driver",
        sets: &[("host.nvme.accelerator", "\"on\"")],
    },
    Stack {
        name: "dedcore",
        based_on: Some("selectisr"),
        about: "selectisr with one core dedicated to polling, handing completions to the application cores",
        sets: &[("host.nvme.dedcore", "\"on\"")],
    },
];
