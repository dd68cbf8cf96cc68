//! Unit tests of the file backend (`../file.rs`).

use std::fs::File;
use std::path::Path;
use std::sync::Arc;

use engine::IoClass;

use super::super::interface::{
    Backend, Completion, Fua, StorageError, StorageOp, Submitted, Volume,
};
use super::pages::{PageModes, Via};
use super::runs::{split_run_result, MemberOutcome};
use super::volume::WritePathCounters;
use super::{FileBackend, FileStats, FileVolume, RING_ENTRIES};
use crate::buf::{BufPool, IoBuf};
use crate::config::DirectIo;
use crate::sys;

fn temp_path(tag: &str) -> std::path::PathBuf {
    std::env::temp_dir().join(format!("ullstack-file-{tag}-{}.img", std::process::id()))
}

fn run(backend: &mut dyn Backend, tag: u64, op: StorageOp, buf: IoBuf) -> Completion {
    match backend.submit(tag, op, IoClass::Throughput, buf) {
        Submitted::Done(c) => c,
        Submitted::Pending => {
            backend.commit();
            let mut out = Vec::new();
            for _ in 0..10_000 {
                backend.poll(0, &mut out);
                if let Some(c) = out.pop() {
                    return c;
                }
                std::thread::sleep(std::time::Duration::from_micros(100));
            }
            panic!("no completion within 1 s");
        }
    }
}

/// A read the kernel cannot finish (an empty pipe) is cancelled and reaped before the
/// backend's buffers are freed: data written afterwards is still in the pipe.
#[test]
fn dropping_a_backend_cancels_and_reaps_operations_in_the_kernel() {
    let (rx, tx) = crate::sys::pipe().expect("pipe");
    let (rx, mut tx) = (File::from(rx), File::from(tx));
    let vol = Arc::new(FileVolume {
        name: "pipe".into(),
        buffered: rx.try_clone().expect("dup"),
        direct: None,
        size_bytes: 1 << 20,
        is_block_device: false,
        write_paths: WritePathCounters::default(),
        pages: PageModes::default(),
    });
    let mut be = FileBackend::with_ring(vol, sys::Ring::new(8).expect("ring"));
    let mut pool = BufPool::new();
    let op = StorageOp::Read { offset_bytes: 0 };
    assert!(matches!(
        be.submit(1, op, IoClass::Throughput, pool.take(4096)),
        Submitted::Pending
    ));
    be.commit();
    let mut out = Vec::new();
    be.poll(0, &mut out);
    assert!(out.is_empty(), "a read of an empty pipe cannot complete");
    assert_eq!(be.cancel_and_reap(), 1);
    assert_eq!(be.in_kernel, 0);
    drop(be);
    use std::io::{Read, Write};
    tx.write_all(&[7u8; 4096]).expect("write pipe");
    drop(tx);
    let mut got = Vec::new();
    let mut rx = rx;
    rx.read_to_end(&mut got).expect("read pipe");
    assert_eq!(got.len(), 4096, "the cancelled read took nothing");
}

#[test]
fn allocation_follows_seek_data_and_seek_hole() {
    use std::os::unix::fs::FileExt;
    let path = temp_path("alloc");
    let _ = std::fs::remove_file(&path);
    let size = 8u64 << 20;
    let vol = FileVolume::open("t", &path, Some(size), DirectIo::Off, 512).unwrap();
    let file = std::fs::OpenOptions::new().write(true).open(&path).unwrap();
    file.write_all_at(&[7u8; 4096], 4 << 20).unwrap();
    file.sync_all().unwrap();
    let mut runs = Vec::new();
    vol.allocation(0, size, 100, &mut runs).unwrap();
    let _ = std::fs::remove_file(&path);
    let total: u64 = runs.iter().map(|r| r.len_bytes).sum();
    assert_eq!(total, size, "{runs:?}");
    // Where the file system reports holes, the written block is data and the far ends
    // are holes; a file system without SEEK_HOLE reports one data run.
    if runs.len() > 1 {
        let kind_at = |pos: u64| {
            let mut start = 0;
            runs.iter()
                .find(|r| {
                    start += r.len_bytes;
                    pos < start
                })
                .map(|r| r.hole)
        };
        assert_eq!(kind_at(4 << 20), Some(false), "{runs:?}");
        assert_eq!(kind_at(0), Some(true), "{runs:?}");
        assert_eq!(kind_at(size - 1), Some(true), "{runs:?}");
    } else {
        assert!(!runs[0].hole, "{runs:?}");
    }
}

