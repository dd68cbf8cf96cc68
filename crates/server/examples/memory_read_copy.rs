//! Benchmark: what a 4 KiB read costs the memory backend's own code, copied into the reply's
//! buffer (`MemoryVolume::read`, how every read was answered before replies were sent from
//! the volume's pages) against answered with a reference to the page
//! (`MemoryVolume::read_shared`, what the memory backend does now for a read within one
//! page). Each read's payload is then copied once more into a sink, standing in for the
//! socket's copy of the reply (`writev`), which reads the buffer in the first case and the
//! page in the second: so the figure is the memory work of one read, user and kernel, which
//! `nbd_cpu_efficiency` cannot resolve on a loaded machine (its figures move by 2× run to run
//! there). It leaves out the syscalls, the same in both.
//!
//! A volume of `VOLUME_MIB` MiB is written whole (so reads find pages, far more than the
//! caches hold, as fio's random reads do), then `READS` random page-aligned reads are timed
//! each way, in alternating rounds; the copied reads' buffer is reused, as the worker's pool
//! reuses its buffers; the shared reads' references are dropped after each read, as a reply's
//! is once sent. Prints ns of this thread's CPU time per read for each way and round, and
//! their medians.
//!
//! ```text
//! cargo run --profile checked -p server --example memory_read_copy -- [VOLUME_MIB] [READS] [ROUNDS]
//! ```

use std::sync::Arc;

use server::backend::memory::{MemoryVolume, PAGE_BYTES};

/// This thread's CPU time, ns (`CLOCK_THREAD_CPUTIME_ID`): on a shared machine the wall
/// clock counts the neighbours' time too.
fn thread_cpu_ns() -> u64 {
    let mut t = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: clock_gettime writes only into `t`, which outlives the call.
    unsafe { libc::clock_gettime(libc::CLOCK_THREAD_CPUTIME_ID, &mut t) };
    t.tv_sec as u64 * 1_000_000_000 + t.tv_nsec as u64
}

fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(|a, b| a.total_cmp(b));
    v.get(v.len() / 2).copied().unwrap_or(0.0)
}

fn main() {
    let mut args = std::env::args().skip(1);
    let volume_mib: u64 = args.next().and_then(|s| s.parse().ok()).unwrap_or(1024);
    let reads: usize = args
        .next()
        .and_then(|s| s.parse().ok())
        .unwrap_or(1_000_000);
    let rounds: usize = args.next().and_then(|s| s.parse().ok()).unwrap_or(5);
    let size = volume_mib << 20;
    let volume = MemoryVolume::new(size);
    let chunk = vec![0x5au8; 1 << 20];
    for mib in 0..volume_mib {
        volume.write(mib << 20, &chunk).expect("fill");
    }
    let pages = size / PAGE_BYTES as u64;
    let mut rng = engine::stream(7, "memory-read-copy");
    let offsets: Vec<u64> = (0..reads)
        .map(|_| engine::rng::below(&mut rng, pages) * PAGE_BYTES as u64)
        .collect();
    let zero: Arc<[u8]> = Arc::from(vec![0u8; PAGE_BYTES]);
    let mut buf = vec![0u8; PAGE_BYTES];
    let mut sink = vec![0u8; PAGE_BYTES];
    println!(
        "{volume_mib} MiB volume written whole; {reads} random 4 KiB reads a round; ns per read"
    );
    let (mut copied, mut shared) = (Vec::new(), Vec::new());
    let mut checksum = 0u64;
    for round in 0..rounds {
        let t = thread_cpu_ns();
        for &at in &offsets {
            volume.read(at, &mut buf).expect("read");
            sink.copy_from_slice(std::hint::black_box(&buf));
            checksum = checksum.wrapping_add(u64::from(sink[17]));
        }
        let c = (thread_cpu_ns() - t) as f64 / reads as f64;
        let t = thread_cpu_ns();
        for &at in &offsets {
            let page = volume
                .read_shared(at, PAGE_BYTES, &zero)
                .expect("read")
                .expect("one page");
            sink.copy_from_slice(std::hint::black_box(page.as_slice()));
            checksum = checksum.wrapping_add(u64::from(sink[17]));
        }
        let s = (thread_cpu_ns() - t) as f64 / reads as f64;
        println!("round {round}: copied {c:>7.1}  shared {s:>7.1}");
        copied.push(c);
        shared.push(s);
    }
    println!(
        "median: copied {:.1} ns, shared {:.1} ns per read (checksum {checksum})",
        median(copied),
        median(shared)
    );
}
