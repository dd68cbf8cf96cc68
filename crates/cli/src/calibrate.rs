//! `ullstack calibrate TARGET`: measure a device (or the model) the way storage papers do and
//! fit the QoS cost model and latency → token-rate table that `serve` and `sim` load.
//!
//! # What it does
//! 1. **Target** ([`Target::parse`]): `model:NAME` or `model:FILE.toml` (the SSD model, in
//!    virtual time: deterministic), a regular file (created at `--size` if missing), or a block
//!    device. `nbd://…` is recognised and refused for now (attach it with `nbd-client` and give
//!    the `/dev/nbdX`). Writes happen (the mixes write), so a target that holds data is refused
//!    unless `--destructive`: an existing non-empty file, or a block device — one with a
//!    partition table or filesystem signature is refused *by name*; a mounted one always.
//! 2. **Curves** (closed loop: a queue depth of requests kept in flight, uniform random over the
//!    target): p95/p50 read latency against load for read ratios 100, 99, 95, 90, 75 and 50 %
//!    at 4 KiB (a queue-depth sweep each); latency against queue depth (the read-only sweep);
//!    sizes 4–128 KiB at QD 1 and 16 (reads). Real targets go through io_uring with O_DIRECT
//!    where the filesystem allows (buffered otherwise, and the report says so); polled
//!    completion (IORING_SETUP_IOPOLL) is tried once at QD1 and the report says whether the
//!    kernel and device allowed it.
//! 3. **Fit** (`server::calibrate::fit_curves`): at each p95 target (500 µs, 1 ms, 2 ms: the
//!    published table's; also 2, 4 and 8 × the slowest mix's lightest-load p95, so a slow or
//!    loaded device still gets points: [`targets_for`]) read each curve's IOPS; the write weight is the one that makes the
//!    mixes' token rates agree best (the "curves coincide" criterion); the table's rate is the
//!    smallest mix's; the read-only read cost is the mixed rate over the read-only IOPS.
//!    The fit error is the remaining spread of the mixes' token rates at each target.
//! 4. **Output** (`--out`, default `results/calibrate/NAME`): `profile.toml` (`ullstack serve
//!    --profile FILE`, or `[sim] profile = "FILE"`), `calibration.json` (every point), the
//!    figures (CSV, SVG, PNG through the study machinery) and `report.html`.
//!
//! # Why the model's write weight comes out at the floor (the question in issue 14)
//! For `zssd` (and `nvme-tlc` as preset) the old calibrator fitted 0.25 read per write, its
//! smallest step: mixes sustain *more* IOPS the more they write. On `zssd` the cause is the
//! PCIe link: reads move their 4 KiB device → host, whose wire carries at most 879 K 4 KiB
//! transfers/s (`crates/device/src/pcie.rs`' worked example) — the read-only ceiling the old
//! calibrator measured (848–864 K IOPS) — while writes move their data host → device, the
//! link's other, independent direction; SLC Z-NAND with 8-plane programs and program suspend
//! drains the 512 MiB write buffer far faster than the load fills it, so a write costs the
//! bottleneck nothing and each write replaces a read on the saturated direction. Evidence:
//! `calibrate_emulated -- sweep` (checked build, 2026-11-23): p95 read at 800 K IOPS is 52.9 µs
//! at 100 % reads, 28.1 µs at 90 %, 22.2 µs at 50 %, and the same (52.9 / 28.1 / 21.9 µs) with
//! the write buffer cut to 4 MiB — the buffer's size is not the reason. On `nvme-tlc` (no
//! suspend) the reads' tail is set by programs on their die, and the sweep gave p95 677 µs at
//! 1,000 IOPS of 90 % reads but 116 µs at 50 % (same command); a likely cause, not verified: the
//! old probe measures at least 4,000 reads, so a write-heavy mix measures over a longer window,
//! averaging the transient of the prefilled buffer's drain (programs that block reads) over
//! more calm time.
//!
//! # What it leaves out
//! Open-loop (Poisson) load for real targets (closed loop gives the load points), NBD URIs,
//! and interrupt-vs-polled curves beyond the one QD1 check.

