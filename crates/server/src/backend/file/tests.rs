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
        fixed: None,
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
        fixed: None,
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

/// The byte at `pos` of the pattern the registered-buffer tests write.
fn pattern_byte(pos: u64) -> u8 {
    (pos.wrapping_mul(2_654_435_761) >> 7) as u8
}

/// A file of `size` bytes holding [`pattern_byte`] everywhere, opened with `fixed` registered
/// buffers; `None` (skipped, saying why) where the ring refuses to register them.
fn fixed_volume(
    tag: &str,
    size: u64,
    direct: DirectIo,
    fixed: usize,
) -> Option<(Arc<FileVolume>, std::path::PathBuf)> {
    use std::os::unix::fs::FileExt;
    let path = temp_path(tag);
    let _ = std::fs::remove_file(&path);
    let vol = FileVolume::open("t", &path, Some(size), direct, 512)
        .unwrap()
        .with_fixed_buffers(fixed);
    let bytes: Vec<u8> = (0..size).map(pattern_byte).collect();
    let file = std::fs::OpenOptions::new().write(true).open(&path).unwrap();
    file.write_all_at(&bytes, 0).unwrap();
    file.sync_all().unwrap();
    let vol = Arc::new(vol);
    let probe = FileBackend::attached(vol.clone());
    if !probe.reads_fixed() {
        let _ = std::fs::remove_file(&path);
        testkit::skip(tag, "the ring refused to register the buffers");
        return None;
    }
    Some((vol, path))
}

impl FileBackend {
    /// A backend on `volume` as `attach` makes it, with its concrete type.
    fn attached(volume: Arc<FileVolume>) -> FileBackend {
        let mut be = FileBackend::with_ring(volume, sys::Ring::new(RING_ENTRIES).expect("ring"));
        be.register_fixed();
        be
    }
}

/// Submits reads of `(offset, len)`, all in flight together, and returns their completions
/// by tag (the index in `reads`).
fn read_all(be: &mut FileBackend, pool: &mut BufPool, reads: &[(u64, usize)]) -> Vec<Completion> {
    for (tag, &(offset, len)) in reads.iter().enumerate() {
        let op = StorageOp::Read {
            offset_bytes: offset,
        };
        let submitted = be.submit(tag as u64, op, IoClass::Throughput, pool.take(len));
        assert!(matches!(submitted, Submitted::Pending));
    }
    be.commit();
    let mut out = Vec::new();
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
    while out.len() < reads.len() {
        assert!(
            std::time::Instant::now() < deadline,
            "reads did not complete"
        );
        be.poll(0, &mut out);
    }
    out.sort_by_key(|c| c.tag);
    out
}

/// Checks each completion holds the pattern's bytes of its read.
fn check_pattern(reads: &[(u64, usize)], done: &[Completion]) {
    for (c, &(offset, len)) in done.iter().zip(reads) {
        assert!(c.result.is_ok(), "read {} failed: {:?}", c.tag, c.result);
        let want: Vec<u8> = (offset..offset + len as u64).map(pattern_byte).collect();
        assert!(
            c.buf.as_slice() == want.as_slice(),
            "read {} of {len} at {offset}: wrong bytes",
            c.tag
        );
    }
}

/// Reads in flight together into registered buffers return each its own bytes, aligned
/// (direct where the file system allows) and not (buffered), 4 KiB and smaller; with more
/// reads in flight than buffers the rest go in plain and are counted; once the replies'
/// buffers are back in the pool the next reads take registered buffers from it, no swap.
#[test]
fn registered_buffer_reads_return_their_own_bytes_and_fall_back_when_all_are_out() {
    let test = "registered_buffer_reads_return_their_own_bytes_and_fall_back_when_all_are_out";
    let Some((vol, path)) = fixed_volume("fixed-conc", 4 << 20, DirectIo::Auto, 48) else {
        return;
    };
    let home = vol.fixed_buffers().expect("registered buffers").clone();
    let mut be = FileBackend::attached(vol.clone());
    let mut pool = BufPool::new();
    // 160 reads: aligned 4 KiB ones over the file, 512 B-aligned ones, 1 KiB ones, and 8 KiB
    // ones (too large for a registered buffer: plain, not counted).
    let reads: Vec<(u64, usize)> = (0..160u64)
        .map(|k| match k % 4 {
            0 => ((k * 7919 % 1024) * 4096, 4096),
            1 => ((k * 104_729 % 8000) * 512, 4096),
            2 => ((k * 31 % 4000) * 1024 + 512, 1024),
            _ => ((k * 13 % 500) * 8192, 8192),
        })
        .collect();
    let eligible = reads.iter().filter(|r| r.1 <= 4096).count() as u64;
    let done = read_all(&mut be, &mut pool, &reads);
    check_pattern(&reads, &done);
    let (fixed, fallbacks) = (home.fixed_reads(), home.fallbacks());
    assert_eq!(fixed + fallbacks, eligible, "every small read counted once");
    assert!(fixed >= 48, "{fixed} registered reads, 48 buffers");
    assert!(
        fallbacks > 0,
        "120 small reads in flight, 48 buffers: none fell back"
    );
    let registered = done.iter().filter(|c| c.buf.is_fixed()).count() as u64;
    assert_eq!(
        registered, fixed,
        "the registered reads' replies hold registered buffers"
    );
    assert!(done
        .iter()
        .filter(|c| c.buf.len() == 8192)
        .all(|c| !c.buf.is_fixed()));
    // The replies sent: their buffers go to the worker's pool, registered ones included.
    for c in done {
        pool.give(c.buf);
    }
    assert_eq!(
        home.free_count(),
        0,
        "the pool keeps the registered buffers"
    );
    let second = read_all(&mut be, &mut pool, &reads[..8]);
    check_pattern(&reads[..8], &second);
    assert!(second
        .iter()
        .filter(|c| c.buf.len() <= 4096)
        .all(|c| c.buf.is_fixed()));
    drop(second);
    drop(pool);
    assert_eq!(
        home.free_count(),
        48,
        "dropped buffers go home, all of them"
    );
    let _ = (test, std::fs::remove_file(&path));
}

