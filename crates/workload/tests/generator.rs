//! The I/O generator: offsets, coverage, mix, end conditions and determinism.

use std::collections::HashMap;

use proptest::prelude::*;
use rand::SeedableRng;
use rand_pcg::Pcg64Mcg;
use workload::{GenError, IoGenerator, IoReq, JobFile, JobSpec, Op};

const GIB: u64 = 1 << 30;

fn job(text: &str) -> JobSpec {
    JobFile::parse_fio(text, "gen.fio")
        .unwrap_or_else(|e| panic!("{e}"))
        .jobs
        .remove(0)
}

fn drain(gen: &mut IoGenerator, rng: &mut Pcg64Mcg, limit: usize) -> Vec<IoReq> {
    let mut out = Vec::new();
    while out.len() < limit {
        match gen.next(rng) {
            Some(io) => out.push(io),
            None => break,
        }
    }
    out
}

#[test]
fn sequential_reads_walk_the_region_once_then_stop() {
    let spec = job("[s]\nrw=read\nbs=4k\nsize=40k\noffset=8k\n");
    let mut gen = IoGenerator::new(&spec, 0, GIB).unwrap();
    let mut rng = Pcg64Mcg::seed_from_u64(1);
    let ios = drain(&mut gen, &mut rng, 1000);
    let offsets: Vec<u64> = ios.iter().map(|io| io.offset_bytes).collect();
    assert_eq!(
        offsets,
        (0..10).map(|b| 8192 + b * 4096).collect::<Vec<_>>()
    );
    assert!(ios
        .iter()
        .all(|io| io.op == Op::Read && io.len_bytes == 4096));
    assert_eq!(gen.next(&mut rng), None, "stays finished");
}

/// fio keeps one sequential position per direction (checked with fio's write_iolog: rw=rw
/// size=40k gave reads at 0..20k and writes at 0..12k).
#[test]
fn sequential_mix_keeps_a_position_per_direction() {
    let spec = job("[m]\nrw=rw\nbs=4k\nsize=40k\n");
    let mut gen = IoGenerator::new(&spec, 0, GIB).unwrap();
    let mut rng = Pcg64Mcg::seed_from_u64(5);
    let ios = drain(&mut gen, &mut rng, 1000);
    assert_eq!(ios.len(), 10, "size is the total over both directions");
    for op in [Op::Read, Op::Write] {
        let offsets: Vec<u64> = ios
            .iter()
            .filter(|io| io.op == op)
            .map(|io| io.offset_bytes)
            .collect();
        let expected: Vec<u64> = (0..offsets.len() as u64).map(|b| b * 4096).collect();
        assert_eq!(offsets, expected, "{op:?}");
    }
}

#[test]
fn time_based_sequential_wraps_to_the_region_start() {
    let spec = job("[s]\nrw=write\nbs=4k\nsize=12k\noffset=4k\nruntime=1\ntime_based\n");
    let mut gen = IoGenerator::new(&spec, 0, GIB).unwrap();
    assert_eq!(gen.remaining_ios(), None, "endless");
    let mut rng = Pcg64Mcg::seed_from_u64(2);
    let offsets: Vec<u64> = drain(&mut gen, &mut rng, 7)
        .iter()
        .map(|io| io.offset_bytes)
        .collect();
    assert_eq!(offsets, [4096, 8192, 12288, 4096, 8192, 12288, 4096]);
}

#[test]
fn time_based_random_covers_every_block_in_each_pass() {
    let spec = job("[r]\nrw=randread\nbs=4k\nsize=16k\nruntime=1\ntime_based\n");
    let mut gen = IoGenerator::new(&spec, 0, GIB).unwrap();
    let mut rng = Pcg64Mcg::seed_from_u64(3);
    let ios = drain(&mut gen, &mut rng, 12);
    for pass in ios.chunks(4) {
        let mut offsets: Vec<u64> = pass.iter().map(|io| io.offset_bytes).collect();
        offsets.sort_unstable();
        assert_eq!(offsets, [0, 4096, 8192, 12288]);
    }
}