use std::fmt::Write as _;
use std::os::unix::fs::{FileTypeExt, OpenOptionsExt};
use std::os::unix::io::AsRawFd;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use anyhow::{anyhow, bail, Context};
use clap::Args;
use engine::LatencyHistogram;
use server::calibrate::{closed_loop_sweep, curve_point, fit_curves, CurvePoint};
use study::plot::{Figure, Series, Stroke};
use study::report::{base64, esc, Table};

/// Measure a device, file or the SSD model and fit the QoS device profile.
///
///   ullstack calibrate model:zssd --quick          the model, in virtual time
///   ullstack calibrate /tmp/cal.img --size 1GiB    a file (created if missing)
///   ullstack calibrate /dev/nvme1n1 --destructive  a block device (its data is overwritten)
///
/// Writes profile.toml (for `ullstack serve --profile FILE` and `[sim] profile = "FILE"`),
/// calibration.json, plots and report.html into --out.
#[derive(Args, Debug)]
#[command(verbatim_doc_comment)]
pub struct CalibrateArgs {
    /// model:NAME | model:FILE.toml | a file | a block device | nbd://host:port/export
    #[arg(value_name = "TARGET")]
    target: String,
    /// Results folder (default results/calibrate/<target name>).
    #[arg(long, value_name = "DIR")]
    out: Option<PathBuf>,
    /// Fewer, shorter points (seconds).
    #[arg(long)]
    quick: bool,
    /// Write the whole target sequentially once before measuring (a created file is always
    /// filled; the model starts preconditioned, as its preset says).
    #[arg(long)]
    precondition: bool,
    /// Measured seconds per point on a real target (default 1, --quick 0.2).
    #[arg(long, value_name = "S")]
    duration: Option<f64>,
    /// Allow writing to a target that holds data (its contents are destroyed).
    #[arg(long)]
    destructive: bool,
    /// Size of a file that does not exist yet (default 1GiB, --quick 256MiB); also caps the
    /// span measured on a larger target.
    #[arg(long, value_name = "SIZE")]
    size: Option<String>,
}

/// p95 read-latency targets of the table (the published table's points and the midpoint).
pub const TARGETS_NS: [u64; 3] = [500_000, 1_000_000, 2_000_000];
/// Read percentages of the load curves.
pub const READ_PCTS: [u8; 6] = [100, 99, 95, 90, 75, 50];
/// Request sizes of the size sweep, bytes.
pub const SIZES_BYTES: [u64; 6] = [4096, 8192, 16384, 32768, 65536, 131072];

/// What is measured.
#[derive(Debug)]
pub enum Target {
    Model {
        name: String,
        device: Box<device::DeviceConfig>,
    },
    File {
        path: PathBuf,
        block_device: bool,
    },
}

/// Partition-table and filesystem signatures: (name, byte offset, magic).
const SIGNATURES: &[(&str, usize, &[u8])] = &[
    ("GPT partition table", 512, b"EFI PART"),
    ("LVM physical volume", 536, b"LVM2 001"),
    ("LUKS", 0, b"LUKS\xba\xbe"),
    ("XFS", 0, b"XFSB"),
    ("ext2/3/4", 1080, &[0x53, 0xef]),
    ("btrfs", 65_600, b"_BHRfS_M"),
    ("swap", 4086, b"SWAPSPACE2"),
    ("NTFS", 3, b"NTFS    "),
    ("FAT", 82, b"FAT32   "),
    ("FAT", 54, b"FAT1"),
    ("ISO 9660", 32_769, b"CD001"),
    ("MBR partition table", 510, &[0x55, 0xaa]),
];

/// The first signature found in `head` (the target's first bytes), by name.
pub fn signature(head: &[u8]) -> Option<&'static str> {
    SIGNATURES.iter().find_map(|&(name, off, magic)| {
        (head.len() >= off + magic.len() && &head[off..off + magic.len()] == magic).then_some(name)
    })
}

