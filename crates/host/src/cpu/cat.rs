//! What a core's time goes to: the categories every nanosecond of every core is charged to.

use serde::Serialize;

use crate::exectime::Span;

/// What a core's time went to.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Cat {
    /// Application code.
    User,
    /// System call entry/exit, VFS, sockets.
    Syscall,
    /// Page-cache lookups, copies, dirtying, write-back page work.
    PageCache,
    /// Block layer submission: bio, merge search, plug, dispatch.
    Blk,
    /// NVMe driver submission: command build, doorbell.
    Nvme,
    /// Block-layer completion of requests (in interrupt or poll context).
    BlkComplete,
    /// Interrupt entry and handlers (NVMe ISR, timers).
    Irq,
    /// Context switches and cache pollution.
    Sched,
    /// Spinning on a completion queue.
    Poll,
    /// Nothing to run.
    Idle,
}

pub const CAT_COUNT: usize = 10;
pub const CATS: [Cat; CAT_COUNT] = [
    Cat::User,
    Cat::Syscall,
    Cat::PageCache,
    Cat::Blk,
    Cat::Nvme,
    Cat::BlkComplete,
    Cat::Irq,
    Cat::Sched,
    Cat::Poll,
    Cat::Idle,
];

impl Cat {
    pub const fn index(self) -> usize {
        self as usize
    }
    pub const fn name(self) -> &'static str {
        match self {
            Cat::User => "user",
            Cat::Syscall => "syscall",
            Cat::PageCache => "pagecache",
            Cat::Blk => "blk",
            Cat::Nvme => "nvme",
            Cat::BlkComplete => "blk_complete",
            Cat::Irq => "irq",
            Cat::Sched => "sched",
            Cat::Poll => "poll",
            Cat::Idle => "idle",
        }
    }

    /// The span of a thread's life a burst of this category is (`exectime`): the same name.
    /// (No thread bursts in `Idle`; it maps to the idle span.)
    pub const fn span(self) -> Span {
        match self {
            Cat::User => Span::User,
            Cat::Syscall => Span::Syscall,
            Cat::PageCache => Span::PageCache,
            Cat::Blk => Span::Blk,
            Cat::Nvme => Span::Nvme,
            Cat::BlkComplete => Span::BlkComplete,
            Cat::Irq => Span::Irq,
            Cat::Sched => Span::Sched,
            Cat::Poll => Span::Poll,
            Cat::Idle => Span::Idle,
        }
    }
}