#[test]
fn write_read_flush_trim_roundtrip() {
    let path = temp_path("rt");
    let vol = Arc::new(FileVolume::open("t", &path, Some(1 << 20), DirectIo::Auto, 512).unwrap());
    assert_eq!(vol.size_bytes(), 1 << 20);
    let mut be = vol.clone().attach().unwrap();
    let mut pool = BufPool::new();
    // Aligned (direct where allowed) and unaligned-to-4k (buffered) writes.
    for (offset, len) in [(8192u64, 4096usize), (512, 1024), (65536, 200_000)] {
        let mut w = pool.take(len);
        for (i, b) in w.as_mut_slice().iter_mut().enumerate() {
            *b = (i as u64 * 31 + offset) as u8;
        }
        let expect = w.as_slice().to_vec();
        let c = run(
            &mut *be,
            1,
            StorageOp::Write {
                offset_bytes: offset,
                fua: Fua::Yes,
            },
            w,
        );
        assert_eq!(c.result, Ok(()));
        let r = pool.take(len);
        let c = run(
            &mut *be,
            2,
            StorageOp::Read {
                offset_bytes: offset,
            },
            r,
        );
        assert_eq!(c.tag, 2);
        assert_eq!(c.result, Ok(()));
        assert_eq!(c.buf.as_slice(), &expect[..], "offset {offset} len {len}");
    }
    let c = run(&mut *be, 3, StorageOp::Flush, IoBuf::empty());
    assert_eq!(c.result, Ok(()));
    let c = run(
        &mut *be,
        4,
        StorageOp::WriteZeroes {
            offset_bytes: 8192,
            len_bytes: 4096,
            fua: Fua::No,
        },
        IoBuf::empty(),
    );
    assert_eq!(c.result, Ok(()));
    let c = run(
        &mut *be,
        5,
        StorageOp::Read { offset_bytes: 8192 },
        pool.take(4096),
    );
    assert!(
        c.buf.as_slice().iter().all(|&b| b == 0),
        "write-zeroes range reads zeros"
    );
    let c = run(
        &mut *be,
        6,
        StorageOp::Trim {
            offset_bytes: 0,
            len_bytes: 65536,
        },
        IoBuf::empty(),
    );
    assert_eq!(c.result, Ok(()));
    assert_eq!(be.in_flight(), 0);
    drop(be);
    let _ = std::fs::remove_file(&path);
}

#[test]
fn many_in_flight_beyond_ring_size_complete() {
    let path = temp_path("many");
    let vol = Arc::new(FileVolume::open("t", &path, Some(4 << 20), DirectIo::Auto, 512).unwrap());
    let mut be = vol.attach().unwrap();
    let mut pool = BufPool::new();
    let n = RING_ENTRIES as u64 * 3;
    for i in 0..n {
        let mut w = pool.take(4096);
        w.as_mut_slice().fill(i as u8);
        assert!(matches!(
            be.submit(
                i,
                StorageOp::Write {
                    offset_bytes: i * 4096,
                    fua: Fua::No
                },
                IoClass::Throughput,
                w
            ),
            Submitted::Pending
        ));
    }
    let mut out = Vec::new();
    for _ in 0..20_000 {
        be.commit();
        be.poll(0, &mut out);
        if out.len() as u64 == n {
            break;
        }
        std::thread::sleep(std::time::Duration::from_micros(100));
    }
    assert_eq!(out.len() as u64, n);
    assert!(out.iter().all(|c| c.result.is_ok()));
    let mut tags: Vec<u64> = out.iter().map(|c| c.tag).collect();
    tags.sort_unstable();
    assert_eq!(
        tags,
        (0..n).collect::<Vec<_>>(),
        "every op completes exactly once"
    );
    let _ = std::fs::remove_file(&path);
}

