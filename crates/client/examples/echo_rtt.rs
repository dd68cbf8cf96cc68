//! The baseline for "how much latency does the server add": a minimal loopback TCP echo with
//! the same message sizes as a 4 KB READ in the wire protocol (40-byte request, 4120-byte
//! reply), measured at queue depth 1 with the same tokio client setup the client library uses.
//! The responder is a plain blocking thread that writes back a fixed reply per request.
//!
//! ```sh
//! cargo run --release -p client --example echo_rtt -- [ITERATIONS]
//! ```
//! Compare its p50 with the read p50 of
//! `ullstack bench --tenant name=open,qd=1 --threads 1` against a server on the same machine.

use std::io::{Read, Write};
use std::net::TcpListener;
use std::time::Instant;

use tokio::io::{AsyncReadExt, AsyncWriteExt};

const REQUEST_BYTES: usize = 40;
const REPLY_BYTES: usize = 24 + 4096;

fn main() -> std::io::Result<()> {
    let iterations: usize = std::env::args()
        .nth(1)
        .and_then(|a| a.parse().ok())
        .unwrap_or(200_000);
    let listener = TcpListener::bind("127.0.0.1:0")?;
    let addr = listener.local_addr()?;
    std::thread::spawn(move || -> std::io::Result<()> {
        let (mut s, _) = listener.accept()?;
        s.set_nodelay(true)?;
        let mut req = [0u8; REQUEST_BYTES];
        let reply = vec![7u8; REPLY_BYTES];
        loop {
            if s.read_exact(&mut req).is_err() {
                return Ok(());
            }
            s.write_all(&reply)?;
        }
    });
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(1)
        .enable_all()
        .build()?;
    let mut samples_ns = rt.block_on(async move {
        let mut s = tokio::net::TcpStream::connect(addr).await?;
        s.set_nodelay(true)?;
        let req = [1u8; REQUEST_BYTES];
        let mut reply = vec![0u8; REPLY_BYTES];
        let mut samples = Vec::with_capacity(iterations);
        for i in 0..iterations + 10_000 {
            let t = Instant::now();
            s.write_all(&req).await?;
            s.read_exact(&mut reply).await?;
            if i >= 10_000 {
                samples.push(t.elapsed().as_nanos() as u64);
            }
        }
        Ok::<_, std::io::Error>(samples)
    })?;
    samples_ns.sort_unstable();
    let q = |p: f64| samples_ns[((samples_ns.len() - 1) as f64 * p) as usize] as f64 / 1e3;
    println!(
        "loopback TCP echo, {REQUEST_BYTES} B -> {REPLY_BYTES} B, QD1, {iterations} round trips: \
         p50 {:.1} us  p95 {:.1} us  p99 {:.1} us",
        q(0.5),
        q(0.95),
        q(0.99)
    );
    Ok(())
}
