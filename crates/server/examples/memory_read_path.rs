//! Benchmark: the CPU a memory volume spends on one READ (4 KiB and 128 KiB), the two ways it
//! can answer: copying the pages into the request's pooled buffer (`MemoryVolume::read`, what
//! every read did before page views) or handing back views of the pages
//! (`MemoryVolume::read_views`: a reference count on the page's chunk raised a page, dropped
//! when the reply is sent; `server/src/buf.rs`, *Replies from a memory volume's pages*). The
//! views' bytes are not read: the worker never reads them (the kernel copies them into the
//! socket).
//!
//! The volume holds `WORKING_SET_BYTES` of written pages (larger than this machine's caches,
//! as a 1 GiB fio working set is); each round reads `READS_PER_ROUND` ranges at random
//! aligned offsets (the same offsets both ways) and the figure is the median over rounds of
//! nanoseconds per read, alternating the two ways round by round. The kernel's own copy of
//! the reply into the socket happens either way and is not in the figure (it then reads the
//! pages from memory instead of a freshly written buffer).
//!
//! Then the send side of a page-view reply (128 KiB, 1 MiB and 32 MiB: 33, 257 and 8,193
//! parts with the header): replies queued on a connection's output (`server::conn::ConnCore`) one at a time
//! and written with `ConnCore::write_out` into a blocking loopback socket that a reader thread
//! drains, so each `writev` sends all it gathered and the number of calls is what the
//! per-call iovec cap makes it. It prints the writing thread's CPU per reply (its
//! `CLOCK_THREAD_CPUTIME_ID`: the gather, the calls and the kernel's copy, not the time it
//! waited for the reader) and its `writev` calls per reply (`syscw` of `/proc/thread-self/io`).
//!
//! ```text
//! cargo run --release -p server --example memory_read_path -- [ROUNDS]
//! ```

use std::time::Instant;

use std::io::Read;
use std::net::{TcpListener, TcpStream};

use server::backend::memory::{MemoryVolume, PAGE_BYTES};
use server::buf::{BufPool, ReplyData};
use server::conn::{ConnCore, ConnRef, Head, OutFrame, WriteOutcome};

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
            checksum += views.len() as u64;
        }
        view_ns.push(start.elapsed().as_nanos() as f64 / offsets.len() as f64);
    }
    assert!(checksum > 0, "the reads saw the written bytes");
    (median(copy_ns), median(view_ns))
}

/// This thread's CPU time, ns.
fn thread_cpu_ns() -> u64 {
    let mut ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: `ts` is a valid timespec for the call to fill.
    unsafe { libc::clock_gettime(libc::CLOCK_THREAD_CPUTIME_ID, &mut ts) };
    ts.tv_sec as u64 * 1_000_000_000 + ts.tv_nsec as u64
}

/// Write syscalls this thread made so far (`syscw`, which counts `writev` too).
fn thread_write_calls() -> u64 {
    std::fs::read_to_string("/proc/thread-self/io")
        .ok()
        .and_then(|t| {
            t.lines()
                .find_map(|l| l.strip_prefix("syscw:").and_then(|v| v.trim().parse().ok()))
        })
        .unwrap_or(0)
}

/// Median writer CPU ns and `writev` calls per reply of page views at `offsets`, sent through
/// `ConnCore::write_out` into a loopback socket a reader thread drains.
fn measure_send(volume: &MemoryVolume, offsets: &[u64], len: usize, rounds: usize) -> (f64, f64) {
    let listener = TcpListener::bind("127.0.0.1:0").expect("bind");
    let mut client = TcpStream::connect(listener.local_addr().expect("addr")).expect("connect");
    let (server, _) = listener.accept().expect("accept");
    let expected = (rounds * offsets.len() * (len + 16)) as u64;
    let reader = std::thread::spawn(move || {
        let mut buf = vec![0u8; 1 << 20];
        let mut got = 0u64;
        while got < expected {
            match client.read(&mut buf) {
                Ok(0) | Err(_) => break,
                Ok(n) => got += n as u64,
            }
        }
        got
    });
    let me = ConnRef {
        index: 0,
        generation: 1,
    };
    let mut core = ConnCore::new(server, None, me, 0, 0);
    let mut pool = BufPool::new();
    let (mut cpu_ns, mut calls) = (Vec::new(), Vec::new());
    for _ in 0..rounds {
        let (cpu0, calls0) = (thread_cpu_ns(), thread_write_calls());
        for &offset in offsets {
            let views = volume.read_views(offset, len as u64).expect("read");
            core.push(OutFrame {
                head: Head::inline(&[0xaa; 16]),
                payload: Some(ReplyData::Pages(views)),
            });
            while !core.out.is_empty() {
                assert_eq!(core.write_out(&mut pool), WriteOutcome::Sent);
            }
        }
        let n = offsets.len() as f64;
        cpu_ns.push((thread_cpu_ns() - cpu0) as f64 / n);
        calls.push((thread_write_calls() - calls0) as f64 / n);
    }
    drop(core);
    assert_eq!(
        reader.join().expect("reader"),
        expected,
        "the reader got every byte"
    );
    (median(cpu_ns), median(calls))
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
    println!("sending page-view replies through ConnCore::write_out (blocking loopback socket):");
    for len in [128usize << 10, 1 << 20, 32 << 20] {
        let count = (20_000 * PAGE_BYTES / len).max(8);
        let slots = WORKING_SET_BYTES / len as u64;
        let offsets: Vec<u64> = (0..count)
            .map(|_| engine::rng::below(&mut rng, slots) * len as u64)
            .collect();
        let (cpu, calls) = measure_send(&volume, &offsets, len, rounds);
        println!(
            "{:>4} KiB replies ({count} a round): writer CPU {cpu:>9.1} ns per reply, \
             {calls:.2} writev calls per reply",
            len >> 10
        );
    }
}