#[test]
fn missing_file_without_size_names_path() {
    let err = FileVolume::open(
        "v",
        Path::new("/nonexistent/dir/x.img"),
        None,
        DirectIo::Auto,
        512,
    )
    .err()
    .expect("must fail")
    .to_string();
    assert!(err.contains("/nonexistent/dir/x.img"), "{err}");
}

#[test]
fn a_run_result_completes_whole_members_and_retries_the_rest_alone() {
    use MemberOutcome::{Retry, Written};
    let lens = [1024, 1024, 1024];
    assert_eq!(split_run_result(3072, &lens), vec![Written; 3]);
    assert_eq!(
        split_run_result(1536, &lens),
        vec![Written, Retry { done_bytes: 512 }, Retry { done_bytes: 0 }],
        "the essay's worked example"
    );
    assert_eq!(
        split_run_result(-libc::EIO, &lens),
        vec![Retry { done_bytes: 0 }; 3],
        "a failed run: each member gets its own write"
    );
    assert_eq!(split_run_result(0, &lens), vec![Retry { done_bytes: 0 }; 3]);
    assert_eq!(
        split_run_result(2048, &lens),
        vec![Written, Written, Retry { done_bytes: 0 }]
    );
}

/// Every completion of a step, as (tag, result), by tag.
type Results = Vec<(u64, Result<(), StorageError>)>;

/// Submits `writes` (offset, len, fua) in one step, runs them to completion and returns the
/// backend's counters and every completion's (tag, result).
fn one_step(vol: Arc<FileVolume>, writes: &[(u64, usize, Fua)]) -> (FileStats, Results) {
    let mut be = FileBackend::with_ring(vol, sys::Ring::new(64).expect("ring"));
    let mut pool = BufPool::new();
    for (tag, &(offset, len, fua)) in writes.iter().enumerate() {
        let mut w = pool.take(len);
        w.as_mut_slice()
            .iter_mut()
            .enumerate()
            .for_each(|(i, b)| *b = (offset as usize + i) as u8 ^ tag as u8);
        let op = StorageOp::Write {
            offset_bytes: offset,
            fua,
        };
        assert!(matches!(
            be.submit(tag as u64, op, IoClass::Throughput, w),
            Submitted::Pending
        ));
    }
    be.commit();
    let mut out = Vec::new();
    for _ in 0..20_000 {
        be.poll(0, &mut out);
        if out.len() == writes.len() {
            break;
        }
        std::thread::sleep(std::time::Duration::from_micros(100));
    }
    assert_eq!(be.in_flight(), 0, "every write completed");
    let mut done: Results = out.into_iter().map(|c| (c.tag, c.result)).collect();
    done.sort_by_key(|d| d.0);
    (be.stats(), done)
}

#[test]
fn contiguous_buffered_writes_of_a_step_go_in_as_one_writev_and_land_intact() {
    let path = temp_path("run");
    let vol = Arc::new(FileVolume::open("t", &path, Some(1 << 20), DirectIo::Off, 512).unwrap());
    // 40 contiguous 1 KiB writes from 4096, then one elsewhere, then 3 contiguous FUA ones.
    let mut writes: Vec<(u64, usize, Fua)> =
        (0..40).map(|i| (4096 + i * 1024, 1024, Fua::No)).collect();
    writes.push((512 * 1024, 4096, Fua::No));
    writes.extend((0..3).map(|i| (600 * 1024 + i * 512, 512, Fua::Yes)));
    let (stats, done) = one_step(vol.clone(), &writes);
    assert_eq!(done.len(), writes.len());
    assert!(done.iter().all(|d| d.1.is_ok()), "{done:?}");
    assert_eq!(
        stats,
        FileStats {
            sqes: 3,
            runs: 2,
            writes_in_runs: 43
        },
        "one run of 40, the lone write, one FUA run of 3"
    );
    use std::os::unix::fs::FileExt;
    let file = File::open(&path).unwrap();
    for (tag, &(offset, len, _)) in writes.iter().enumerate() {
        let mut got = vec![0u8; len];
        file.read_exact_at(&mut got, offset).unwrap();
        let want: Vec<u8> = (0..len)
            .map(|i| (offset as usize + i) as u8 ^ tag as u8)
            .collect();
        assert_eq!(got, want, "write {tag} at {offset}");
    }
    drop(file);
    let _ = std::fs::remove_file(&path);
}