#[test]
fn end_conditions_follow_fio() {
    // number_ios stops early but never extends a job (fio: 20 requested, 8 done on 32k).
    let spec = job("[r]\nrw=randread\nbs=4k\nsize=32k\nnumber_ios=20\n");
    assert_eq!(
        IoGenerator::new(&spec, 0, GIB).unwrap().remaining_ios(),
        Some(8)
    );
    let spec = job("[r]\nrw=randread\nbs=4k\nsize=32k\nnumber_ios=3\n");
    assert_eq!(
        IoGenerator::new(&spec, 0, GIB).unwrap().remaining_ios(),
        Some(3)
    );
    // io_size may exceed the region: the job loops.
    let spec = job("[r]\nrw=read\nbs=4k\nsize=8k\nio_size=24k\n");
    let mut gen = IoGenerator::new(&spec, 0, GIB).unwrap();
    let mut rng = Pcg64Mcg::seed_from_u64(4);
    let offsets: Vec<u64> = drain(&mut gen, &mut rng, 100)
        .iter()
        .map(|io| io.offset_bytes)
        .collect();
    assert_eq!(offsets, [0, 4096, 0, 4096, 0, 4096]);
    // time_based with number_ios: number_ios still ends it.
    let spec = job("[r]\nrw=randread\nsize=8k\nruntime=1\ntime_based\nnumber_ios=5\n");
    assert_eq!(
        IoGenerator::new(&spec, 0, GIB).unwrap().remaining_ios(),
        Some(5)
    );
    // No size: the region is the rest of the device after the offset.
    let spec = job("[r]\nrw=randread\nbs=1m\noffset=256m\n");
    let gen = IoGenerator::new(&spec, 0, GIB).unwrap();
    assert_eq!(gen.region_blocks(), 768);
    assert_eq!(gen.remaining_ios(), Some(768));
    // A trailing partial block is not part of the region.
    let spec = job("[r]\nrw=read\nbs=4k\nsize=10k\n");
    assert_eq!(IoGenerator::new(&spec, 0, GIB).unwrap().region_blocks(), 2);
}

/// At the end of `ramp_time` fio resets the job's counters, so `number_ios` (and `size`) count
/// again from there; offsets go on from where the ramp left them. An endless job stays endless.
#[test]
fn restart_budget_counts_the_ios_again_from_where_offsets_are() {
    let spec = job("[s]\nrw=read\nbs=4k\nsize=40k\nnumber_ios=3\nramp_time=1\n");
    let mut gen = IoGenerator::new(&spec, 0, GIB).unwrap();
    let mut rng = Pcg64Mcg::seed_from_u64(1);
    let offsets = |ios: Vec<IoReq>| {
        ios.iter()
            .map(|io| io.offset_bytes / 4096)
            .collect::<Vec<_>>()
    };
    gen.next(&mut rng).unwrap();
    assert_eq!(gen.remaining_ios(), Some(2));
    gen.restart_budget();
    assert_eq!(gen.remaining_ios(), Some(3), "the whole budget again");
    assert_eq!(offsets(drain(&mut gen, &mut rng, 100)), [1, 2, 3]);
    assert_eq!(gen.next(&mut rng), None);
    gen.restart_budget();
    assert_eq!(offsets(drain(&mut gen, &mut rng, 100)), [4, 5, 6]);

    let spec = job("[r]\nrw=randread\nsize=8k\nruntime=1\ntime_based\nramp_time=1\n");
    let mut gen = IoGenerator::new(&spec, 0, GIB).unwrap();
    assert_eq!(gen.remaining_ios(), None);
    gen.restart_budget();
    assert_eq!(gen.remaining_ios(), None);
}

#[test]
fn regions_that_do_not_fit_are_errors() {
    let spec = job("[r]\nrw=randread\nsize=2g\n");
    let err = IoGenerator::new(&spec, 0, GIB).unwrap_err();
    assert!(
        matches!(err, GenError::RegionExceedsCapacity { end_bytes, .. } if end_bytes == 2 * GIB),
        "{err:?}"
    );
    assert!(err.to_string().contains("exceeds"), "{err}");
    let spec = job("[r]\nrw=randread\noffset=1g\n");
    assert!(matches!(
        IoGenerator::new(&spec, 0, GIB),
        Err(GenError::RegionExceedsCapacity { .. })
    ));
    let spec =
        job("[r]\nrw=randread\nbs=1m\noffset=1023m\nsize=1m\nnumjobs=2\noffset_increment=1m\n");
    assert!(IoGenerator::new(&spec, 0, GIB).is_ok());
    assert!(matches!(
        IoGenerator::new(&spec, 1, GIB),
        Err(GenError::RegionExceedsCapacity { job_index: 1, .. })
    ));
    assert!(matches!(
        IoGenerator::new(&spec, 2, GIB),
        Err(GenError::NoSuchClone { .. })
    ));
    let spec = job("[r]\nrw=randread\nbs=8k\noffset=1020k\n");
    assert!(matches!(
        IoGenerator::new(&spec, 0, 1 << 20),
        Err(GenError::RegionSmallerThanBlock { .. })
    ));
}

