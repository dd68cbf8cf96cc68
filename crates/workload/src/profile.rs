//! Built-in application profiles and the generator that turns a profile into I/Os.
//!
//! The full-system studies do not run fio jobs; they run *applications*: offline jobs (graph
//! analytics, compression, word count) that issue I/O at a rate per instruction, and online
//! services (apache, an image server) that issue I/O per request. Each is summarised by the
//! profile measured on the published server (presets.md): read ratio, mean I/O size, I/Os per
//! million instructions and sequential ratio (fraction of I/Os that continue the previous one).
//!
//! ## Fixed point
//! Ratios are parts per million (`read_ratio_ppm = 997_000` for 0.997) and the I/O rate is I/Os
//! per *billion* instructions (`ios_per_g_instr = 25` for 0.025 per million), so every published
//! number is an exact integer and runs do not depend on float rounding. Sizes are bytes; the
//! table's "KB" is read as KiB (1024 B), the convention of the block-layer traces they come from.
//!
//! ## Worked example
//! `imageserver`: 0.990 reads, 12 KB, 5.761 I/Os per M instructions, 0.86 sequential →
//! `read_ratio_ppm = 990_000`, `io_size_bytes = 12 288`, `ios_per_g_instr = 5_761`
//! (one I/O every 1e9 / 5761 ≈ 173 580 instructions, 86.8 µs on a 2 GHz core),
//! `seq_ratio_ppm = 860_000`.
//!
//! ## How the online services are run: at their knee
//! presets.md states that the online services run at 400 requests/s *because that is the knee
//! of their load-latency curve*; it gives their I/O per instruction, not their work per request
//! or their worker pool. Three numbers per service complete the profile, and the host turns
//! them into a listener thread, a worker pool and requests (`host`'s `app` essay):
//!
//! * **Instructions between I/Os** ([`Profile::instructions_per_io`]): the profile's own rate
//!   (10^9 / `ios_per_g_instr`), except `apache`, whose published device-I/O share pins it. One
//!   figure is published: `apache`'s device I/O is at least 19 % of its response time on an NVMe
//!   SSD. At the profile's rate (0.666 I/Os per M instructions) an `arm8` core (2 G
//!   instructions/s) computes 750 µs per ≈ 70 µs of `nvme-tlc` I/O (0.666 × 105 µs): 8.5 %.
//!   The published server retires instructions faster than `arm8`, so apache's I/Os are denser
//!   per `arm8` instruction: one per [`APACHE_INSTRUCTIONS_PER_IO`] = 750 750 instructions
//!   (375 µs of compute per 105 µs read) gives a request's work a 19–22 % I/O share at low load
//!   (`sim`'s test `apache_s_io_share_of_its_response_time_is_at_least_19_pct`).
//! * **Instructions per request** ([`Profile::instructions_per_request`]): the request's
//!   compute, and with the I/O density its I/O count (`instructions_per_request /
//!   instructions_per_io`: the request's I/Os come from the profile's I/O rate, so a heavier
//!   request reads more, as a bigger page or image does). Nothing publishes it: it is
//!   **calibrated to the knee at 400 requests/s (presets.md)**, per service, on the papers'
//!   host (`arm8`, `zssd`, the vanilla stack, the service alone), with the knee defined as in
//!   `study`'s `flashshare::knee` essay (the rate at which the mean response reaches twice its
//!   low-load mean) and checked by its test `each_online_profile_s_knee_is_near_400_per_sec`.
//! * **Worker threads** ([`Profile::worker_threads`]): [`ONLINE_WORKER_THREADS`] = 1, the pool
//!   that brings the knee at 400/s closest to the published unloaded figures: with `c` workers a
//!   knee at 400/s needs a request of about `c` × 1.5 ms (capacity `c / service`), so the
//!   paper's apache-alone p99 of 0.8 ms (`motivation.apache_alone.p99`) is nearest with one;
//!   four workers would need ≈ 7.5 ms requests (measured: 15 M instructions put apache's knee
//!   between 400 and 500/s with four). This is a choice, not a fit: no value of it reaches
//!   0.8 ms at the knee (one worker gives ≈ 2 ms mean, ≈ 7 ms p99 at 400/s alone), and the
//!   paper publishes no pool size.
//!
//! Worked example, `apache`: 2.6 M instructions per request = 1.3 ms of compute on `arm8`, with
//! 2.6 M / 750 750 = 3.46 reads of 24 KiB (≈ 26 µs each on `zssd`): ≈ 1.4 ms of work, so one
//! worker saturates near 700 requests/s and the mean response doubles near 450/s (Poisson
//! arrivals, M/G/1: the wait is ρ(1 + cv²)/(2(1 − ρ)) service times, one service time at
//! ρ ≈ 0.65).
//!
//! The write-back study workloads keep the host's defaults (`app.instructions_per_request`,
//! four workers, the profile's I/O rate): presets.md states the knee for the table's online
//! services only. A process's own `threads` and `instructions_per_request` keys override
//! either.
//!
//! ## Offline jobs' threads
//! presets.md gives no thread counts, but it singles out one job: "`bfs` is compute-heavy with
//! many worker threads (it starves other threads of CPU)". The others leave the online service
//! the CPU it needs, and each job's [`OfflineThreads`] says how, from what the program is:
//! * the GNU tools (`gzip`, `ungzip`, `wc-gnu`, `gp-gnu`: gzip, wc and grep) are
//!   single-threaded programs: [`OfflineThreads::Single`];
//! * the analytics frameworks (`pagerank`, `kmeans`, `index`, `wc`, `gp`) run a worker per core
//!   but one, the core that framework deployments leave to the operating system and the
//!   services beside them (Hadoop and Spark sizing guides reserve it):
//!   [`OfflineThreads::AllButOneCore`];
//! * `bfs` runs two threads per core, the "many worker threads" that starve the others:
//!   [`OfflineThreads::PerCore`]`(2)`.
//!
//! Why it matters: under CFS an online worker that needs more than its fair share of a core
//! that a CPU-bound thread also runs on gets half the core and falls behind. Every analytics job
//! at one thread per core would do that to a service run at its knee (`apache` beside
//! `pagerank` at 400 requests/s: a 31x mean in 3 s runs); with the core they leave, the
//! co-runner slows it through the storage stack and the shared cores' interrupts instead, as
//! the FlashShare paper's motivation describes. A process's own `threads` key overrides it.
//!
//! ## Write-back study workloads: derived, not published
//! presets.md names six latency-critical workloads for the write-back study but gives no numbers.
//! We derive each from the nearest published profile and mark it [`Provenance::Derived`]:
//! * `apache-fetch`, `db-select` ← `apache` (the published apache profile serves SELECTs);
//! * `apache-upload`, `db-update` ← `apache-update` (UPDATEs, the write-heavy apache profile);
//! * `imageserver-fetch` ← `imageserver`;
//! * `imageserver-upload` ← `imageserver`'s size, rate and sequentiality with `apache-update`'s
//!   read ratio (0.476), the only published write-heavy online mix.
//!
//! ## The profile generator
//! [`ProfileGenerator`] turns a profile into an endless stream of I/Os over a region:
//! direction by `read_ratio_ppm`; size either fixed at the mean or exponential around it
//! ([`IoSizeModel`]), rounded to 4 KiB pages and at least one page; offset continues from the end
//! of the previous I/O with probability `seq_ratio_ppm` (if it fits), else a random page-aligned
//! offset. *When* to issue (instructions, requests) is the host model's business.
//!
//! What it leaves out: per-profile size distributions beyond the mean, temporal locality other
//! than sequential runs, and the CPU side of each application (the host model's presets).

