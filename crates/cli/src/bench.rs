//! `ullstack bench`: argument parsing for the load generator; the work is in
//! `client::bench` (runner, tenant specs, report, and the flags' merge over a scenario file:
//! `client::bench::overrides`).

use std::path::PathBuf;

use anyhow::Context;
use client::bench::{self, overrides::Overrides};

/// The teaching part of `ullstack bench --help` (shown after the options: the subcommand's
/// one-line summary comes from `main.rs`).
const BENCH_HELP: &str = r#"Generate load against a running `ullstack serve` from one or more tenants and report
per-tenant IOPS, MB/s and latency percentiles (HDR: p50 p95 p99 p99.9 max).

Each tenant authenticates as itself, registers as latency-critical (with its SLO) or
best-effort, and offers load either OPEN-LOOP (Poisson arrivals at a fixed rate, latency
measured from each request's scheduled time, so a slow server cannot hide its queueing:
like mutilate) or CLOSED-LOOP (a fixed number of requests in flight, like fio's iodepth).

Examples

  # Quick start server (own protocol on 10810, open tenant `open`):
  ullstack serve --memory 1GiB --listen 127.0.0.1:10809

  # Unloaded latency: one tenant, QD1 4 KB random reads, 10 s
  ullstack bench --server 127.0.0.1:10810 --tenant name=open,qd=1

  # Throughput: 4 connections, 32 in flight each, 70 % reads, on 4 threads
  ullstack bench --server 127.0.0.1:10810 --threads 4 \
      --tenant name=open,qd=128,conns=4,read=70 --duration 30s --json out.json

  # Two tenants with SLOs and a best-effort one (reflex scenario 1 style)
  ullstack bench --server HOST:PORT \
      --tenant name=A,secret=secret-a,class=lc,iops=120000,p95=500us,read=100,size=4k \
      --tenant name=B,secret=secret-b,class=lc,iops=70000,rate=45000,p95=500us,read=80 \
      --tenant name=C,secret=secret-c,qd=32,read=95

  # Against a server with [tls]: PSK (a psktool `identity:hexkey` file), or its certificate
  ullstack bench --server HOST:PORT --tls-psk keys.psk --tls-psk-identity alice --tenant name=alice,...
  ullstack bench --server HOST:PORT --tls-ca ca.pem --tenant name=open,qd=32

  # A scenario file (crates/client/scenarios/reflex-*.toml); flags override its globals
  ullstack bench --scenario crates/client/scenarios/reflex-1.toml --server HOST:PORT

Tenant keys (--tenant key=value,key=value,... or a [[tenant]] table in a scenario)

  name      tenant name sent in HELLO (required)          secret   its secret ("")
  volume    volume to open ("default")                    class    lc | be (be)
  iops      LC: the SLO's IOPS; also the offered rate unless rate=/qd= is given
  p95       LC: the SLO's p95 read latency (500us, 2ms)
  rate      open loop: offered IOPS (Poisson)             qd       closed loop: in flight
            (LC default: iops; BE default: qd=16)
  read      % reads, 0..100 (100)                          size     4k, 1k, 128k (4k)
  pattern   random | seq | zipf | zipf:THETA (random)     conns    connections (1)
  count     N copies named NAME-0..NAME-(N-1) (1)         fua      yes: writes are FUA (no)
  register  no: use the default best-effort flow (yes)    span     address only the first
                                                                   SPAN bytes (whole volume)
  trace     replay a block trace file (blkparse, MSR, SPC, DiskSim/MQSim, CSV): its reads,
            writes, sizes and times, folded onto the region; excludes rate/read/pattern;
            with qd= closed loop, else open loop; size= caps one request (1m)
  speed     with trace=: trace times divided by this (1)
  trace_format  with trace=: blkparse | msr | spc | csv | mqsim | disksim (detected)
  trace_device  with trace=: only this device's records, N or MAJ:MIN (all)
  from, to  with trace=: only records with from <= time < to, trace time from its first
            record, with a unit: 10s, 250ms, 1.5s (whole trace)
  skip_bad_lines  with trace=: yes = count malformed lines and go on (no: the first one
            stops the tenant and is reported as its error, FILE:LINE: what was expected)

  # Replay a minute of disk 1 of an MSR trace at twice its speed, then one blktrace
  # device closed loop at QD 32
  ullstack bench --server HOST:PORT --tenant name=open,trace=hm_1.csv,trace_device=1,from=60s,to=120s,speed=2
  ullstack bench --server HOST:PORT --tenant name=open,trace=sda.txt,trace_device=8:0,qd=32

An LC tenant's SLO IOPS and offered load are split evenly over its connections, so the
server reserves the tenant once. Tenants register in the order given; a tenant the server
refuses is reported with the server's reason and sends nothing. Same --seed, same request
stream."#;

/// Arguments of `ullstack bench` (see [`BENCH_HELP`]).
#[derive(clap::Args, Debug)]
#[command(after_long_help = BENCH_HELP)]
pub struct BenchArgs {
    /// Server own-protocol address, host:port (default 127.0.0.1:10810, the quick start's).
    #[arg(long, short = 's', value_name = "ADDR")]
    server: Option<String>,

    /// Find the server through a fleet's etcd registry (http://HOST:PORT) instead of --server:
    /// the one holding the tenants' reservations (`ullstack place`), else the least-loaded
    /// live server with their volume. Every tenant must resolve to the same server.
    #[arg(long, value_name = "URL", conflicts_with = "server")]
    registry: Option<String>,

    /// Scenario file (TOML): server, duration, ios, warmup, threads, seed and [[tenant]] tables.
    #[arg(long, value_name = "FILE")]
    scenario: Option<PathBuf>,

    /// A tenant, as key=value pairs (repeatable; added after the scenario's tenants).
    /// Without any tenant: name=open,qd=1 (the quick start's open tenant, QD1 4 KB reads).
    #[arg(long = "tenant", short = 't', value_name = "SPEC")]
    tenants: Vec<String>,

    /// Measured run time after the warm-up, e.g. 10s, 500ms, 2m (default 10s unless --ios).
    #[arg(long, value_name = "DURATION")]
    duration: Option<String>,

    /// Stop each tenant after this many requests (with --duration: whichever comes first).
    #[arg(long, value_name = "N")]
    ios: Option<String>,

    /// Warm-up before measuring, e.g. 1s (default 0).
    #[arg(long, value_name = "DURATION")]
    warmup: Option<String>,

    /// Client worker threads (default: available cores, at most 8).
    #[arg(long, value_name = "N")]
    threads: Option<usize>,

    /// Seed of every random stream (addresses, read/write mix, arrivals).
    #[arg(long, value_name = "N")]
    seed: Option<u64>,

    /// Also write the report as JSON to this file.
    #[arg(long, value_name = "FILE")]
    json: Option<PathBuf>,

    /// Do not draw the progress line.
    #[arg(long)]
    no_progress: bool,

    /// TLS with a pre-shared key from this psktool file (`identity:hexkey` lines), for a
    /// server with `[tls] psk_file`.
    #[arg(long, value_name = "FILE", conflicts_with_all = ["tls_ca", "tls_insecure"])]
    tls_psk: Option<PathBuf>,

    /// The PSK identity to use from --tls-psk's file (default: its first line).
    #[arg(long, value_name = "NAME", requires = "tls_psk")]
    tls_psk_identity: Option<String>,

    /// TLS, verifying the server's certificate against the CA certificates in this PEM file
    /// (and the host named in --server).
    #[arg(long, value_name = "FILE", conflicts_with = "tls_insecure")]
    tls_ca: Option<PathBuf>,

    /// TLS without verifying the server's certificate (encrypted, server not authenticated).
    #[arg(long)]
    tls_insecure: bool,
}

pub fn run(args: BenchArgs) -> anyhow::Result<()> {
    let overrides = Overrides {
        scenario: args.scenario,
        tenants: args.tenants,
        server: args.server,
        registry: args.registry.clone(),
        duration: args.duration,
        ios: args.ios,
        warmup: args.warmup,
        threads: args.threads,
        seed: args.seed,
        no_progress: args.no_progress,
        tls_psk: args.tls_psk,
        tls_psk_identity: args.tls_psk_identity,
        tls_ca: args.tls_ca,
        tls_insecure: args.tls_insecure,
    };
    let built = overrides.build()?;
    if let (Some(url), Some(id)) = (&args.registry, &built.registry_server_id) {
        let addr = &built.config.server;
        eprintln!("bench: server {id} at {addr} (from the registry {url})");
    }
    let report = bench::run(&built.config)?;
    print!("{}", report.table());
    if let Some(path) = &args.json {
        std::fs::write(path, report.to_json())
            .with_context(|| format!("cannot write {}", path.display()))?;
    }
    Ok(())
}