/// A registered-buffer read that meets the end of a file that shrank completes in two
/// fixed reads (the short one, then EOF) with the data and then zeros.
#[test]
fn a_short_registered_buffer_read_continues_in_its_buffer() {
    let Some((vol, path)) = fixed_volume("fixed-short", 1 << 20, DirectIo::Off, 4) else {
        return;
    };
    let _ = std::fs::remove_file(&path);
    let mut be = FileBackend::attached(vol.clone());
    let mut pool = BufPool::new();
    // Cut the file 1 KiB into its last 4 KiB block.
    let end = (1u64 << 20) - 4096;
    vol.buffered.set_len(end + 1024).expect("truncate");
    let done = read_all(&mut be, &mut pool, &[(end, 4096)]);
    assert!(done[0].result.is_ok());
    assert!(done[0].buf.is_fixed());
    let got = done[0].buf.as_slice();
    let want: Vec<u8> = (end..end + 1024).map(pattern_byte).collect();
    assert_eq!(&got[..1024], want.as_slice());
    assert!(
        got[1024..].iter().all(|&b| b == 0),
        "past EOF reads as zeros"
    );
    assert_eq!(be.stats().sqes, 2, "the short read, then its rest");
}

/// Data written through the backend reads back the same through registered buffers and
/// through a volume without them (the plain path), and a read that finds the one registered
/// buffer out (its reply not yet sent) goes in plain, counted.
#[test]
fn writes_read_back_through_both_paths() {
    let Some((vol, path)) = fixed_volume("fixed-rw", 1 << 20, DirectIo::Auto, 1) else {
        return;
    };
    let home = vol.fixed_buffers().expect("registered").clone();
    let mut be = FileBackend::attached(vol.clone());
    let mut pool = BufPool::new();
    let mut data = pool.take(4096);
    data.as_mut_slice().fill(0xa5);
    let write = StorageOp::Write {
        offset_bytes: 8192,
        fua: Fua::No,
    };
    let c = run(&mut be, 1, write, data);
    assert!(c.result.is_ok());
    pool.give(c.buf);
    let op = StorageOp::Read { offset_bytes: 8192 };
    let fixed = run(&mut be, 2, op, pool.take(4096));
    assert!(fixed.buf.is_fixed() && fixed.buf.as_slice().iter().all(|&b| b == 0xa5));
    let mut spare = IoBuf::zeroed(4096);
    spare.set_len(4096);
    let plain = run(&mut be, 3, op, spare);
    assert!(!plain.buf.is_fixed() && plain.buf.as_slice().iter().all(|&b| b == 0xa5));
    assert_eq!((home.fixed_reads(), home.fallbacks()), (1, 1));
    // A volume on the same file without registered buffers reads the same bytes.
    let other = Arc::new(FileVolume::open("u", &path, None, DirectIo::Auto, 512).expect("reopen"));
    let mut other_be = other.attach().expect("attach");
    let c = run(&mut *other_be, 4, op, pool.take(4096));
    assert!(!c.buf.is_fixed() && c.buf.as_slice().iter().all(|&b| b == 0xa5));
    let _ = std::fs::remove_file(&path);
}

/// A read that arrives holding another volume's registered buffer swaps it for one of its own
/// volume's (the other goes back to its home) and is counted as registered.
#[test]
fn another_volumes_registered_buffer_is_swapped_and_goes_home() {
    let Some((vol, path)) = fixed_volume("fixed-other", 1 << 20, DirectIo::Off, 2) else {
        return;
    };
    let _ = std::fs::remove_file(&path);
    let home = vol.fixed_buffers().expect("registered").clone();
    let other = crate::buf::FixedBufs::new(1, 4096);
    let mut be = FileBackend::attached(vol);
    let foreign = other.take(4096).expect("a free buffer");
    assert_eq!(other.free_count(), 0);
    let c = run(&mut be, 1, StorageOp::Read { offset_bytes: 4096 }, foreign);
    assert!(
        c.buf.fixed_index(&home).is_some(),
        "read into its own volume's buffer"
    );
    assert_eq!(other.free_count(), 1, "the other volume's buffer went home");
    assert_eq!((home.fixed_reads(), home.fallbacks()), (1, 0));
    let want: Vec<u8> = (4096..8192).map(pattern_byte).collect();
    assert_eq!(c.buf.as_slice(), want.as_slice());
}