impl Target {
    /// Parses TARGET and applies the refusal rules (see the module essay).
    pub fn parse(target: &str, destructive: bool) -> anyhow::Result<Target> {
        if let Some(model) = target.strip_prefix("model:") {
            let device = if model.ends_with(".toml") {
                let text = std::fs::read_to_string(model)
                    .with_context(|| format!("TARGET {target:?}: cannot read {model}"))?;
                device::DeviceConfig::from_toml_str(&text)
                    .with_context(|| format!("TARGET {target:?}"))?
            } else {
                device::DeviceConfig::preset(model).with_context(|| {
                    format!("TARGET {target:?}: expected model:PRESET or model:FILE.toml")
                })?
            };
            return Ok(Target::Model {
                name: device.name.clone(),
                device: Box::new(device),
            });
        }
        if target.starts_with("nbd://") || target.starts_with("nbds://") {
            bail!(
                "TARGET {target:?}: NBD URIs are not measured yet; attach the export with \
                 nbd-client and calibrate the /dev/nbdX it gives"
            );
        }
        if target.is_empty() || target.contains("://") {
            bail!(
                "TARGET {target:?}: expected model:NAME, model:FILE.toml, a file or a block device"
            );
        }
        let path = PathBuf::from(target);
        match std::fs::metadata(&path) {
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
                let parent = path.parent().filter(|p| !p.as_os_str().is_empty());
                if let Some(p) = parent {
                    if !p.is_dir() {
                        bail!(
                            "TARGET {target:?}: {} is not a directory, so the file cannot be created",
                            p.display()
                        );
                    }
                }
                Ok(Target::File {
                    path,
                    block_device: false,
                })
            }
            Err(e) => bail!("TARGET {target:?}: {e}"),
            Ok(m) if m.file_type().is_block_device() => {
                if is_mounted(&path) {
                    bail!(
                        "TARGET {target:?}: the block device is mounted; refusing to write to it"
                    );
                }
                let head = read_head(&path, 70_000)
                    .with_context(|| format!("TARGET {target:?}: reading its first bytes"))?;
                if !destructive {
                    match signature(&head) {
                        Some(name) => bail!(
                            "TARGET {target:?}: the block device holds a {name} signature; \
                             calibration writes to it: give --destructive to overwrite it"
                        ),
                        None => bail!(
                            "TARGET {target:?}: a block device; calibration writes to it: give \
                             --destructive to overwrite its contents"
                        ),
                    }
                }
                Ok(Target::File {
                    path,
                    block_device: true,
                })
            }
            Ok(m) if m.is_file() => {
                if m.len() > 0 && !destructive {
                    bail!(
                        "TARGET {target:?}: the file holds data ({} bytes); calibration writes \
                         to it: give --destructive to overwrite it, or name a file that does not exist",
                        m.len()
                    );
                }
                Ok(Target::File {
                    path,
                    block_device: false,
                })
            }
            Ok(_) => bail!("TARGET {target:?}: not a regular file or block device"),
        }
    }

    fn name(&self) -> String {
        match self {
            Target::Model { name, .. } => format!("model-{name}"),
            Target::File { path, .. } => path
                .file_name()
                .map_or_else(|| "target".into(), |n| n.to_string_lossy().to_string()),
        }
    }
}

fn is_mounted(path: &Path) -> bool {
    let Ok(canon) = std::fs::canonicalize(path) else {
        return false;
    };
    std::fs::read_to_string("/proc/mounts").is_ok_and(|m| {
        m.lines().any(|l| {
            l.split_whitespace()
                .next()
                .and_then(|d| std::fs::canonicalize(d).ok())
                .is_some_and(|d| d == canon)
        })
    })
}

fn read_head(path: &Path, bytes: usize) -> std::io::Result<Vec<u8>> {
    use std::io::Read;
    let mut f = std::fs::File::open(path)?;
    let mut buf = vec![0u8; bytes];
    let mut n = 0;
    while n < bytes {
        match f.read(&mut buf[n..])? {
            0 => break,
            k => n += k,
        }
    }
    buf.truncate(n);
    Ok(buf)
}

/// Takes curve points: closed-loop loads of each queue depth in turn.
trait Prober {
    fn sweep(
        &mut self,
        read_pct: u8,
        size_bytes: u64,
        qds: &[u32],
    ) -> anyhow::Result<Vec<CurvePoint>>;
}

struct ModelProber<'a> {
    device: &'a device::DeviceConfig,
    settle_ns: u64,
    measure_ns: u64,
}

impl Prober for ModelProber<'_> {
    fn sweep(
        &mut self,
        read_pct: u8,
        size_bytes: u64,
        qds: &[u32],
    ) -> anyhow::Result<Vec<CurvePoint>> {
        closed_loop_sweep(
            self.device,
            read_pct,
            size_bytes,
            qds,
            self.settle_ns,
            self.measure_ns,
            1,
        )
        .map_err(|e| anyhow!("{e}"))
    }
}

