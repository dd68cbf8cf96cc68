//! Built-in profiles and the profile-driven generator.

use rand::SeedableRng;
use rand_pcg::Pcg64Mcg;
use workload::{
    IoSizeModel, Op, Profile, ProfileGenerator, ProfileKind, Provenance, PAGE_BYTES,
    PUBLISHED_PROFILES, WRITEBACK_PROFILES,
};

#[test]
fn the_published_table_is_transcribed_exactly() {
    assert_eq!(PUBLISHED_PROFILES.len(), 13);
    let names: Vec<&str> = PUBLISHED_PROFILES.iter().map(|p| p.name).collect();
    assert_eq!(
        names,
        [
            "bfs",
            "gp-gnu",
            "gp",
            "gzip",
            "index",
            "kmeans",
            "pagerank",
            "ungzip",
            "wc-gnu",
            "wc",
            "apache",
            "apache-update",
            "imageserver"
        ]
    );
    let bfs = Profile::named("bfs").unwrap();
    assert_eq!(
        (
            bfs.kind,
            bfs.read_ratio_ppm,
            bfs.io_size_bytes,
            bfs.ios_per_g_instr,
            bfs.seq_ratio_ppm
        ),
        (ProfileKind::Offline, 997_000, 238 * 1024, 25, 700_000)
    );
    let img = Profile::named("imageserver").unwrap();
    assert_eq!(
        (
            img.kind,
            img.read_ratio_ppm,
            img.io_size_bytes,
            img.ios_per_g_instr,
            img.seq_ratio_ppm
        ),
        (ProfileKind::Online, 990_000, 12 * 1024, 5_761, 860_000)
    );
    assert_eq!(img.mean_instructions_between_ios(), 173_580);
    let ungzip = Profile::named("ungzip").unwrap();
    assert_eq!(ungzip.read_ratio_ppm, 96_000, "ungzip is write-heavy");
    let online: Vec<&str> = PUBLISHED_PROFILES
        .iter()
        .filter(|p| p.kind == ProfileKind::Online)
        .map(|p| p.name)
        .collect();
    assert_eq!(online, ["apache", "apache-update", "imageserver"]);
    assert!(PUBLISHED_PROFILES
        .iter()
        .all(|p| p.provenance == Provenance::Published));
}

#[test]
fn writeback_workloads_are_derived_and_say_so() {
    let names: Vec<&str> = WRITEBACK_PROFILES.iter().map(|p| p.name).collect();
    assert_eq!(
        names,
        [
            "apache-fetch",
            "apache-upload",
            "db-select",
            "db-update",
            "imageserver-fetch",
            "imageserver-upload"
        ]
    );
    for p in &WRITEBACK_PROFILES {
        assert!(
            matches!(p.provenance, Provenance::Derived { .. }),
            "{}",
            p.name
        );
        assert_eq!(
            p.kind,
            ProfileKind::Online,
            "{} is latency-critical",
            p.name
        );
        let read_mostly = p.name.ends_with("fetch") || p.name.ends_with("select");
        if read_mostly {
            assert!(p.read_ratio_ppm > 900_000, "{}", p.name);
        } else {
            assert!(p.read_ratio_ppm < 500_000, "{}", p.name);
        }
    }
    let upload = Profile::named("imageserver-upload").unwrap();
    let img = Profile::named("imageserver").unwrap();
    assert_eq!(upload.io_size_bytes, img.io_size_bytes);
    assert_eq!(upload.read_ratio_ppm, 476_000);
}

#[test]
fn unknown_profile_lists_the_known_ones() {
    let err = Profile::named("apache2").unwrap_err();
    let msg = err.to_string();
    assert!(msg.contains("apache2"), "{msg}");
    for name in ["bfs", "imageserver", "db-update", "imageserver-upload"] {
        assert!(msg.contains(name), "{msg} lacks {name}");
    }
    assert_eq!(Profile::all().count(), 19);
}

/// Runs `count` I/Os and returns (reads, sequential continuations, mean size in bytes).
fn sample(profile: &str, model: IoSizeModel, count: usize, seed: u64) -> (usize, usize, f64) {
    let region_bytes = 8u64 << 30;
    let mut gen = ProfileGenerator::new(
        Profile::named(profile).unwrap(),
        model,
        1 << 20,
        region_bytes,
    )
    .unwrap();
    let mut rng = Pcg64Mcg::seed_from_u64(seed);
    let (mut reads, mut sequential, mut bytes) = (0, 0, 0u64);
    let mut previous_end = None;
    for _ in 0..count {
        let io = gen.next(&mut rng);
        assert_eq!(io.offset_bytes % PAGE_BYTES, 0);
        assert_eq!(io.len_bytes % PAGE_BYTES, 0);
        assert!(io.len_bytes >= PAGE_BYTES);
        assert!(io.offset_bytes >= 1 << 20);
        assert!(io.offset_bytes + io.len_bytes <= (1 << 20) + region_bytes);
        reads += usize::from(io.op == Op::Read);
        sequential += usize::from(previous_end == Some(io.offset_bytes));
        previous_end = Some(io.offset_bytes + io.len_bytes);
        bytes += io.len_bytes;
    }
    (reads, sequential, bytes as f64 / count as f64)
}