#[test]
fn a_run_is_capped_and_never_merges_across_a_gap_or_a_fua_change() {
    let path = temp_path("cap");
    let vol = Arc::new(FileVolume::open("t", &path, Some(4 << 20), DirectIo::Off, 512).unwrap());
    // 100 contiguous 512 B writes: runs of 64 and 36.
    let writes: Vec<(u64, usize, Fua)> = (0..100).map(|i| (i * 512, 512, Fua::No)).collect();
    let (stats, _) = one_step(vol.clone(), &writes);
    assert_eq!((stats.sqes, stats.runs, stats.writes_in_runs), (2, 2, 100));
    // Alternating FUA, and a 1-byte gap: nothing merges.
    let writes = [
        (0, 512, Fua::No),
        (512, 512, Fua::Yes),
        (1024, 512, Fua::No),
        (1537, 512, Fua::No),
    ];
    let (stats, _) = one_step(vol.clone(), &writes);
    assert_eq!((stats.sqes, stats.runs), (4, 0));
    // Four 512 KiB writes: two runs of 1 MiB.
    let writes: Vec<(u64, usize, Fua)> = (0..4)
        .map(|i| (i * (512 << 10), 512 << 10, Fua::No))
        .collect();
    let (stats, _) = one_step(vol, &writes);
    assert_eq!((stats.sqes, stats.runs, stats.writes_in_runs), (2, 2, 4));
    let _ = std::fs::remove_file(&path);
}

/// A run the kernel refuses (the descriptor is read-only: EBADF) is retried member by
/// member, so every request gets its own error, and nothing is merged again.
#[test]
fn a_failed_run_gives_each_member_its_own_result() {
    let path = temp_path("ro");
    drop(FileVolume::open("t", &path, Some(1 << 20), DirectIo::Off, 512).unwrap());
    let vol = Arc::new(FileVolume {
        name: "ro".into(),
        buffered: File::open(&path).unwrap(),
        direct: None,
        size_bytes: 1 << 20,
        is_block_device: false,
        write_paths: WritePathCounters::default(),
        pages: PageModes::default(),
    });
    let writes: Vec<(u64, usize, Fua)> = (0..5).map(|i| (i * 1024, 1024, Fua::No)).collect();
    let (stats, done) = one_step(vol, &writes);
    assert_eq!((stats.runs, stats.writes_in_runs), (1, 5));
    assert_eq!(stats.sqes, 6, "the run, then each member alone");
    assert_eq!(done.len(), 5);
    assert!(
        done.iter()
            .all(|d| d.1 == Err(StorageError::Io(libc::EBADF))),
        "{done:?}"
    );
    let _ = std::fs::remove_file(&path);
}

