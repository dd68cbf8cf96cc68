//! Event-queue throughput with ~1,000 events pending (the simulator's typical depth).
use criterion::{criterion_group, criterion_main, Criterion, Throughput};
use engine::{stream, EventQueue, SimTime};
use rand::Rng;

fn hold_model(c: &mut Criterion) {
    const PENDING: u64 = 1_000;
    const OPS: u64 = 100_000;
    let mut group = c.benchmark_group("event_queue");
    group.throughput(Throughput::Elements(OPS));
    group.bench_function("hold_1000_pending", |b| {
        let mut rng = stream(1, "bench");
        let mut q = EventQueue::new();
        for i in 0..PENDING {
            q.schedule(SimTime(rng.next_u64() % 100_000), i);
        }
        b.iter(|| {
            for _ in 0..OPS {
                let (t, e) = q.pop().expect("queue holds PENDING events");
                q.schedule(t + 1 + rng.next_u64() % 100_000, e);
            }
        });
    });
    group.finish();
}

criterion_group!(benches, hold_model);
criterion_main!(benches);
