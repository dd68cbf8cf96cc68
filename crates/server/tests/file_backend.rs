//! The file backend's paths that a tmpfs test directory never takes: `O_DIRECT` for real (proved
//! by the page cache: a direct write leaves its pages uncached, a buffered one caches them), and
//! reads that meet the end of a file that shrank behind the server's back (short read, then EOF
//! read as zeros).
//!
//! `O_DIRECT` needs a filesystem that supports it (tmpfs refuses it): the test tries the
//! directories in [`direct_io_candidates`] and skips, saying so, when none does (under
//! `ULLSTACK_REQUIRE_TOOLS=1`, as in CI, it fails instead).

use std::os::fd::AsRawFd;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use engine::IoClass;
use server::backend::file::FileVolume;
use server::backend::{Backend, Completion, Fua, StorageOp, Submitted, Volume};
use server::buf::{BufPool, IoBuf};
use server::config::DirectIo;

const PAGE_BYTES: usize = 4096;

/// Directories to try for a file that accepts `O_DIRECT`, in order: `ULLSTACK_DIRECT_IO_DIR`
/// if set, cargo's per-target scratch dir (inside `target/`, on the build disk), the system temp
/// dir, `/var/tmp`.
fn direct_io_candidates() -> Vec<PathBuf> {
    let mut dirs = Vec::new();
    if let Some(d) = std::env::var_os("ULLSTACK_DIRECT_IO_DIR") {
        dirs.push(PathBuf::from(d));
    }
    dirs.push(PathBuf::from(env!("CARGO_TARGET_TMPDIR")));
    dirs.push(std::env::temp_dir());
    dirs.push(PathBuf::from("/var/tmp"));
    dirs
}

/// A file volume opened with `direct = "on"` in the first candidate directory that allows it.
fn direct_volume(tag: &str, size_bytes: u64) -> Option<(Arc<FileVolume>, PathBuf)> {
    for dir in direct_io_candidates() {
        let path = dir.join(format!("ullstack-direct-{tag}-{}.img", std::process::id()));
        match FileVolume::open("direct", &path, Some(size_bytes), DirectIo::On, 512) {
            Ok(v) => return Some((Arc::new(v), path)),
            Err(e) => {
                println!("{}: no O_DIRECT here ({e})", dir.display());
                let _ = std::fs::remove_file(&path);
            }
        }
    }
    None
}

/// Runs one operation to completion, as a worker's steps would (commit what is queued, including
/// the rest of a short transfer, then poll), waiting bounded for its completion.
fn run(backend: &mut dyn Backend, tag: u64, op: StorageOp, buf: IoBuf) -> Completion {
    match backend.submit(tag, op, IoClass::Throughput, buf) {
        Submitted::Done(c) => c,
        Submitted::Pending => {
            let mut out = Vec::new();
            let waited = testkit::wait_until(Duration::from_secs(10), || {
                backend.commit();
                backend.poll(0, &mut out);
                !out.is_empty()
            });
            assert!(
                waited.is_ok(),
                "operation {tag} did not complete within 10 s"
            );
            out.pop().expect("one completion")
        }
    }
}

/// How many of the pages of `[offset, offset + len)` of `path` are in the page cache (mincore).
fn resident_pages(path: &Path, offset: usize, len: usize) -> usize {
    let file = std::fs::File::open(path).expect("open for mincore");
    // SAFETY: a shared read-only mapping of an open file of at least offset + len bytes; it is
    // only passed to mincore (never dereferenced) and unmapped before returning.
    let map = unsafe {
        libc::mmap(
            std::ptr::null_mut(),
            len,
            libc::PROT_READ,
            libc::MAP_SHARED,
            file.as_raw_fd(),
            offset as libc::off_t,
        )
    };
    assert_ne!(map, libc::MAP_FAILED, "mmap {}", path.display());
    let mut vec = vec![0u8; len.div_ceil(PAGE_BYTES)];
    // SAFETY: `map` is a live mapping of `len` bytes and `vec` has one byte per page of it.
    let rc = unsafe { libc::mincore(map, len, vec.as_mut_ptr()) };
    // SAFETY: unmaps exactly the mapping made above.
    unsafe { libc::munmap(map, len) };
    assert_eq!(rc, 0, "mincore: {}", std::io::Error::last_os_error());
    vec.iter().filter(|&&b| b & 1 == 1).count()
}

fn pattern(len: usize, seed: u8) -> Vec<u8> {
    (0..len)
        .map(|i| (i as u8).wrapping_mul(31) ^ seed)
        .collect()
}