/// An io_uring closed loop over a file or block device.
struct UringProber {
    file: std::fs::File,
    span_bytes: u64,
    direct: bool,
    measure: Duration,
    rng: engine::SimRng,
}

/// A 4 KiB-aligned buffer for O_DIRECT.
struct AlignedBuf {
    ptr: *mut u8,
    layout: std::alloc::Layout,
}

impl AlignedBuf {
    fn new(bytes: usize) -> AlignedBuf {
        let layout = std::alloc::Layout::from_size_align(bytes.max(4096), 4096).expect("layout");
        // SAFETY: the layout has a non-zero size; the pointer is checked and freed in Drop.
        let ptr = unsafe { std::alloc::alloc_zeroed(layout) };
        assert!(!ptr.is_null(), "out of memory for a {bytes}-byte buffer");
        AlignedBuf { ptr, layout }
    }
}

impl Drop for AlignedBuf {
    fn drop(&mut self) {
        // SAFETY: allocated in `new` with this layout, freed once.
        unsafe { std::alloc::dealloc(self.ptr, self.layout) }
    }
}

impl UringProber {
    fn open(
        path: &Path,
        size_bytes: u64,
        block_device: bool,
        fill: bool,
        measure: Duration,
    ) -> anyhow::Result<UringProber> {
        let open = |direct: bool| {
            let mut o = std::fs::OpenOptions::new();
            o.read(true).write(true).create(!block_device);
            if direct {
                o.custom_flags(libc::O_DIRECT);
            }
            o.open(path)
        };
        let (file, direct) = match open(true) {
            Ok(f) => (f, true),
            Err(e) if e.raw_os_error() == Some(libc::EINVAL) => (
                open(false).with_context(|| format!("opening {}", path.display()))?,
                false,
            ),
            Err(e) => return Err(e).with_context(|| format!("opening {}", path.display())),
        };
        let len = if block_device {
            let mut f = &file;
            std::io::Seek::seek(&mut f, std::io::SeekFrom::End(0))?
        } else {
            file.metadata()?.len()
        };
        let mut span_bytes = if block_device {
            len.min(size_bytes)
        } else {
            size_bytes
        };
        span_bytes -= span_bytes % (128 << 10);
        if span_bytes == 0 {
            bail!(
                "{}: {len} bytes is too small to calibrate (at least 128 KiB)",
                path.display()
            );
        }
        if !block_device && len < span_bytes {
            file.set_len(span_bytes)
                .with_context(|| format!("sizing {} to {span_bytes} bytes", path.display()))?;
        }
        let p = UringProber {
            file,
            span_bytes,
            direct,
            measure,
            rng: engine::stream(1, "calibrate-real"),
        };
        if fill || (!block_device && len < span_bytes) {
            p.fill()?;
        }
        Ok(p)
    }

    /// Writes the whole span once, 1 MiB at a time (so reads hit allocated blocks).
    fn fill(&self) -> anyhow::Result<()> {
        use std::os::unix::fs::FileExt;
        let chunk = 1 << 20;
        let buf = AlignedBuf::new(chunk);
        // SAFETY: `buf` owns `chunk` initialised (zeroed) bytes for this scope.
        let data = unsafe { std::slice::from_raw_parts_mut(buf.ptr, chunk) };
        for (i, b) in data.iter_mut().enumerate() {
            *b = (i as u8) ^ 0x5a;
        }
        let mut off = 0;
        while off < self.span_bytes {
            let n = chunk.min((self.span_bytes - off) as usize);
            self.file
                .write_all_at(&data[..n], off)
                .with_context(|| format!("filling the target at byte {off}"))?;
            off += n as u64;
        }
        self.file.sync_data().context("fdatasync after filling")?;
        Ok(())
    }

