//! The full-system run: host and device advanced in lock-step.
//!
//! The host model (crate `host`) and the SSD model (crate `device`) each expose two clocks —
//! "when is your next event" and "run your next event / advance to t". The loop always advances
//! whichever is earlier (the device on ties, so a completion posted at t is seen by host work
//! at t). Host work may issue NVMe commands: each is submitted to the device at the time its
//! doorbell rang; device work may post completions: each is delivered to the host, which
//! schedules its arrival (and the interrupt, or the poller's wake-up) at the completion's time.
//! Neither model ever sees time go backwards, and nothing in the loop allocates in steady state.
//!
//! The device usually has several events between two of the host's (a read's fetch, flash
//! sense, transfer and completion), and only a completion can give the host an earlier event
//! than the one it has: so, unless a time series samples between the steps, one
//! `Ssd::advance_until_completion` runs the device's steps up to the host's next event and
//! stops after the first that posts a completion, and the loop turns once per completion rather
//! than once per device event, with the same events in the same order. The host's events
//! likewise run back to back up to the device's next event, until one issues a command.
//!
//! The adapter between the two message types lives here: `HostCommand` → `NvmeCommand` (the
//! class goes into the command's reserved field; a write-back wave hint becomes
//! `Hint::WritebackWave`), `Completion` → `DeviceCqe`.

use std::time::Instant;

use device::config::Arbitration;
use device::{Completion, DeviceOptions, Hint, NvmeCommand, SqPriority, Ssd, Status};
use engine::SimTime;
use host::{DeviceCqe, Host, HostCommand, HostReport};

use crate::device_run::Progress;
use crate::series::{Sample, Series};
use crate::system::config::SystemConfig;

