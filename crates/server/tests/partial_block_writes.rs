//! Partial-block writes on a file volume with `direct = "auto"` (the default), through NBD
//! (`backend/file.rs`, *Partial-block writes* and *Coherence*): 1 KiB writes to a fresh sparse
//! file are refused by the file system's no-wait direct path and taken by the page cache (they
//! were each a serialized read-modify-write of a 4 KiB block before: issue 28, 14x nbdkit's
//! CPU); a block moves between the page cache and `O_DIRECT` as Linux allows, and every read
//! sees the last write completed before it, whichever descriptor either took.
//!
//! The refusals asserted are ext4's and XFS's (a partial-block direct write is taken without
//! waiting only as a pure overwrite of a written block with no cached page); on another file
//! system, or where the scratch directory refuses `O_DIRECT`, the tests skip and say so (under
//! `ULLSTACK_REQUIRE_TOOLS=1`, as in CI, they fail instead).

mod common;

use std::path::Path;

use server::backend::WritePaths;
use server::ServerHandle;

const KIB: usize = 1024;
/// ext4's and XFS's block on the disks tested here.
const FS_BLOCK_BYTES: usize = 4096;
const EXT4_SUPER_MAGIC: i64 = 0xEF53;
const XFS_SUPER_MAGIC: i64 = 0x5846_5342;

/// Why `dir` cannot show the behaviour these tests assert, or None if it can.
fn unsuitable(dir: &Path) -> Option<String> {
    // One probe file per call: the tests run in parallel in one process, and one's clean-up
    // must not remove another's probe while it opens it.
    static PROBES: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);
    let n = PROBES.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    let probe = dir.join(format!(
        "ullstack-partial-probe-{}-{n}.img",
        std::process::id()
    ));
    let opened = server::backend::file::FileVolume::open(
        "probe",
        &probe,
        Some(1 << 20),
        server::config::DirectIo::On,
        512,
    );
    let _ = std::fs::remove_file(&probe);
    let volume = match opened {
        Ok(v) => v,
        Err(e) => return Some(format!("{} refuses O_DIRECT ({e})", dir.display())),
    };
    if volume.fs_block_bytes() != Some(FS_BLOCK_BYTES as u64) {
        return Some(format!(
            "{}: file-system block {:?}, not 4 KiB",
            dir.display(),
            volume.fs_block_bytes()
        ));
    }
    let cdir = std::ffi::CString::new(dir.as_os_str().as_encoded_bytes()).ok()?;
    // SAFETY: zeroed statfs is a valid out-parameter.
    let mut fs: libc::statfs = unsafe { std::mem::zeroed() };
    // SAFETY: `cdir` is a valid C string and `fs` a valid out-parameter.
    if unsafe { libc::statfs(cdir.as_ptr(), &mut fs) } != 0 {
        return Some(format!("statfs {}", dir.display()));
    }
    let magic = fs.f_type as i64;
    (magic != EXT4_SUPER_MAGIC && magic != XFS_SUPER_MAGIC).then(|| {
        format!(
            "{} is neither ext4 nor XFS (f_type {magic:#x})",
            dir.display()
        )
    })
}

/// A server with one 16 MiB fresh file volume `vol` (`direct = "auto"`, scheduler off so no
/// pacing slows the test), or None (skipped) where the scratch directory cannot show the
/// behaviour.
fn serve(test: &str, file: &common::TempFile) -> Option<ServerHandle> {
    let dir = file.0.parent().expect("scratch dir");
    if let Some(reason) = unsuitable(dir) {
        testkit::skip(test, &reason);
        return None;
    }
    let backend = format!(
        "{{ kind = \"file\", path = \"{}\", size = \"16MiB\", direct = \"auto\" }}",
        file.0.display()
    );
    Some(common::start(&common::standard_config(&backend, "off")))
}

fn write_paths(server: &ServerHandle) -> WritePaths {
    let shared = server.shared();
    let entry = shared
        .volumes
        .iter()
        .find(|v| v.name == "vol")
        .expect("volume vol");
    entry
        .volume
        .write_paths()
        .expect("a file volume counts its write paths")
}

/// The counters gained since `before`.
fn since(server: &ServerHandle, before: WritePaths) -> WritePaths {
    let now = write_paths(server);
    WritePaths {
        direct_block_writes: now.direct_block_writes - before.direct_block_writes,
        direct_partial_block_writes: now.direct_partial_block_writes
            - before.direct_partial_block_writes,
        partial_block_writes_to_page_cache: now.partial_block_writes_to_page_cache
            - before.partial_block_writes_to_page_cache,
        buffered_writes: now.buffered_writes - before.buffered_writes,
        direct_rerouted_writes: now.direct_rerouted_writes - before.direct_rerouted_writes,
    }
}