    fn run(
        &mut self,
        read_pct: u8,
        size_bytes: u64,
        qd: u32,
        polled: bool,
    ) -> anyhow::Result<CurvePoint> {
        let mut builder = io_uring::IoUring::builder();
        if polled {
            builder.setup_iopoll();
        }
        let mut ring = builder
            .build(qd.next_power_of_two().max(4))
            .context("io_uring setup")?;
        let bufs: Vec<AlignedBuf> = (0..qd)
            .map(|_| AlignedBuf::new(size_bytes as usize))
            .collect();
        let slots = self.span_bytes / size_bytes;
        let fd = io_uring::types::Fd(self.file.as_raw_fd());
        let mut meta: Vec<(Instant, bool)> = vec![(Instant::now(), true); qd as usize];
        let (mut reads, mut writes) = (LatencyHistogram::new(), LatencyHistogram::new());
        let settle = self.measure / 5;
        let start = Instant::now();
        let measure_from = start + settle;
        let end = measure_from + self.measure;
        let push = |ring: &mut io_uring::IoUring,
                    rng: &mut engine::SimRng,
                    i: u32|
         -> anyhow::Result<(Instant, bool)> {
            let read = engine::rng::chance(rng, u64::from(read_pct), 100);
            let off = engine::rng::below(rng, slots) * size_bytes;
            let ptr = bufs[i as usize].ptr;
            let e = if read {
                io_uring::opcode::Read::new(fd, ptr, size_bytes as u32)
                    .offset(off)
                    .build()
            } else {
                io_uring::opcode::Write::new(fd, ptr, size_bytes as u32)
                    .offset(off)
                    .build()
            };
            // SAFETY: the buffer lives until the ring is dropped at the end of `run`, after
            // every submitted entry has completed (the loop waits for all of them).
            unsafe { ring.submission().push(&e.user_data(u64::from(i))) }
                .map_err(|_| anyhow!("io_uring submission queue full"))?;
            Ok((Instant::now(), read))
        };
        for i in 0..qd {
            meta[i as usize] = push(&mut ring, &mut self.rng, i)?;
        }
        let mut live = qd;
        while live > 0 {
            ring.submit_and_wait(1).context("io_uring_enter")?;
            let done: Vec<(u64, i32)> = ring
                .completion()
                .map(|c| (c.user_data(), c.result()))
                .collect();
            let now = Instant::now();
            for (ud, res) in done {
                let i = ud as u32;
                if res < 0 {
                    let err = std::io::Error::from_raw_os_error(-res);
                    bail!("I/O failed: {err}");
                }
                let (at, read) = meta[i as usize];
                if at >= measure_from && at < end {
                    let h = if read { &mut reads } else { &mut writes };
                    h.record(now.duration_since(at).as_nanos() as u64);
                }
                if now < end {
                    meta[i as usize] = push(&mut ring, &mut self.rng, i)?;
                } else {
                    live -= 1;
                }
            }
        }
        Ok(curve_point(
            read_pct,
            size_bytes,
            qd,
            self.measure.as_nanos() as u64,
            &reads,
            &writes,
        ))
    }
}

impl Prober for UringProber {
    fn sweep(
        &mut self,
        read_pct: u8,
        size_bytes: u64,
        qds: &[u32],
    ) -> anyhow::Result<Vec<CurvePoint>> {
        qds.iter()
            .map(|&qd| self.run(read_pct, size_bytes, qd, false))
            .collect()
    }
}

/// Everything measured, as written to `calibration.json`.
#[derive(serde::Serialize)]
struct Measured {
    target: String,
    method: String,
    /// Per read percentage, the queue-depth sweep at 4 KiB.
    curves: Vec<(u8, Vec<CurvePoint>)>,
    sizes: Vec<CurvePoint>,
    polled: String,
    write_cost_mtok: u64,
    read_only_read_cost_mtok: u64,
    targets_ns: Vec<u64>,
    tokens_per_sec: Vec<u64>,
    spread_pct: Vec<f64>,
    write_weight_at_floor: bool,
}