use rand::Rng;

use crate::error::{GenError, ProfileError};
use crate::generator::{below, IoReq, Op};

/// `apache`'s mean instructions between two I/Os of a request, from its published device-I/O
/// share (≥ 19 % on an NVMe SSD; "How the online services are run" above): the I/Os its
/// profile makes per 10^6 instructions, made per 5 × 10^5 (10^9 / 666 × 500 000 / 10^6).
pub const APACHE_INSTRUCTIONS_PER_IO: u64 = 1_000_000_000 / 666 * 500_000 / 1_000_000;

/// Worker threads of each published online service: one ("How the online services are run"
/// above: the pool that brings the knee at 400/s nearest the published unloaded response).
pub const ONLINE_WORKER_THREADS: u32 = 1;

/// `apache`'s instructions per request: calibrated to the knee at 400 requests/s (presets.md),
/// on `arm8` + `zssd`, vanilla, alone, [`ONLINE_WORKER_THREADS`] workers.
pub const APACHE_INSTRUCTIONS_PER_REQUEST: u64 = 3_000_000;
/// `apache-update`'s instructions per request: calibrated to the knee at 400 requests/s
/// (presets.md), as [`APACHE_INSTRUCTIONS_PER_REQUEST`].
pub const APACHE_UPDATE_INSTRUCTIONS_PER_REQUEST: u64 = 3_200_000;
/// `imageserver`'s instructions per request: calibrated to the knee at 400 requests/s
/// (presets.md), as [`APACHE_INSTRUCTIONS_PER_REQUEST`].
pub const IMAGESERVER_INSTRUCTIONS_PER_REQUEST: u64 = 3_000_000;

