//! Generator speed: `next()` calls per second on an 800 GB device region, per offset model.
//!
//! Run: `cargo bench -p workload --bench generator`. The simulator calls `next()` once per I/O
//! it issues, so this must stay far above the simulator's own event rate (target ≥ 20 M/s for
//! uniform random offsets).

use std::hint::black_box;

use criterion::{criterion_group, criterion_main, Criterion, Throughput};
use rand::SeedableRng;
use rand_pcg::Pcg64Mcg;
use workload::{IoGenerator, JobFile};

/// 800 GB, the size of the published ULL device.
const CAPACITY_BYTES: u64 = 800_000_000_000;

fn generator(options: &str) -> IoGenerator {
    // time_based: endless, so the bench never runs out of I/O.
    let text = format!("[bench]\nbs=4k\nruntime=1\ntime_based\n{options}");
    let file = JobFile::parse_fio(&text, "bench.fio").expect("bench job parses");
    IoGenerator::new(&file.jobs[0], 0, CAPACITY_BYTES).expect("bench job fits")
}

fn bench_next(c: &mut Criterion) {
    let cases = [
        ("uniform-norandommap", "rw=randread\nnorandommap\n"),
        ("random-map", "rw=randread\n"),
        (
            "randrw-70-norandommap",
            "rw=randrw\nrwmixread=70\nnorandommap\n",
        ),
        ("sequential", "rw=read\n"),
        ("zipf-1.2", "rw=randread\nrandom_distribution=zipf:1.2\n"),
    ];
    let mut group = c.benchmark_group("next");
    group.throughput(Throughput::Elements(1));
    for (name, options) in cases {
        let mut gen = generator(options);
        let mut rng = Pcg64Mcg::seed_from_u64(42);
        group.bench_function(name, |b| b.iter(|| black_box(gen.next(&mut rng))));
    }
    group.finish();
}

criterion_group!(benches, bench_next);
criterion_main!(benches);