pub fn run(args: CalibrateArgs) -> anyhow::Result<()> {
    let target = Target::parse(&args.target, args.destructive)?;
    let out = args
        .out
        .clone()
        .unwrap_or_else(|| PathBuf::from("results/calibrate").join(target.name()));
    let qds: &[u32] = if args.quick {
        &[1, 4, 16, 64]
    } else {
        &[1, 2, 4, 8, 16, 32, 64, 128]
    };
    let size_bytes = match &args.size {
        Some(s) => {
            server::config::ByteSize::parse(s)
                .map_err(|e| anyhow!("--size {s:?}: {e}"))?
                .0
        }
        None if args.quick => 256 << 20,
        None => 1 << 30,
    };
    let started = Instant::now();
    let (mut prober, method, polled): (Box<dyn Prober>, String, String) = match &target {
        Target::Model { name, device } => {
            let (settle_ns, measure_ns) = if args.quick {
                (5_000_000, 20_000_000)
            } else {
                (20_000_000, 200_000_000)
            };
            (
                Box::new(ModelProber { device, settle_ns, measure_ns }),
                format!(
                    "the SSD model `{name}` in virtual time (closed loop, {} ms settle + {} ms measured per point, seed 1, deterministic)",
                    settle_ns / 1_000_000,
                    measure_ns / 1_000_000
                ),
                "model: completion mode does not apply (the model's latency is device time)".into(),
            )
        }
        Target::File { path, block_device } => {
            let secs = args.duration.unwrap_or(if args.quick { 0.2 } else { 1.0 });
            if !(0.01..=600.0).contains(&secs) {
                bail!("--duration {secs}: expected 0.01..=600 seconds per point");
            }
            let mut p = UringProber::open(
                path,
                size_bytes,
                *block_device,
                args.precondition,
                Duration::from_secs_f64(secs),
            )?;
            let polled = match p.run(100, 4096, 1, true) {
                Ok(pt) => format!(
                    "polled (IORING_SETUP_IOPOLL) works here: QD1 4 KiB read p50 {} ns",
                    pt.read_p50_ns
                ),
                Err(e) => format!("polled completion unavailable on this target ({e:#}); every curve is interrupt-driven"),
            };
            let method = format!(
                "io_uring on {} ({}), {secs} s measured per point after {:.2} s settle, span {} bytes",
                path.display(),
                if p.direct { "O_DIRECT" } else { "buffered: the filesystem refused O_DIRECT, so the page cache is measured too" },
                secs / 5.0,
                p.span_bytes
            );
            (Box::new(p), method, polled)
        }
    };
    let mut curves = Vec::new();
    for &pct in &READ_PCTS {
        curves.push((pct, prober.sweep(pct, 4096, qds)?));
    }
    let mut sizes = Vec::new();
    for &s in &SIZES_BYTES {
        sizes.extend(prober.sweep(100, s, &[1, 16])?);
    }
    let name = format!("calibrated-{}", target.name());
    let targets = targets_for(&curves);
    let fit = fit_curves(&name, &curves, &targets)
        .map_err(|e| anyhow!("fitting {}: {e}", args.target))?;
    let profile = &fit.profile;
    std::fs::create_dir_all(&out).with_context(|| format!("creating {}", out.display()))?;
    let profile_text = format!(
        "# ullstack calibrate {} — {method}\n{}",
        args.target,
        profile.to_toml_string()
    );
    std::fs::write(out.join("profile.toml"), &profile_text).context("writing profile.toml")?;
    let measured = Measured {
        target: args.target.clone(),
        method: method.clone(),
        curves: curves.clone(),
        sizes: sizes.clone(),
        polled: polled.clone(),
        write_cost_mtok: profile.write_cost_mtok,
        read_only_read_cost_mtok: profile.read_only_read_cost_mtok,
        targets_ns: fit.targets_ns.clone(),
        tokens_per_sec: profile.points.iter().map(|p| p.tokens_per_sec).collect(),
        spread_pct: fit.spread_pct.clone(),
        write_weight_at_floor: profile.write_cost_mtok == server::calibrate::WRITE_COST_FLOOR_MTOK,
    };
    std::fs::write(
        out.join("calibration.json"),
        serde_json::to_string_pretty(&measured)?,
    )
    .context("writing calibration.json")?;
    let figures = figures(&curves, &sizes, &fit);
    let mut pngs = Vec::new();
    for f in &figures {
        pngs.push(f.write(&out).map_err(|e| anyhow!(e))?);
    }
    let table = summary_table(&fit);
    std::fs::write(
        out.join("report.html"),
        report_html(
            &args.target,
            &method,
            &polled,
            &table,
            &figures,
            &pngs,
            &profile_text,
        ),
    )
    .context("writing report.html")?;
    print!("{}", table.to_text());
    println!("{polled}");
    if measured.write_weight_at_floor {
        println!("note: the write weight is at its floor (mixes sustained more IOPS the more they wrote)");
    }
    println!(
        "calibrated in {:.1} s; profile: {}/profile.toml (ullstack serve --profile FILE); report: {}/report.html",
        started.elapsed().as_secs_f64(),
        out.display(),
        out.display()
    );
    Ok(())
}