/// Page granularity of profile I/O: sizes and offsets are multiples of it.
pub const PAGE_BYTES: u64 = 4096;
/// Request rate of the online services in the studies (the knee of their load-latency curve).
pub const ONLINE_REQUESTS_PER_SEC: u64 = 400;
/// One million: the denominator of every `_ppm` field.
pub const PPM: u32 = 1_000_000;

/// Whether the application is a latency-critical service or a throughput job.
#[derive(Clone, Copy, Debug, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub enum ProfileKind {
    /// Serves requests; its response time is the headline metric (latency-critical).
    Online,
    /// Runs to completion; its throughput is the metric (buffered I/O via the page cache).
    Offline,
}

/// How many threads an offline job runs on a host of `cores` cores ("Offline jobs' threads"
/// above).
#[derive(Clone, Copy, Debug, PartialEq, Eq, serde::Serialize)]
pub enum OfflineThreads {
    /// A single-threaded program (GNU `gzip`, `wc`, `grep`).
    Single,
    /// An analytics framework sized to the machine minus one core, which it leaves to the
    /// operating system and the services co-located with it.
    AllButOneCore,
    /// This many threads per core: a framework that oversubscribes the CPU.
    PerCore(u32),
}

impl OfflineThreads {
    /// The thread count on a host of `cores` cores (at least one).
    pub fn on(self, cores: u32) -> u32 {
        match self {
            OfflineThreads::Single => 1,
            OfflineThreads::AllButOneCore => cores.saturating_sub(1).max(1),
            OfflineThreads::PerCore(n) => (n * cores).max(1),
        }
    }
}