#[test]
fn clones_share_the_region_unless_offset_increment() {
    let spec = job("[s]\nrw=read\nbs=4k\nsize=64k\nnumjobs=3\n");
    for clone in 0..3 {
        let gen = IoGenerator::new(&spec, clone, GIB).unwrap();
        assert_eq!(gen.region_start_bytes(), 0);
    }
    let spec = job("[s]\nrw=read\nbs=4k\nsize=64k\nnumjobs=3\noffset=1m\noffset_increment=64k\n");
    let starts: Vec<u64> = (0..3)
        .map(|c| {
            IoGenerator::new(&spec, c, GIB)
                .unwrap()
                .region_start_bytes()
        })
        .collect();
    assert_eq!(starts, [1 << 20, (1 << 20) + 65536, (1 << 20) + 131072]);
}

#[test]
fn same_seed_same_ios_different_seed_different_ios() {
    let spec = job("[r]\nrw=randrw\nbs=4k\nsize=1g\nnumber_ios=1000\n");
    let run = |seed: u64| {
        let mut gen = IoGenerator::new(&spec, 0, 16 * GIB).unwrap();
        let mut rng = Pcg64Mcg::seed_from_u64(seed);
        drain(&mut gen, &mut rng, 2000)
    };
    assert_eq!(run(9), run(9));
    assert_ne!(run(9), run(10));
}

#[test]
fn rwmix_ratio_holds() {
    for (pct, seed) in [(70u64, 1u64), (20, 2), (95, 3)] {
        let spec = job(&format!(
            "[m]\nrw=randrw\nrwmixread={pct}\nnorandommap\nsize=1g\nnumber_ios=100000\n"
        ));
        let mut gen = IoGenerator::new(&spec, 0, GIB).unwrap();
        let mut rng = Pcg64Mcg::seed_from_u64(seed);
        let ios = drain(&mut gen, &mut rng, 200_000);
        assert_eq!(ios.len(), 100_000);
        let reads = ios.iter().filter(|io| io.op == Op::Read).count() as u64;
        // Binomial sd at n = 1e5 is at most 158 I/Os; allow about 6 sd.
        let expected = pct * 1000;
        assert!(
            reads.abs_diff(expected) < 1000,
            "rwmixread={pct}: {reads} reads of 100000"
        );
    }
}

#[test]
fn norandommap_repeats_blocks_random_map_does_not() {
    let mut rng = Pcg64Mcg::seed_from_u64(8);
    let spec = job("[r]\nrw=randread\nbs=4k\nsize=4m\nnorandommap\n");
    let mut gen = IoGenerator::new(&spec, 0, GIB).unwrap();
    let ios = drain(&mut gen, &mut rng, 10_000);
    assert_eq!(ios.len(), 1024);
    let mut distinct: Vec<u64> = ios.iter().map(|io| io.offset_bytes).collect();
    distinct.sort_unstable();
    distinct.dedup();
    // Uniform draws: about 1 − 1/e ≈ 63 % distinct.
    assert!(distinct.len() < 800, "{} distinct of 1024", distinct.len());
    assert!(distinct.len() > 550, "{} distinct of 1024", distinct.len());
}