/// The table's targets: the published 500 µs, 1 ms and 2 ms, plus 2, 4 and 8 times the
/// slowest mix's lightest-load p95 (rounded up to µs), so a device whose tails sit above the
/// published targets still gets a table (a target some mix misses even at its lightest load
/// gets no point).
pub fn targets_for(curves: &[(u8, Vec<CurvePoint>)]) -> Vec<u64> {
    let slowest = curves
        .iter()
        .map(|(_, c)| c.iter().map(|p| p.read_p95_ns).min().unwrap_or(0))
        .max()
        .unwrap_or(0);
    let mut t: Vec<u64> = TARGETS_NS.to_vec();
    for m in [2, 4, 8] {
        t.push((slowest * m).div_ceil(1000).max(1) * 1000);
    }
    t.sort_unstable();
    t.dedup();
    t
}

fn summary_table(fit: &server::calibrate::CurveFit) -> Table {
    let p = &fit.profile;
    let mut t = Table {
        header: [
            "p95 target",
            "tokens/s",
            "read-only tokens/s",
            "fit spread %",
        ]
        .map(String::from)
        .to_vec(),
        rows: Vec::new(),
    };
    for (k, pt) in p.points.iter().enumerate() {
        t.rows.push(vec![
            format!("{} µs", pt.p95_read_latency_ns / 1000),
            pt.tokens_per_sec.to_string(),
            pt.read_only_tokens_per_sec.to_string(),
            format!("{:.1}", fit.spread_pct.get(k).copied().unwrap_or(0.0)),
        ]);
    }
    t.rows.push(vec![
        "write weight".into(),
        format!("{:.2} reads", p.write_cost_mtok as f64 / 1000.0),
        format!(
            "read-only read {:.3}",
            p.read_only_read_cost_mtok as f64 / 1000.0
        ),
        String::new(),
    ]);
    t
}

fn figures(
    curves: &[(u8, Vec<CurvePoint>)],
    sizes: &[CurvePoint],
    fit: &server::calibrate::CurveFit,
) -> Vec<Figure> {
    let w = fit.profile.write_cost_mtok;
    let ro = fit.profile.read_only_read_cost_mtok;
    let mut raw = Vec::new();
    let mut weighted = Vec::new();
    for (i, (pct, c)) in curves.iter().enumerate() {
        raw.push(Series {
            name: format!("{pct} % reads"),
            points: c
                .iter()
                .map(|p| (p.iops / 1000.0, p.read_p95_ns as f64 / 1000.0))
                .collect(),
            stroke: Stroke::Solid,
            colour: i,
        });
        weighted.push(Series {
            name: format!("{pct} % reads"),
            points: c
                .iter()
                .map(|p| {
                    let unit_read = if *pct == 100 { ro } else { 1000 };
                    let tok = p.iops
                        * (f64::from(*pct) * unit_read as f64 + f64::from(100 - pct) * w as f64)
                        / 100.0
                        / 1000.0;
                    (tok / 1000.0, p.read_p95_ns as f64 / 1000.0)
                })
                .collect(),
            stroke: Stroke::Solid,
            colour: i,
        });
    }
    weighted.push(Series {
        name: "fitted table".into(),
        points: fit
            .profile
            .points
            .iter()
            .map(|p| {
                (
                    p.tokens_per_sec as f64 / 1000.0,
                    p.p95_read_latency_ns as f64 / 1000.0,
                )
            })
            .collect(),
        stroke: Stroke::Dashed,
        colour: 5,
    });
    let ro_curve = curves
        .iter()
        .find(|(p, _)| *p == 100)
        .map(|(_, c)| c.clone())
        .unwrap_or_default();
    let qd_series = vec![
        Series {
            name: "p50".into(),
            points: ro_curve
                .iter()
                .map(|p| (f64::from(p.queue_depth), p.read_p50_ns as f64 / 1000.0))
                .collect(),
            stroke: Stroke::Solid,
            colour: 0,
        },
        Series {
            name: "p95".into(),
            points: ro_curve
                .iter()
                .map(|p| (f64::from(p.queue_depth), p.read_p95_ns as f64 / 1000.0))
                .collect(),
            stroke: Stroke::Solid,
            colour: 1,
        },
    ];
    let size_series: Vec<Series> = [1u32, 16]
        .iter()
        .enumerate()
        .map(|(i, &qd)| Series {
            name: format!("QD{qd} mean"),
            points: sizes
                .iter()
                .filter(|p| p.queue_depth == qd)
                .map(|p| (p.size_bytes as f64 / 1024.0, p.read_mean_ns as f64 / 1000.0))
                .collect(),
            stroke: Stroke::Solid,
            colour: i,
        })
        .collect();
    let fig = |stem: &str,
               title: &str,
               caption: String,
               x: &str,
               y: &str,
               x_log: bool,
               series: Vec<Series>| Figure {
        stem: stem.into(),
        title: title.into(),
        caption,
        x_label: x.into(),
        y_label: y.into(),
        x_log,
        y_log: true,
        x_categories: Vec::new(),
        series,
    };
    vec![
        fig("load_latency", "p95 read latency against load, per read ratio", "4 KiB, closed loop (a queue-depth sweep per mix).".into(), "K IOPS", "p95 read latency (µs)", false, raw),
        fig(
            "weighted_load",
            "p95 read latency against weighted load (fitted model)",
            format!(
                "Load in K tokens/s with the fitted write weight {:.2} reads (read-only reads {:.3}); the curves coincide where the model fits; dashed: the fitted table. Fit spread per target: {:?} %.",
                w as f64 / 1000.0,
                ro as f64 / 1000.0,
                fit.spread_pct.iter().map(|s| (s * 10.0).round() / 10.0).collect::<Vec<_>>()
            ),
            "K tokens/s",
            "p95 read latency (µs)",
            false,
            weighted,
        ),
        fig("latency_vs_qd", "Read latency against queue depth", "4 KiB random reads.".into(), "queue depth", "latency (µs)", true, qd_series),
        fig("latency_vs_size", "Read latency against request size", "Random reads at QD1 and QD16.".into(), "KiB", "mean latency (µs)", true, size_series),
    ]
}