/// Where a profile's numbers come from.
#[derive(Clone, Copy, Debug, PartialEq, Eq, serde::Serialize)]
pub enum Provenance {
    /// Measured on the published server (presets.md table).
    Published,
    /// Not published; derived by us from the named published profile(s) (see module essay).
    Derived { from: &'static str },
}

/// One application's I/O behaviour.
#[derive(Clone, Copy, Debug, PartialEq, Eq, serde::Serialize)]
pub struct Profile {
    /// Name as used in configs and reports.
    pub name: &'static str,
    pub kind: ProfileKind,
    /// Fraction of I/Os that are reads, in parts per million.
    pub read_ratio_ppm: u32,
    /// Mean request size in bytes.
    pub io_size_bytes: u64,
    /// I/Os issued per 10^9 instructions executed (= published "per M instructions" × 1000).
    pub ios_per_g_instr: u64,
    /// Fraction of I/Os that continue where the previous one ended, in parts per million.
    pub seq_ratio_ppm: u32,
    /// Online services: instructions a worker executes per request, calibrated to the knee at
    /// 400 requests/s (presets.md; "How the online services are run" above); `None` leaves it
    /// to the host (`app.instructions_per_request`). Offline jobs: `None`.
    pub instructions_per_request: Option<u64>,
    /// Online services: mean instructions between two of a worker's I/Os where a published
    /// figure pins it (`apache`'s I/O share); `None`: the profile's own rate
    /// ([`Profile::mean_instructions_between_ios`]).
    pub instructions_per_io: Option<u64>,
    /// Online services: worker threads behind the listener ([`ONLINE_WORKER_THREADS`] for the
    /// published ones); `None` leaves it to the host's default. Offline jobs: `None`.
    pub worker_threads: Option<u32>,
    /// Offline jobs: how many threads the job runs ("Offline jobs' threads" above). Online
    /// services: `None`.
    pub offline_threads: Option<OfflineThreads>,
    pub provenance: Provenance,
}

const KIB: u64 = 1024;

const fn published(
    name: &'static str,
    kind: ProfileKind,
    read_ratio_ppm: u32,
    io_size_kib: u64,
    ios_per_g_instr: u64,
    seq_ratio_ppm: u32,
) -> Profile {
    Profile {
        name,
        kind,
        read_ratio_ppm,
        io_size_bytes: io_size_kib * KIB,
        ios_per_g_instr,
        seq_ratio_ppm,
        instructions_per_request: None,
        instructions_per_io: None,
        worker_threads: None,
        offline_threads: None,
        provenance: Provenance::Published,
    }
}

/// A published offline job (presets.md's row) run with `threads` ("Offline jobs' threads"
/// above).
const fn offline(
    name: &'static str,
    read_ratio_ppm: u32,
    io_size_kib: u64,
    ios_per_g_instr: u64,
    seq_ratio_ppm: u32,
    threads: OfflineThreads,
) -> Profile {
    Profile {
        offline_threads: Some(threads),
        ..published(
            name,
            Offline,
            read_ratio_ppm,
            io_size_kib,
            ios_per_g_instr,
            seq_ratio_ppm,
        )
    }
}

/// A write-back study workload from a published profile: its I/O shape, not how the service
/// is run (the share that pins `apache`'s I/O density and the knee that pins the services'
/// compute were measured on the published services' own requests, not on these; they keep the
/// host's defaults).
const fn derived(base: Profile, name: &'static str, from: &'static str) -> Profile {
    Profile {
        name,
        provenance: Provenance::Derived { from },
        instructions_per_request: None,
        instructions_per_io: None,
        worker_threads: None,
        ..base
    }
}

/// A published online service run as the papers ran it: `instructions_per_request` (calibrated
/// to the knee) on [`ONLINE_WORKER_THREADS`] workers.
const fn service(base: Profile, instructions_per_request: u64) -> Profile {
    Profile {
        instructions_per_request: Some(instructions_per_request),
        worker_threads: Some(ONLINE_WORKER_THREADS),
        ..base
    }
}

use OfflineThreads::{AllButOneCore, PerCore, Single};
use ProfileKind::{Offline, Online};

const BFS: Profile = offline("bfs", 997_000, 238, 25, 700_000, PerCore(2));
const GP_GNU: Profile = offline("gp-gnu", 1_000_000, 134, 1_985, 780_000, Single);
const GP: Profile = offline("gp", 995_000, 23, 417, 810_000, AllButOneCore);
const GZIP: Profile = offline("gzip", 989_000, 150, 105, 660_000, Single);
const INDEX: Profile = offline("index", 998_000, 28, 205, 790_000, AllButOneCore);
const KMEANS: Profile = offline("kmeans", 1_000_000, 122, 37, 820_000, AllButOneCore);
const PAGERANK: Profile = offline("pagerank", 995_000, 30, 367, 710_000, AllButOneCore);
const UNGZIP: Profile = offline("ungzip", 96_000, 580, 76, 790_000, Single);
const WC_GNU: Profile = offline("wc-gnu", 1_000_000, 268, 170, 750_000, Single);
const WC: Profile = offline("wc", 999_000, 25, 548, 890_000, AllButOneCore);
const APACHE: Profile = Profile {
    instructions_per_io: Some(APACHE_INSTRUCTIONS_PER_IO),
    ..service(
        published("apache", Online, 999_000, 24, 666, 110_000),
        APACHE_INSTRUCTIONS_PER_REQUEST,
    )
};
const APACHE_UPDATE: Profile = service(
    published("apache-update", Online, 476_000, 27, 1_205, 130_000),
    APACHE_UPDATE_INSTRUCTIONS_PER_REQUEST,
);
const IMAGESERVER: Profile = service(
    published("imageserver", Online, 990_000, 12, 5_761, 860_000),
    IMAGESERVER_INSTRUCTIONS_PER_REQUEST,
);

/// The 13 published per-process profiles (presets.md), in table order.
pub const PUBLISHED_PROFILES: [Profile; 13] = [
    BFS,
    GP_GNU,
    GP,
    GZIP,
    INDEX,
    KMEANS,
    PAGERANK,
    UNGZIP,
    WC_GNU,
    WC,
    APACHE,
    APACHE_UPDATE,
    IMAGESERVER,
];

/// The six write-back study workloads: derived, not published (see module essay).
pub const WRITEBACK_PROFILES: [Profile; 6] = [
    derived(APACHE, "apache-fetch", "apache"),
    derived(APACHE_UPDATE, "apache-upload", "apache-update"),
    derived(APACHE, "db-select", "apache"),
    derived(APACHE_UPDATE, "db-update", "apache-update"),
    derived(IMAGESERVER, "imageserver-fetch", "imageserver"),
    Profile {
        read_ratio_ppm: APACHE_UPDATE.read_ratio_ppm,
        ..derived(
            IMAGESERVER,
            "imageserver-upload",
            "imageserver (size, rate, sequentiality) + apache-update (read ratio)",
        )
    },
];

impl Profile {
    /// Every built-in profile: the published ones, then the write-back study ones.
    pub fn all() -> impl Iterator<Item = &'static Profile> {
        PUBLISHED_PROFILES.iter().chain(WRITEBACK_PROFILES.iter())
    }