#[derive(Debug, thiserror::Error)]
pub enum SystemRunError {
    #[error(transparent)]
    Device(#[from] device::config::ConfigError),
    #[error(transparent)]
    Host(#[from] host::HostError),
    #[error("device refused command {cid} on SQ {sqid}: {reason}")]
    Submit { cid: u32, sqid: u16, reason: String },
    #[error("run ended with commands still in the device: {0}")]
    Leak(String),
    #[error("writing the time series: {0}")]
    Series(std::io::Error),
}

/// Where a run writes its time series: windows of `window_ns`, rows to `out`.
pub struct SeriesOut {
    pub window_ns: u64,
    pub out: Box<dyn std::io::Write>,
}

/// What one system run produced.
pub struct SystemRunResult {
    pub host: HostReport,
    pub device: device::DeviceStats,
    pub events: u64,
    pub wall_ns: u64,
}

/// Runs `cfg` (its processes as given; the `alone` comparison is the caller's business).
pub fn run_system(
    cfg: &SystemConfig,
    progress: &mut dyn Progress,
) -> Result<SystemRunResult, SystemRunError> {
    run_system_with_series(cfg, progress, None)
}

/// The state the time series reads at a window's end `at`.
fn sample(host: &mut Host, ssd: &Ssd, at: SimTime) -> Sample {
    let mut s = Sample::default();
    s.read_device(ssd);
    s.read_host(host, at);
    s
}

/// [`run_system`], writing a time series (`series`) as it goes.
pub fn run_system_with_series(
    cfg: &SystemConfig,
    progress: &mut dyn Progress,
    series: Option<SeriesOut>,
) -> Result<SystemRunResult, SystemRunError> {
    let wall = Instant::now();
    let mut ssd = Ssd::with_seed(&cfg.device, DeviceOptions { integrity: false }, cfg.seed)?;
    let mut host = Host::new(
        &cfg.host,
        cfg.processes.clone(),
        cfg.seed,
        cfg.duration,
        ssd.capacity_bytes(),
    )?;
    if host.strict_priority() {
        ssd.set_arbitration(Arbitration::StrictPriority);
    }
    for qp in host.queue_pairs() {
        let priority = match qp.priority {
            host::SqPriority::Urgent => SqPriority::Urgent,
            host::SqPriority::Medium => SqPriority::Medium,
        };
        ssd.create_queue_pair(qp.sqid, qp.cqid, qp.depth, priority);
        if !qp.interrupts {
            ssd.set_interrupts(qp.cqid, false);
        }
    }
    let mut series = match series {
        Some(SeriesOut { window_ns, out }) => {
            host.enable_io_log();
            host.enable_response_log();
            Some(Series::new(window_ns, host.cores(), out).map_err(SystemRunError::Series)?)
        }
        None => None,
    };
    let mut cqes: Vec<Completion> = Vec::with_capacity(64);
    let mut cmds: Vec<HostCommand> = Vec::with_capacity(64);
    let mut iterations = 0u64;
    let mut last_report_ms = 0u128;
    loop {
        let td = ssd.next_event_time();
        let th = host.next_event_time();
        if let Some(s) = &mut series {
            // A window is sampled when the next event is past its end. A device event past the
            // host's end (its clock and the run's duration), with no host event pending, may
            // be the device draining its buffer after the run's last I/O: sampling the host
            // there would account its cores beyond where `Host::finish` ends them. Such
            // windows are closed by the host's next event, or after the loop up to the end;
            // their device counters then include that drain (the totals still add up).
            let host_end = host.now().max(cfg.duration);
            let next = match (td, th) {
                (Some(d), None) if d > host_end => None,
                _ => td.into_iter().chain(th).min(),
            };
            if let Some(t) = next {
                while s.due(t) {
                    let at = s.window_end();
                    s.close(&sample(&mut host, &ssd, at))
                        .map_err(SystemRunError::Series)?;
                }
            }
        }
        match (td, th) {
            (None, None) => break,
            (Some(d), h) if h.is_none_or(|h| d <= h) => {
                if series.is_none() {
                    // The device's steps up to the host's next event, until one posts a
                    // completion: what one step per iteration does (the device goes first at
                    // equal times, and only a completion can give the host an earlier event),
                    // without the loop between the steps.
                    ssd.advance_until_completion(h.unwrap_or(SimTime::MAX), &mut cqes)
                        .expect("the device had an event due");
                } else {
                    // Windows close between steps: one step at a time.
                    ssd.advance_to(d, &mut cqes);
                }
                for c in cqes.drain(..) {
                    host.deliver(DeviceCqe {
                        at: c.at,
                        cqid: c.cqid,
                        cid: c.cid,
                        success: c.status == Status::Success,
                        interrupt: c.interrupt,
                        write_buffer_pct: c.write_buffer_pct,
                    });
                }
            }
            _ => {
                // The host's events up to the device's next, until one issues a command (its
                // doorbell may give the device an earlier event): what one event per turn does
                // (the device goes first at equal times), without the loop between them.
                loop {
                    host.step();
                    host.take_commands(&mut cmds);
                    if let Some(s) = &mut series {
                        host.drain_io_log(|class, bytes, latency| s.record(class, bytes, latency));
                        host.drain_response_log(|latency| s.record_response(latency));
                        // Windows close between events: one event at a time.
                        break;
                    }
                    let host_first = match (host.next_event_time(), td) {
                        (Some(h), Some(d)) => h < d,
                        (h, None) => h.is_some(),
                        (None, Some(_)) => false,
                    };
                    if !cmds.is_empty() || !host_first {
                        break;
                    }
                }
                for c in cmds.drain(..) {
                    let cmd = NvmeCommand {
                        cid: c.cid,
                        op: c.op,
                        slba: c.slba,
                        sectors: c.sectors,
                        class: c.class,
                        hint: if c.wave_pages > 0 {
                            Hint::WritebackWave {
                                pages: c.wave_pages,
                            }
                        } else {
                            Hint::None
                        },
                        version: 0,
                    };
                    ssd.submit(c.at, c.sqid, cmd)
                        .map_err(|e| SystemRunError::Submit {
                            cid: c.cid,
                            sqid: c.sqid,
                            reason: e.to_string(),
                        })?;
                }
            }
        }
        iterations += 1;
        if iterations & 0xFFFF == 0 {
            let ms = wall.elapsed().as_millis();
            if ms >= 2_000 && ms - last_report_ms >= 200 {
                last_report_ms = ms;
                let now = td.or(th).map_or(0, |t| t.as_ns());
                progress.update(now, host.commands_sent());
            }
        }
    }
    progress.finish();
    if ssd.in_flight() != 0 {
        return Err(SystemRunError::Leak(ssd.pending_state()));
    }
    let device_events = ssd.events_processed();
    if let Some(mut s) = series {
        // The run ends at its duration, or later if work drained past it (as `Host::finish`).
        let end = host.now().max(cfg.duration);
        while s.due(end) {
            let at = s.window_end();
            s.close(&sample(&mut host, &ssd, at))
                .map_err(SystemRunError::Series)?;
        }
        let last = sample(&mut host, &ssd, end);
        s.finish(end, &last).map_err(SystemRunError::Series)?;
    }
    let host_report = host.finish()?;
    let events = device_events + host_report.events;
    Ok(SystemRunResult {
        host: host_report,
        device: ssd.stats(),
        events,
        wall_ns: wall.elapsed().as_nanos() as u64,
    })
}