fn write(be: &mut dyn Backend, pool: &mut BufPool, offset: u64, data: &[u8]) {
    let mut buf = pool.take(data.len());
    buf.as_mut_slice().copy_from_slice(data);
    let c = run(
        be,
        1,
        StorageOp::Write {
            offset_bytes: offset,
            fua: Fua::No,
        },
        buf,
    );
    assert_eq!(c.result, Ok(()), "write at {offset}");
}

fn read(be: &mut dyn Backend, pool: &mut BufPool, offset: u64, len: usize) -> Vec<u8> {
    let c = run(
        be,
        2,
        StorageOp::Read {
            offset_bytes: offset,
        },
        pool.take(len),
    );
    assert_eq!(c.result, Ok(()), "read at {offset}");
    c.buf.as_slice().to_vec()
}

#[test]
fn aligned_io_goes_through_o_direct_and_bypasses_the_page_cache() {
    let test = "aligned_io_goes_through_o_direct_and_bypasses_the_page_cache";
    let Some((vol, path)) = direct_volume("cache", 4 << 20) else {
        testkit::skip(test, "no candidate directory supports O_DIRECT");
        return;
    };
    let align = vol
        .direct_align_bytes()
        .expect("direct = \"on\" opened O_DIRECT");
    assert!(
        align == 512 || align == 4096,
        "direct-I/O alignment {align}"
    );
    let mut be = vol.clone().attach().expect("attach");
    let mut pool = BufPool::new();

    // A 64 KiB aligned write and read back: direct, so none of its pages enter the cache.
    let direct_at = 1 << 20;
    let data = pattern(64 << 10, 7);
    write(&mut *be, &mut pool, direct_at, &data);
    assert_eq!(read(&mut *be, &mut pool, direct_at, data.len()), data);
    assert_eq!(
        resident_pages(&path, direct_at as usize, data.len()),
        0,
        "an aligned write and read went through the page cache: not O_DIRECT"
    );

    // A write not aligned to the direct-I/O alignment takes the buffered descriptor: its pages
    // are cached. (Shows the probe above can see cached pages.)
    let buffered_at = 2 << 20;
    let odd = pattern(3 * PAGE_BYTES, 9);
    write(&mut *be, &mut pool, buffered_at + 100, &odd);
    assert!(
        resident_pages(&path, buffered_at as usize, 4 * PAGE_BYTES) > 0,
        "a buffered write left no page in the cache: the residency probe is blind"
    );
    assert_eq!(read(&mut *be, &mut pool, buffered_at + 100, odd.len()), odd);

    // Both paths see each other's data (Linux keeps the descriptors coherent).
    let c = run(&mut *be, 3, StorageOp::Flush, IoBuf::empty());
    assert_eq!(c.result, Ok(()));
    let on_disk = std::fs::read(&path).expect("read the file");
    assert_eq!(&on_disk[direct_at as usize..][..data.len()], &data[..]);
    assert_eq!(
        &on_disk[buffered_at as usize + 100..][..odd.len()],
        &odd[..]
    );
    assert_eq!(be.in_flight(), 0);
    drop(be);
    let _ = std::fs::remove_file(&path);
}

#[test]
fn a_read_across_the_end_of_a_shrunken_file_returns_data_then_zeros() {
    // Buffered and (where the filesystem allows) direct: both continue after a short read and
    // read past EOF as zeros.
    for direct in [DirectIo::Off, DirectIo::Auto] {
        let path = std::env::temp_dir().join(format!(
            "ullstack-eof-{direct:?}-{}.img",
            std::process::id()
        ));
        let vol = Arc::new(
            FileVolume::open("eof", &path, Some(1 << 20), direct, 512).expect("open volume"),
        );
        let mut be = vol.clone().attach().expect("attach");
        let mut pool = BufPool::new();
        let data = pattern(64 << 10, 3);
        let base = (1 << 20) - (64 << 10);
        write(&mut *be, &mut pool, base, &data);
        // The file shrinks behind the server's back to 4 KiB past `base`.
        let keep = PAGE_BYTES;
        std::fs::OpenOptions::new()
            .write(true)
            .open(&path)
            .and_then(|f| f.set_len(base + keep as u64))
            .expect("truncate");
        // 16 KiB from `base`: one page of data (a short read), then EOF: zeros.
        let got = read(&mut *be, &mut pool, base, 4 * PAGE_BYTES);
        assert_eq!(&got[..keep], &data[..keep], "{direct:?}: data before EOF");
        assert!(
            got[keep..].iter().all(|&b| b == 0),
            "{direct:?}: bytes past EOF read as zeros"
        );
        // Entirely past EOF, still inside the volume: all zeros.
        let got = read(&mut *be, &mut pool, base + (32 << 10), 8 << 10);
        assert!(got.iter().all(|&b| b == 0), "{direct:?}: past EOF");
        assert_eq!(be.in_flight(), 0);
        drop(be);
        let _ = std::fs::remove_file(&path);
    }
}
