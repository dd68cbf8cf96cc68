//! An ordered parallel map: the study's serial steps after its runs (reading the runs back,
//! drawing the figures) spread over the same `--jobs` threads the runs used.
//!
//! [`map`] applies a function to every item of a slice on up to `jobs` scoped threads, each
//! taking the next index from one shared counter (as [`crate::exec`]'s workers do), and
//! returns the results in the items' order, so what it returns is what a plain
//! `items.iter().map(f).collect()` returns whatever the thread count or the interleaving: the
//! callers' outputs (`study.json`, the figures' files) cannot depend on it. An error is the
//! first item's in that order, as the serial loop would report it.
//!
//! Worked example: `flashshare`'s 1,057 `summary.json` files (17 KB each, plus a response CSV
//! of about 4,000 rows beside each co-run) are parsed two at a time with `--jobs 2`, and its
//! figures are rasterized two at a time; `results::load` and `driver`'s figure loop call it.
//!
//! What it leaves out: work stealing or chunking (the items are few and each is at least a
//! file's parse, so one atomic add per item costs nothing beside it), and cancelling the other
//! items after an error (a study stops at the error either way; they only finish first).

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Mutex;

/// `f` of every item, in the items' order, computed on up to `jobs` threads (module essay).
pub fn map<T, R, F>(items: &[T], jobs: usize, f: F) -> Vec<R>
where
    T: Sync,
    R: Send,
    F: Fn(&T) -> R + Sync,
{
    let threads = jobs.max(1).min(items.len());
    if threads <= 1 {
        return items.iter().map(f).collect();
    }
    let next = AtomicUsize::new(0);
    let slots: Vec<Mutex<Option<R>>> = items.iter().map(|_| Mutex::new(None)).collect();
    std::thread::scope(|scope| {
        for _ in 0..threads {
            scope.spawn(|| loop {
                let i = next.fetch_add(1, Ordering::Relaxed);
                let Some(item) = items.get(i) else { return };
                let r = f(item);
                *slots[i].lock().expect("no thread panics holding a slot") = Some(r);
            });
        }
    });
    slots
        .into_iter()
        .map(|s| {
            s.into_inner()
                .expect("no thread panics holding a slot")
                .expect("every index below the length was taken by a thread")
        })
        .collect()
}

/// [`map`] for a fallible `f`: every result, or the error of the first item (in order) that
/// failed.
pub fn try_map<T, R, E, F>(items: &[T], jobs: usize, f: F) -> Result<Vec<R>, E>
where
    T: Sync,
    R: Send,
    E: Send,
    F: Fn(&T) -> Result<R, E> + Sync,
{
    map(items, jobs, f).into_iter().collect()
}

/// The threads a step after the runs may use when the invocation names none (a merge): every
/// core, as `--jobs` defaults to.
pub fn default_jobs() -> usize {
    std::thread::available_parallelism().map_or(1, |n| n.get())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn results_come_back_in_the_items_order_whatever_the_threads() {
        let items: Vec<u64> = (0..200).collect();
        let serial: Vec<u64> = items.iter().map(|x| x * x + 1).collect();
        for jobs in [0, 1, 2, 3, 8, 500] {
            assert_eq!(map(&items, jobs, |x| x * x + 1), serial, "jobs {jobs}");
        }
        assert!(map(&[] as &[u64], 4, |x| *x).is_empty());
    }

    #[test]
    fn the_error_is_the_first_failing_items_in_order() {
        let items: Vec<u32> = (0..100).collect();
        let r: Result<Vec<u32>, String> = try_map(&items, 4, |&x| {
            if x % 30 == 29 {
                Err(format!("item {x}"))
            } else {
                Ok(x)
            }
        });
        assert_eq!(r, Err("item 29".to_string()));
        let ok: Result<Vec<u32>, String> = try_map(&items, 4, |&x| Ok(x * 2));
        assert_eq!(ok.unwrap(), items.iter().map(|x| x * 2).collect::<Vec<_>>());
    }

    /// With two threads and two items that each wait for the other to start, both run at
    /// once: the map is parallel, not a serial loop.
    #[test]
    fn two_items_run_at_the_same_time() {
        let started = AtomicUsize::new(0);
        let waited = map(&[0, 1], 2, |_| {
            started.fetch_add(1, Ordering::SeqCst);
            let deadline = std::time::Instant::now() + std::time::Duration::from_secs(30);
            while started.load(Ordering::SeqCst) < 2 {
                assert!(
                    std::time::Instant::now() < deadline,
                    "the other item never started"
                );
                std::thread::yield_now();
            }
            true
        });
        assert_eq!(waited, [true, true]);
    }
}
