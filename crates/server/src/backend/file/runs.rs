//! Write runs: contiguous buffered writes waiting on one file ring, sent as one `Writev`.
//!
//! # Design
//! `submit` only queues; `commit` turns the step's queue into SQEs. Consecutive queued writes
//! that go through the buffered descriptor and continue one another (each starts where the one
//! before ends, same FUA) become **one `Writev`** of up to [`WRITE_RUN_MAX_WRITES`] buffers and
//! [`WRITE_RUN_MAX_BYTES`] — the block layer's plug merge, done one level up. Why it matters:
//! a file system without asynchronous buffered writes (ext4 answers `RWF_NOWAIT` buffered
//! writes with EOPNOTSUPP) makes io_uring punt every buffered write to an `iou-wrk` thread,
//! and each punted SQE costs a wake-up of that thread and, when its CQE lands, of this worker.
//! Worked example: a step that releases 32 contiguous 1 KiB buffered writes sends one
//! `Writev` of 32 KiB: one punt, one `iou-wrk` wake-up and one CQE instead of 32 of each.
//! Direct writes are not merged (the kernel takes them without a punt, and the block layer
//! merges them itself).
//!
//! A run's CQE says how many bytes the kernel wrote: whole members before that count complete;
//! the member it stops in continues from there on its own; any member after it, and every
//! member of a run that failed, is retried alone (never merged again), so each request gets the
//! result of its own write. Worked example: a run of three 1 KiB writes at 0, 1024 and 2048
//! that returns 1536 completes the first, resubmits the second for its last 512 B at 1536, and
//! resubmits the third alone.
//!
//! # What it leaves out
//! The ring's bookkeeping (which slots wait, their order, their claims): `ring.rs`. This
//! module holds the planning rule ([`run_length`]), a run's parts, and how its result splits
//! over its members ([`split_run_result`]).

/// Most writes one write run (one `Writev` SQE) carries: a step releases at most the worker's
/// batch limit (64) anyway, and the kernel's `UIO_MAXIOV` (1024) is far above it.
pub const WRITE_RUN_MAX_WRITES: usize = 64;
/// Most bytes one write run carries, so one SQE never holds an `iou-wrk` thread for long
/// (1 MiB is what one buffered `write` of a large request already is).
pub const WRITE_RUN_MAX_BYTES: usize = 1 << 20;
/// `user_data` bit that marks a write run's SQE (the rest is its index in `runs`); a single
/// operation's `user_data` is its slot index, far below it.
pub const RUN_USER_DATA_BIT: u64 = 1 << 62;

/// Contiguous buffered writes in the kernel as one `Writev`.
pub struct WriteRun {
    /// Slot indexes in offset order.
    pub members: Vec<usize>,
    /// The stretches it holds as buffered: `(offset, len)`.
    pub claim: (u64, u64),
}

/// What a write run's result means for one member.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum MemberOutcome {
    /// All of its bytes were written.
    Written,
    /// Resubmit it alone, from `done_bytes` on.
    Retry { done_bytes: usize },
}

/// Splits a write run's result `res` (bytes written, or a negative errno) over members of
/// `lens` bytes, in order: whole members first, then the one the count stops in, then the rest.
pub fn split_run_result(res: i32, lens: &[usize]) -> Vec<MemberOutcome> {
    let mut written = usize::try_from(res).unwrap_or(0);
    lens.iter()
        .map(|&len| {
            if written >= len {
                written -= len;
                MemberOutcome::Written
            } else {
                let done_bytes = written;
                written = 0;
                MemberOutcome::Retry { done_bytes }
            }
        })
        .collect()
}

/// How many writes from the front of a queue continue one another, given each waiting
/// request's standing as a run member in queue order (`Some((offset, len, fua))` for a write
/// that may be merged, `None` for anything else): at least 1 if the front is a candidate, 0 if
/// it is not. A run stops at the first request that is no candidate, does not start where the
/// last one ended, differs in FUA, or would pass [`WRITE_RUN_MAX_BYTES`]; it takes at most
/// [`WRITE_RUN_MAX_WRITES`]. The queue is read no further than the run goes.
pub fn run_length<F: PartialEq>(mut queue: impl Iterator<Item = Option<(u64, usize, F)>>) -> usize {
    let Some(Some((mut end, len, fua))) = queue.next() else {
        return 0;
    };
    end += len as u64;
    let mut bytes = len;
    let mut n = 1;
    while n < WRITE_RUN_MAX_WRITES {
        let Some(Some((at, len, f))) = queue.next() else {
            break;
        };
        if at != end || f != fua || bytes + len > WRITE_RUN_MAX_BYTES {
            break;
        }
        end += len as u64;
        bytes += len;
        n += 1;
    }
    n
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_run_stops_at_a_gap_a_fua_change_or_a_non_candidate() {
        let w = |at: u64, fua: bool| Some((at, 1024usize, fua));
        assert_eq!(
            run_length([w(0, false), w(1024, false), w(2048, false)].into_iter()),
            3
        );
        assert_eq!(
            run_length([w(0, false), w(4096, false)].into_iter()),
            1,
            "gap"
        );
        assert_eq!(
            run_length([w(0, false), w(1024, true)].into_iter()),
            1,
            "FUA differs"
        );
        assert_eq!(
            run_length([w(0, false), None, w(2048, false)].into_iter()),
            1
        );
        assert_eq!(
            run_length([None, w(0, false)].into_iter()),
            0,
            "front is no candidate"
        );
        assert_eq!(
            run_length(std::iter::empty::<Option<(u64, usize, bool)>>()),
            0
        );
    }

    #[test]
    fn a_run_keeps_to_its_limits() {
        let many = (0..200u64).map(|k| Some((k * 512, 512usize, ())));
        assert_eq!(run_length(many), WRITE_RUN_MAX_WRITES);
        let big = WRITE_RUN_MAX_BYTES / 2;
        let halves = (0..4u64).map(|k| Some((k * big as u64, big, ())));
        assert_eq!(
            run_length(halves),
            2,
            "a third half would pass the byte limit"
        );
    }
}