fn report_html(
    target: &str,
    method: &str,
    polled: &str,
    table: &Table,
    figures: &[Figure],
    pngs: &[Vec<u8>],
    profile: &str,
) -> String {
    let mut out = String::new();
    write!(
        out,
        "<!DOCTYPE html>\n<html lang=\"en\">\n<head>\n<meta charset=\"utf-8\">\n<title>calibrate</title>\n\
         <style>body {{ font-family: sans-serif; max-width: 1100px; margin: 2em auto; }} table {{ border-collapse: collapse; }} \
         td, th {{ border: 1px solid #ccc; padding: 2px 6px; }} pre {{ background: #f5f5f5; padding: 6px; }}</style>\n</head>\n<body>\n\
         <h1>ullstack calibrate {t}</h1>\n<p>{m}</p>\n<p>{p}</p>\n<h2>Fitted profile</h2>\n{tab}\n<pre>{prof}</pre>\n<h2>Figures</h2>\n",
        t = esc(target),
        m = esc(method),
        p = esc(polled),
        tab = table.to_html(),
        prof = esc(profile),
    )
    .expect("string");
    for (f, png) in figures.iter().zip(pngs) {
        writeln!(
            out,
            "<figure><img alt=\"{t}\" width=\"800\" src=\"data:image/png;base64,{d}\"><figcaption><b>{t}.</b> {c} Data: <code>{s}.csv</code>.</figcaption></figure>",
            t = esc(&f.title),
            d = base64(png),
            c = esc(&f.caption),
            s = esc(&f.stem)
        )
        .expect("string");
    }
    out.push_str("</body>\n</html>\n");
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn signatures_are_named() {
        let mut head = vec![0u8; 70_000];
        assert_eq!(signature(&head), None);
        head[510] = 0x55;
        head[511] = 0xaa;
        assert_eq!(signature(&head), Some("MBR partition table"));
        head[512..520].copy_from_slice(b"EFI PART");
        assert_eq!(signature(&head), Some("GPT partition table"));
        let mut ext = vec![0u8; 4096];
        ext[1080] = 0x53;
        ext[1081] = 0xef;
        assert_eq!(signature(&ext), Some("ext2/3/4"));
    }
}