#[test]
fn pipelined_1k_writes_to_a_fresh_file_go_through_the_page_cache_and_land_intact() {
    const WRITES: u64 = 4_000;
    let test = "pipelined_1k_writes_to_a_fresh_file_go_through_the_page_cache_and_land_intact";
    let file = common::TempFile::new("partial-fresh");
    let Some(server) = serve(test, &file) else {
        return;
    };
    let mut nbd =
        common::RawNbd::connect(server.addrs.nbd.expect("nbd"), "default").expect("connect");
    // Random-looking 1 KiB slots over the first 4 MiB (every slot at most once: no two writes
    // in flight overlap), all sent before any reply is read back.
    let slots = 4 << 10;
    let place = move |i: u64| ((i * 2_654_435_761) % slots) * KIB as u64;
    let writer = {
        let mut tx = nbd.stream.try_clone().expect("clone");
        std::thread::spawn(move || {
            use std::io::Write;
            let mut frame = Vec::new();
            for i in 0..WRITES {
                let offset = place(i);
                frame.extend_from_slice(&proto::nbd::REQUEST_MAGIC.to_be_bytes());
                frame.extend_from_slice(&0u16.to_be_bytes());
                let write = proto::nbd::transmission::CommandType::Write.to_u16();
                frame.extend_from_slice(&write.to_be_bytes());
                frame.extend_from_slice(&(1000 + i).to_be_bytes());
                frame.extend_from_slice(&offset.to_be_bytes());
                frame.extend_from_slice(&(KIB as u32).to_be_bytes());
                frame.extend_from_slice(&common::pattern(offset, KIB, 5));
            }
            tx.write_all(&frame).expect("send writes");
        })
    };
    for _ in 0..WRITES {
        let (err, cookie) = nbd.recv_head();
        assert_eq!(err, 0, "write {} failed", cookie - 1000);
    }
    writer.join().expect("writer");
    let paths = write_paths(&server);
    assert_eq!(
        paths,
        WritePaths {
            partial_block_writes_to_page_cache: WRITES,
            ..WritePaths::default()
        },
        "every 1 KiB write into the fresh file must be refused by the no-wait direct path and \
         taken by the page cache, none sent to O_DIRECT to wait there"
    );
    for i in 0..WRITES {
        let offset = place(i);
        let got = nbd.read(offset, KIB as u32).expect("read back");
        assert_eq!(
            got,
            common::pattern(offset, KIB, 5),
            "write {i} at {offset}"
        );
    }
    nbd.disconnect();
}

/// One block through every transition the *Coherence* essay names, checking the data after
/// each and which path each write took.
#[test]
fn a_block_moves_between_page_cache_and_o_direct_and_reads_its_last_write() {
    let test = "a_block_moves_between_page_cache_and_o_direct_and_reads_its_last_write";
    let file = common::TempFile::new("partial-moves");
    let Some(server) = serve(test, &file) else {
        return;
    };
    let mut nbd =
        common::RawNbd::connect(server.addrs.nbd.expect("nbd"), "default").expect("connect");
    let block = 3 * FS_BLOCK_BYTES as u64;
    let mut model = vec![0u8; FS_BLOCK_BYTES];
    let mut seed = 0u8;
    let mut write = |nbd: &mut common::RawNbd, model: &mut Vec<u8>, at: usize, len: usize| {
        seed = seed.wrapping_add(1);
        let data = common::pattern(block + at as u64, len, seed);
        assert_eq!(nbd.write(block + at as u64, &data, false), 0);
        model[at..at + len].copy_from_slice(&data);
    };
    let check = |nbd: &mut common::RawNbd, model: &[u8], step: &str| {
        let whole = nbd.read(block, FS_BLOCK_BYTES as u32).expect("read block");
        assert!(whole == model, "{step}: the 4 KiB (direct) read differs");
        for part in 0..4 {
            let at = part * KIB;
            let got = nbd.read(block + at as u64, KIB as u32).expect("read 1 KiB");
            assert!(
                got == model[at..at + KIB],
                "{step}: 1 KiB read at +{at} differs"
            );
        }
        let odd = nbd.read(block + 512, 2560).expect("read 512 B-aligned");
        assert!(
            odd == model[512..3072],
            "{step}: 512 B-aligned read across the parts differs"
        );
    };
    let one = |paths: WritePaths, what: &str| {
        let expect = match what {
            "cache" => WritePaths {
                partial_block_writes_to_page_cache: 1,
                ..WritePaths::default()
            },
            "direct-partial" => WritePaths {
                direct_partial_block_writes: 1,
                ..WritePaths::default()
            },
            _ => WritePaths {
                direct_block_writes: 1,
                ..WritePaths::default()
            },
        };
        assert_eq!(paths, expect, "expected one write through {what}");
    };

    // A hole: the file system refuses the no-wait direct write; the page cache takes it.
    let before = write_paths(&server);
    write(&mut nbd, &mut model, KIB, KIB);
    one(since(&server, before), "cache");
    check(&mut nbd, &model, "1 KiB into a hole");

    // The block has a cached (dirty) page: refused again.
    let before = write_paths(&server);
    write(&mut nbd, &mut model, 2 * KIB, KIB);
    one(since(&server, before), "cache");
    check(&mut nbd, &model, "1 KiB beside buffered data");

    // Written back (FLUSH) but still cached: a clean cached page is refused too.
    assert_eq!(nbd.flush(), 0);
    let before = write_paths(&server);
    write(&mut nbd, &mut model, 0, KIB);
    one(since(&server, before), "cache");
    check(&mut nbd, &model, "1 KiB over a written, cached block");

    // A whole-block direct write writes back and drops the cached page.
    let before = write_paths(&server);
    write(&mut nbd, &mut model, 0, FS_BLOCK_BYTES);
    one(since(&server, before), "direct");
    check(&mut nbd, &model, "4 KiB direct over buffered data");

    // Written and uncached (NBD's reads of it were all direct): a pure overwrite, which the
    // file system takes directly.
    let before = write_paths(&server);
    write(&mut nbd, &mut model, 3 * KIB, KIB);
    one(since(&server, before), "direct-partial");
    check(&mut nbd, &model, "1 KiB direct overwrite");

    // A buffered reader elsewhere (this process, through its own descriptor) caches the
    // block: the next partial write is refused and taken by the page cache again.
    {
        use std::os::unix::fs::FileExt;
        let mut page = vec![0u8; FS_BLOCK_BYTES];
        let reader = std::fs::File::open(&file.0).expect("open the volume file");
        reader
            .read_exact_at(&mut page, block)
            .expect("buffered read");
        assert!(page == model, "a buffered reader sees the direct writes");
    }
    let before = write_paths(&server);
    write(&mut nbd, &mut model, KIB, KIB);
    one(since(&server, before), "cache");
    check(
        &mut nbd,
        &model,
        "1 KiB after a buffered reader cached the block",
    );
    assert_eq!(nbd.flush(), 0);
    let on_disk = std::fs::read(&file.0).expect("read the file");
    assert!(
        on_disk[block as usize..][..FS_BLOCK_BYTES] == model[..],
        "the file after FLUSH differs"
    );
    nbd.disconnect();
}