#[test]
fn profile_generator_follows_read_and_sequential_ratios() {
    let n = 100_000;
    let (reads, seq, mean) = sample("apache-update", IoSizeModel::Fixed, n, 1);
    assert!((reads as f64 / n as f64 - 0.476).abs() < 0.01, "{reads}");
    // A random offset lands on the previous end only by chance (about 1 in 2 million pages).
    assert!((seq as f64 / n as f64 - 0.13).abs() < 0.01, "{seq}");
    assert_eq!(mean, 28.0 * 1024.0, "27 KiB rounds to 7 pages");
    let (reads, seq, _) = sample("imageserver", IoSizeModel::Fixed, n, 2);
    assert!((reads as f64 / n as f64 - 0.990).abs() < 0.005, "{reads}");
    assert!((seq as f64 / n as f64 - 0.86).abs() < 0.01, "{seq}");
}

#[test]
fn exponential_sizes_keep_the_mean_roughly() {
    let n = 200_000;
    // 238 KiB: rounding and the 8× cap are small next to the mean.
    let (_, _, mean) = sample("bfs", IoSizeModel::Exponential, n, 3);
    let target = 238.0 * 1024.0;
    assert!((mean / target - 1.0).abs() < 0.02, "bfs mean {mean}");
    // 12 KiB: draws under half a page round up to one page, raising the mean by about 5 %.
    let (_, _, mean) = sample("imageserver", IoSizeModel::Exponential, n, 4);
    let ratio = mean / (12.0 * 1024.0);
    assert!(
        ratio > 1.02 && ratio < 1.08,
        "imageserver mean ratio {ratio}"
    );
}

#[test]
fn profile_generator_checks_its_region() {
    let p = Profile::named("wc").unwrap();
    assert!(ProfileGenerator::new(p, IoSizeModel::Fixed, 100, 1 << 20).is_err());
    assert!(ProfileGenerator::new(p, IoSizeModel::Fixed, 0, 100).is_err());
    // Sizes never exceed a tiny region.
    let big = Profile::named("ungzip").unwrap();
    let mut gen = ProfileGenerator::new(big, IoSizeModel::Exponential, 0, 3 * PAGE_BYTES).unwrap();
    let mut rng = Pcg64Mcg::seed_from_u64(5);
    for _ in 0..1000 {
        let io = gen.next(&mut rng);
        assert!(io.offset_bytes + io.len_bytes <= 3 * PAGE_BYTES);
    }
}

/// Golden exponential sizes: the same on every machine and libm version (sizes decide service
/// times). If this fails after a deliberate change, update it in review: results change.
#[test]
fn exponential_sizes_are_pinned() {
    let mut gen = ProfileGenerator::new(
        Profile::named("imageserver").unwrap(),
        IoSizeModel::Exponential,
        0,
        8 << 30,
    )
    .unwrap();
    let mut rng = Pcg64Mcg::seed_from_u64(11);
    let pages: Vec<u64> = (0..12)
        .map(|_| gen.next(&mut rng).len_bytes / PAGE_BYTES)
        .collect();
    assert_eq!(pages, PINNED_IMAGESERVER_PAGES_SEED11);
}
const PINNED_IMAGESERVER_PAGES_SEED11: [u64; 12] = [5, 7, 1, 1, 1, 1, 1, 7, 11, 1, 4, 1];

/// Every offline job names the threads its program runs ("Offline jobs' threads"): the GNU
/// tools one, the analytics frameworks a worker per core but one, `bfs` two per core (the one
/// presets.md says starves the others); online services name none (their workers are
/// `worker_threads`).
#[test]
fn offline_jobs_run_the_threads_of_their_program() {
    let threads = |name: &str, cores| {
        Profile::named(name)
            .unwrap()
            .offline_threads
            .map(|t| t.on(cores))
    };
    for gnu in ["gzip", "ungzip", "wc-gnu", "gp-gnu"] {
        assert_eq!(threads(gnu, 8), Some(1), "{gnu}");
    }
    for framework in ["pagerank", "kmeans", "index", "wc", "gp"] {
        assert_eq!(threads(framework, 8), Some(7), "{framework}");
        assert_eq!(threads(framework, 1), Some(1), "{framework} on one core");
    }
    assert_eq!(threads("bfs", 8), Some(16));
    for p in Profile::all() {
        assert_eq!(
            p.offline_threads.is_some(),
            p.kind == ProfileKind::Offline,
            "{}",
            p.name
        );
    }
}