/// Writes keep to one descriptor kind per stretch of the file (`file/pages.rs`): with another
/// worker's buffered write in flight on the stretch (its claim taken here by hand), a
/// whole-block write goes through the page cache instead of `O_DIRECT`; with another worker's
/// direct write in flight there, a write `O_DIRECT` cannot take (not 512 B-aligned) is held —
/// nothing in the kernel, a retry time set — until that claim is given back, then lands.
#[test]
fn writes_keep_to_one_descriptor_kind_per_stretch() {
    let path = temp_path("stretch");
    let vol = Arc::new(FileVolume::open("t", &path, Some(1 << 20), DirectIo::Auto, 512).unwrap());
    if vol.direct_align_bytes().is_none() {
        let _ = std::fs::remove_file(&path);
        println!("SKIP: the temporary folder's file system refuses O_DIRECT");
        return;
    }
    let mut be = FileBackend::with_ring(vol.clone(), sys::Ring::new(8).expect("ring"));
    let mut pool = BufPool::new();
    let write = |offset_bytes| StorageOp::Write {
        offset_bytes,
        fua: Fua::No,
    };

    assert!(
        vol.pages.claim(0, 100, Via::Buffered),
        "another worker's buffered write"
    );
    let mut w = pool.take(4096);
    w.as_mut_slice().fill(0xab);
    assert!(run(&mut be, 1, write(4096), w).result.is_ok());
    let paths = vol
        .write_paths()
        .expect("a file volume counts its write paths");
    assert_eq!(
        (paths.buffered_writes, paths.direct_block_writes),
        (1, 0),
        "{paths:?}"
    );
    vol.pages.release(0, 100, Via::Buffered);

    assert!(
        vol.pages.claim(8192, 4096, Via::Direct),
        "another worker's direct write"
    );
    let mut w = pool.take(200);
    w.as_mut_slice().fill(0xcd);
    assert!(matches!(
        be.submit(2, write(100), IoClass::Throughput, w),
        Submitted::Pending
    ));
    be.commit();
    assert_eq!(be.in_kernel, 0, "held: neither descriptor may take it");
    assert!(be.next_event_ns().is_some(), "a retry is due");
    let mut out = Vec::new();
    be.poll(0, &mut out);
    assert!(out.is_empty() && be.in_kernel == 0, "still held");
    vol.pages.release(8192, 4096, Via::Direct);
    for _ in 0..10_000 {
        be.poll(0, &mut out);
        if !out.is_empty() {
            break;
        }
        std::thread::sleep(std::time::Duration::from_micros(100));
    }
    assert_eq!(
        out.len(),
        1,
        "the held write completed once its stretch was free"
    );
    assert!(out[0].result.is_ok());
    assert_eq!(be.next_event_ns(), None, "nothing held any more");
    let bytes = std::fs::read(&path).expect("read back");
    assert!(bytes[100..300].iter().all(|&b| b == 0xcd));
    assert!(bytes[4096..8192].iter().all(|&b| b == 0xab));
    drop(be);
    let _ = std::fs::remove_file(&path);
}

/// *Order of overlapping requests*: a read that overlaps an earlier write waits in the backend
/// until the write has finished, and then reads what it wrote; a read of other bytes does not
/// wait.
#[test]
fn a_read_after_an_overlapping_write_waits_for_it_and_reads_its_data() {
    let path = temp_path("order");
    let _ = std::fs::remove_file(&path);
    let vol = Arc::new(FileVolume::open("t", &path, Some(1 << 20), DirectIo::Off, 512).unwrap());
    let mut be = FileBackend::with_ring(vol, sys::Ring::new(8).expect("ring"));
    let mut pool = BufPool::new();
    let mut data = pool.take(4096);
    data.as_mut_slice().fill(0xA5);
    let write = StorageOp::Write {
        offset_bytes: 8192,
        fua: Fua::No,
    };
    let submit = |be: &mut FileBackend, tag, op, buf| {
        assert!(matches!(
            be.submit(tag, op, IoClass::Throughput, buf),
            Submitted::Pending
        ));
    };
    submit(&mut be, 1, write, data);
    // Overlaps the write's last 512 bytes.
    submit(
        &mut be,
        2,
        StorageOp::Read {
            offset_bytes: 11776,
        },
        pool.take(4096),
    );
    // Elsewhere.
    submit(
        &mut be,
        3,
        StorageOp::Read {
            offset_bytes: 65536,
        },
        pool.take(4096),
    );
    be.commit();
    assert_eq!(
        be.stats().sqes,
        2,
        "the write and the other read went in; the overlapping read waits"
    );
    assert_eq!(be.waiting.len(), 1);
    let mut out = Vec::new();
    for _ in 0..10_000 {
        be.poll(0, &mut out);
        if out.len() == 3 {
            break;
        }
        std::thread::sleep(std::time::Duration::from_micros(100));
    }
    assert_eq!(out.len(), 3, "every request completed");
    let order: Vec<u64> = out.iter().map(|c| c.tag).collect();
    let at = |tag| order.iter().position(|&t| t == tag).unwrap();
    assert!(
        at(1) < at(2),
        "the read finished after the write: {order:?}"
    );
    let read = out.iter().find(|c| c.tag == 2).unwrap();
    assert!(read.result.is_ok());
    assert!(
        read.buf.as_slice()[..512].iter().all(|&b| b == 0xA5),
        "it read the write's bytes"
    );
    assert!(
        read.buf.as_slice()[512..].iter().all(|&b| b == 0),
        "and zeros past them"
    );
    assert_eq!(be.unfinished_changes, 0);
    let _ = std::fs::remove_file(&path);
}
