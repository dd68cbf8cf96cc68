//! Benchmark: the CPU a memory volume spends on one READ (4 KiB and 128 KiB), the two ways it
//! can answer: copying the pages into the request's pooled buffer (`MemoryVolume::read`, what
//! every read did before page views) or handing back views of the pages
//! (`MemoryVolume::read_views`: a reference count raised a page, dropped when the reply is
//! sent; `server/src/buf.rs`, *Replies from a memory volume's pages*).
//!
//! The volume holds `WORKING_SET_BYTES` of written pages (larger than this machine's caches,
//! as a 1 GiB fio working set is); each round reads `READS_PER_ROUND` ranges at random
//! aligned offsets (the same offsets both ways) and the figure is the median over rounds of
//! nanoseconds per read, alternating the two ways round by round. The kernel's own copy of
//! the reply into the socket happens either way and is not in the figure (it then reads the
//! pages from memory instead of a freshly written buffer).
//!
//! ```text
//! cargo run --release -p server --example memory_read_path -- [ROUNDS]
//! ```

use std::time::Instant;

use server::backend::memory::{MemoryVolume, PAGE_BYTES};
use server::buf::BufPool;

/// Bytes written before the reads: larger than the last-level cache.
const WORKING_SET_BYTES: u64 = 256 << 20;
const READS_PER_ROUND: usize = 200_000;

fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(f64::total_cmp);
    v[v.len() / 2]
}

/// Median ns per read of `len` bytes at `offsets`: (copying, viewing).
fn measure(volume: &MemoryVolume, offsets: &[u64], len: usize, rounds: usize) -> (f64, f64) {
    let mut pool = BufPool::new();
    let (mut copy_ns, mut view_ns) = (Vec::new(), Vec::new());
    let mut checksum = 0u64;
    for _ in 0..rounds {
        let start = Instant::now();
        for &offset in offsets {
            let mut buf = pool.take(len);
            volume.read(offset, buf.as_mut_slice()).expect("read");
            checksum += u64::from(buf.as_slice()[17]);
            pool.give(buf);
        }
        copy_ns.push(start.elapsed().as_nanos() as f64 / offsets.len() as f64);

        let start = Instant::now();
        for &offset in offsets {
            let views = volume.read_views(offset, len as u64).expect("read");
            checksum += u64::from(views.parts().next().expect("a page")[17]);
        }
        view_ns.push(start.elapsed().as_nanos() as f64 / offsets.len() as f64);
    }
    assert!(checksum > 0, "the reads saw the written bytes");
    (median(copy_ns), median(view_ns))
}

fn main() {
    let rounds: usize = std::env::args()
        .nth(1)
        .and_then(|a| a.parse().ok())
        .unwrap_or(7);
    let volume = MemoryVolume::new(WORKING_SET_BYTES);
    let pages = WORKING_SET_BYTES / PAGE_BYTES as u64;
    for page in 0..pages {
        volume
            .write(
                page * PAGE_BYTES as u64,
                &[(page % 251) as u8 + 1; PAGE_BYTES],
            )
            .expect("write inside the volume");
    }
    println!(
        "memory volume, random reads over {} MiB, median of {rounds} rounds",
        WORKING_SET_BYTES >> 20
    );
    let mut rng = engine::stream(7, "memory-read-path");
    for len in [PAGE_BYTES, 128 << 10] {
        let count = READS_PER_ROUND * PAGE_BYTES / len;
        let slots = WORKING_SET_BYTES / len as u64;
        let offsets: Vec<u64> = (0..count)
            .map(|_| engine::rng::below(&mut rng, slots) * len as u64)
            .collect();
        let (copy, view) = measure(&volume, &offsets, len, rounds);
        println!(
            "{:>4} KiB reads ({count} a round): copy {copy:>9.1} ns, views {view:>8.1} ns, \
             saved {:>9.1} ns per read",
            len >> 10,
            copy - view
        );
    }
}