    /// The built-in profile called `name`; the error lists the known names.
    pub fn named(name: &str) -> Result<Profile, ProfileError> {
        Self::all()
            .find(|p| p.name == name)
            .copied()
            .ok_or_else(|| ProfileError {
                name: name.to_string(),
                known: Self::all().map(|p| p.name).collect::<Vec<_>>().join(", "),
            })
    }

    /// Mean instructions between two I/Os (10^9 / `ios_per_g_instr`), for offline jobs.
    pub fn mean_instructions_between_ios(&self) -> u64 {
        assert!(
            self.ios_per_g_instr > 0,
            "profile {} issues no I/O",
            self.name
        );
        1_000_000_000 / self.ios_per_g_instr
    }

    /// Mean instructions between two of an online worker's I/Os: the published figure that
    /// pins it, else the profile's rate.
    pub fn online_instructions_per_io(&self) -> u64 {
        self.instructions_per_io
            .unwrap_or_else(|| self.mean_instructions_between_ios())
    }
}

/// How a profile generator picks request sizes.
#[derive(Clone, Copy, Debug, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub enum IoSizeModel {
    /// Every I/O is the mean size rounded to the nearest page (at least one page).
    Fixed,
    /// Exponentially distributed around the mean, rounded to the nearest page, at least one page
    /// and at most `MAX_SIZE_FACTOR` × the mean (and the region). Rounding small draws up to one
    /// page raises the mean slightly for small profiles (12 KiB: about +5 %).
    Exponential,
}