#[test]
fn zipf_is_skewed_and_its_hot_blocks_are_scattered() {
    let spec = job(
        "[z]\nrw=randread\nbs=4k\nsize=400m\nrandom_distribution=zipf:1.2\nnumber_ios=100000\n",
    );
    let mut gen = IoGenerator::new(&spec, 0, GIB).unwrap();
    let mut rng = Pcg64Mcg::seed_from_u64(12);
    let mut counts: HashMap<u64, u64> = HashMap::new();
    while let Some(io) = gen.next(&mut rng) {
        assert_eq!(io.offset_bytes % 4096, 0);
        assert!(io.offset_bytes < 400 << 20);
        *counts.entry(io.offset_bytes / 4096).or_default() += 1;
    }
    let mut by_count: Vec<(u64, u64)> = counts.into_iter().map(|(b, c)| (c, b)).collect();
    by_count.sort_unstable_by(|a, b| b.cmp(a));
    let blocks = (400u64 << 20) / 4096;
    // Rank 1 of zipf(1.2) over 102 400 blocks gets about 18 % of draws; uniform would get 1e-5.
    let (top_count, top_block) = by_count[0];
    assert!(top_count > 10_000, "hottest block drew only {top_count}");
    assert_eq!(top_block, 0, "rank 1 maps to block 0");
    // The next hottest blocks are far apart, not 1, 2, 3...
    let hot: Vec<u64> = by_count[1..6].iter().map(|&(_, b)| b).collect();
    assert!(
        hot.iter().all(|&b| b > blocks / 100),
        "hot blocks packed at the start: {hot:?}"
    );
}

fn pattern_strategy() -> impl Strategy<Value = &'static str> {
    prop::sample::select(vec![
        "read",
        "write",
        "randread",
        "randwrite",
        "rw",
        "randrw",
    ])
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(128))]

    /// Every I/O is one aligned block inside its clone's region, and non-time-based jobs end
    /// after the planned count.
    #[test]
    fn offsets_are_aligned_and_inside_the_region(
        pattern in pattern_strategy(),
        bs_sectors in 1u64..=64,
        region_blocks in 1u64..=300,
        offset_sectors in 0u64..=4096,
        clone in 0u32..3,
        increment_sectors in 0u64..=1024,
        extra in prop::sample::select(vec!["", "norandommap\n", "random_distribution=zipf:0.8\n", "random_distribution=zipf:1.5\n"]),
        seed in any::<u64>(),
    ) {
        let bs = bs_sectors * 512;
        let size = region_blocks * bs + 511; // a partial block at the end must never be used
        let text = format!(
            "[p]\nrw={pattern}\nbs={bs}\nsize={size}\noffset={}\nnumjobs=3\noffset_increment={}\n{extra}",
            offset_sectors * 512,
            increment_sectors * 512,
        );
        let spec = job(&text);
        let mut gen = IoGenerator::new(&spec, clone, 64 * GIB).unwrap();
        let start = offset_sectors * 512 + u64::from(clone) * increment_sectors * 512;
        prop_assert_eq!(gen.region_start_bytes(), start);
        prop_assert_eq!(gen.region_blocks(), region_blocks);
        let mut rng = Pcg64Mcg::seed_from_u64(seed);
        let mut count = 0u64;
        while let Some(io) = gen.next(&mut rng) {
            count += 1;
            prop_assert_eq!(io.len_bytes, bs);
            prop_assert!(io.offset_bytes >= start);
            prop_assert_eq!((io.offset_bytes - start) % bs, 0);
            prop_assert!(io.offset_bytes + bs <= start + region_blocks * bs);
            prop_assert!(count <= region_blocks);
        }
        prop_assert_eq!(count, region_blocks);
    }

    /// Without norandommap a random job touches every block exactly once per pass.
    #[test]
    fn random_map_covers_every_block_once_per_pass(
        region_blocks in 1u64..=2000,
        passes in 1u64..=3,
        mixed in any::<bool>(),
        seed in any::<u64>(),
    ) {
        let rw = if mixed { "randrw" } else { "randwrite" };
        let spec = job(&format!(
            "[p]\nrw={rw}\nbs=4k\nsize={}\nio_size={}\n",
            region_blocks * 4096,
            passes * region_blocks * 4096
        ));
        let mut gen = IoGenerator::new(&spec, 0, GIB).unwrap();
        let mut rng = Pcg64Mcg::seed_from_u64(seed);
        for pass in 0..passes {
            let mut seen = vec![false; region_blocks as usize];
            for _ in 0..region_blocks {
                let io = gen.next(&mut rng).expect("pass not finished");
                let block = (io.offset_bytes / 4096) as usize;
                prop_assert!(!seen[block], "pass {} block {} twice", pass, block);
                seen[block] = true;
            }
        }
        prop_assert_eq!(gen.next(&mut rng), None);
    }
}