/// Mixed 1 KiB and 4 KiB writes and reads (and 512 B-aligned reads across them, and FLUSHes) over 16 blocks,
/// one request at a time, against a model; prints its seed when it fails.
#[test]
fn mixed_1k_and_4k_writes_and_reads_on_the_same_blocks_read_the_last_write() {
    const OPS: u32 = 3_000;
    const BLOCKS: u64 = 16;
    let test = "mixed_1k_and_4k_writes_and_reads_on_the_same_blocks_read_the_last_write";
    let file = common::TempFile::new("partial-mixed");
    let Some(server) = serve(test, &file) else {
        return;
    };
    let seed: u64 = std::env::var("ULLSTACK_SEED")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(0x28);
    let mut nbd =
        common::RawNbd::connect(server.addrs.nbd.expect("nbd"), "default").expect("connect");
    let span = BLOCKS as usize * FS_BLOCK_BYTES;
    let mut model = vec![0u8; span];
    let mut rng = seed | 1;
    let mut next = move || {
        // xorshift64: the seed reproduces the whole sequence.
        rng ^= rng << 13;
        rng ^= rng >> 7;
        rng ^= rng << 17;
        rng
    };
    for op in 0..OPS {
        let r = next();
        let block = (r >> 8) % BLOCKS;
        let part = ((r >> 16) % 4) as usize * KIB;
        let base = block as usize * FS_BLOCK_BYTES;
        let fail = |what: &str| format!("op {op} ({what}), seed {seed} (ULLSTACK_SEED={seed})");
        match r % 8 {
            0..=2 => {
                let at = base + part;
                let data = common::pattern(at as u64, KIB, op as u8);
                assert_eq!(
                    nbd.write(at as u64, &data, r & 64 != 0),
                    0,
                    "{}",
                    fail("w1k")
                );
                model[at..at + KIB].copy_from_slice(&data);
            }
            3 => {
                let data = common::pattern(base as u64, FS_BLOCK_BYTES, op as u8);
                assert_eq!(nbd.write(base as u64, &data, false), 0, "{}", fail("w4k"));
                model[base..base + FS_BLOCK_BYTES].copy_from_slice(&data);
            }
            4 | 5 => {
                let at = base + part;
                let got = nbd.read(at as u64, KIB as u32).expect("read 1 KiB");
                assert!(got == model[at..at + KIB], "{}", fail("r1k"));
            }
            6 => {
                let len = FS_BLOCK_BYTES.min(span - base);
                let got = nbd.read(base as u64, len as u32).expect("read 4 KiB");
                assert!(got == model[base..base + len], "{}", fail("r4k"));
            }
            _ if r & 0x300 == 0 => assert_eq!(nbd.flush(), 0, "{}", fail("flush")),
            _ => {
                // 512 B-aligned, across parts and blocks (NBD requests align to the volume's
                // 512 B blocks).
                let at = base + 512 + part / 2;
                let len = 3072.min(span - at);
                let got = nbd.read(at as u64, len as u32).expect("read 512 B-aligned");
                assert!(got == model[at..at + len], "{}", fail("r512"));
            }
        }
    }
    let paths = write_paths(&server);
    println!("{test}: seed {seed}, {paths:?}");
    assert!(
        paths.direct_block_writes > 0
            && paths.direct_partial_block_writes > 0
            && paths.partial_block_writes_to_page_cache > 0,
        "the mix must exercise each write path: {paths:?}"
    );
    nbd.disconnect();
}