/// Cap on exponential sizes, as a multiple of the mean: keeps a rare draw from becoming a
/// multi-megabyte request (P(exp > 8 × mean) = e^-8 ≈ 0.03 %).
const MAX_SIZE_FACTOR: u64 = 8;

/// Rounds `bytes` to the nearest page, at least one page.
fn round_to_page(bytes: u64) -> u64 {
    ((bytes + PAGE_BYTES / 2) / PAGE_BYTES).max(1) * PAGE_BYTES
}

/// An endless stream of I/Os shaped like a profile, over a region of a device.
#[derive(Clone, Debug)]
pub struct ProfileGenerator {
    profile: Profile,
    size_model: IoSizeModel,
    region_start_bytes: u64,
    region_pages: u64,
    /// Page after the previous I/O (relative to the region), if any.
    next_sequential_page: Option<u64>,
}

impl ProfileGenerator {
    /// A generator over `[region_start_bytes, region_start_bytes + region_bytes)`; the start must
    /// be page aligned and the region hold at least one page.
    pub fn new(
        profile: Profile,
        size_model: IoSizeModel,
        region_start_bytes: u64,
        region_bytes: u64,
    ) -> Result<ProfileGenerator, GenError> {
        if !region_start_bytes.is_multiple_of(PAGE_BYTES) {
            return Err(GenError::BadParameter {
                what: format!(
                    "profile `{}` region start {region_start_bytes}",
                    profile.name
                ),
                reason: format!("must be a multiple of {PAGE_BYTES} bytes"),
            });
        }
        let region_pages = region_bytes / PAGE_BYTES;
        if region_pages == 0 {
            return Err(GenError::RegionSmallerThanBlock {
                job: profile.name.to_string(),
                job_index: 0,
                region_bytes,
                block_size_bytes: PAGE_BYTES,
            });
        }
        Ok(ProfileGenerator {
            profile,
            size_model,
            region_start_bytes,
            region_pages,
            next_sequential_page: None,
        })
    }

    /// The profile this generator follows.
    pub fn profile(&self) -> &Profile {
        &self.profile
    }

    /// Request size in pages.
    fn draw_pages<R: Rng + ?Sized>(&self, rng: &mut R) -> u64 {
        let mean = self.profile.io_size_bytes;
        let bytes = match self.size_model {
            IoSizeModel::Fixed => round_to_page(mean),
            IoSizeModel::Exponential => {
                // u in (0, 1]: never ln(0).
                let u = ((rng.next_u64() >> 11) + 1) as f64 / (1u64 << 53) as f64;
                // libm, not f64::ln (the platform's C library): the same size on every machine.
                let draw = (-libm::log(u) * mean as f64) as u64;
                round_to_page(draw.min(mean * MAX_SIZE_FACTOR))
            }
        };
        (bytes / PAGE_BYTES).min(self.region_pages)
    }

    /// The next I/O.
    pub fn next<R: Rng + ?Sized>(&mut self, rng: &mut R) -> IoReq {
        let op = if below(rng, u64::from(PPM)) < u64::from(self.profile.read_ratio_ppm) {
            Op::Read
        } else {
            Op::Write
        };
        let pages = self.draw_pages(rng);
        let sequential = below(rng, u64::from(PPM)) < u64::from(self.profile.seq_ratio_ppm);
        let last_start = self.region_pages - pages;
        let page = match self.next_sequential_page {
            Some(next) if sequential && next <= last_start => next,
            _ => below(rng, last_start + 1),
        };
        assert!(
            page + pages <= self.region_pages,
            "I/O of {pages} pages at page {page} overruns a region of {} pages",
            self.region_pages
        );
        self.next_sequential_page = Some(page + pages);
        IoReq {
            op,
            offset_bytes: self.region_start_bytes + page * PAGE_BYTES,
            len_bytes: pages * PAGE_BYTES,
        }
    }
}
