//! Time series: `timeseries.csv`, one row per window of simulated time (`--series-ms N`).
//!
//! ## What it records
//! Summaries say what a run did on average; studies of write-back waves, GC and interference
//! need *when*. With `--series-ms N` a run (device-level or full-system) cuts simulated time
//! into windows of N ms and writes one CSV row as each window closes:
//!
//! ```text
//! t_start_ns, t_end_ns                         the window [start, end)
//! lc_ios, lc_iops, lc_bytes,                   latency-critical I/Os completed in it, their
//! lc_lat_mean_ns, lc_lat_p50_ns, lc_lat_p99_ns,  latency (a fresh HDR histogram per window)
//! lc_lat_p99_9_ns, lc_lat_max_ns
//! tp_… (the same for throughput I/Os)
//! online_requests, online_resp_mean_ns,        online services' requests answered in it (the
//! online_resp_p99_ns                             client got the reply) and their response time
//! dirty_pages, writeback_pages                 host page cache at the window's end
//! lc_pages_dirtied, tp_pages_dirtied,          page-cache pages dirtied / written back in
//! lc_pages_written_back, tp_pages_written_back   the window, by owner class
//! wb_dirty_units, wb_capacity_units            device write buffer (4 KiB units) at the end
//! lc_cache_read_hits, lc_cache_read_misses,    device DRAM cache lookups in the window, by
//! tp_cache_read_hits, tp_cache_read_misses       class
//! lc_cache_lines, tp_cache_lines               DRAM lines holding each class's data, and the
//! lc_wb_dirty_units, tp_wb_dirty_units           part of them in the write buffer, at the end
//! lc_cache_prefetch_hits, …_lines_evicted,     per class in the window: reads served by a
//! lc_wb_units_written_back (and tp_…)            prefetch, lines replaced, dirty units programmed
//! lc_cache_ways, tp_cache_ways                 ways of every set each class may fill at the
//!                                                end (both = all ways when the cache is shared)
//! lc_prefetch_pages, tp_prefetch_pages         each class's prefetch size at the end (ghosts)
//! gc_runs, gc_units_programmed, erases         device GC activity in the window
//! lc_context_switches, tp_context_switches,    context switches in the window, by the class of
//! interrupts                                     the thread switched in, and interrupts
//! cpu_user_ns … cpu_idle_ns                    CPU time per category (`host::Cat`) summed
//!                                              over cores, in the window
//! ```
//!
//! Which I/Os count is what the summary counts, so the rows add up to the run's totals (a test
//! checks it): in a device-level run each job's recorded I/Os (after `ramp_time`), all of the
//! throughput class, with fio's latency (submit call to reap); in a full-system run every
//! application read/write call (each process's `ios`), by the process's class, with its
//! call-to-return latency. Online requests are every online service's (all together: the
//! studies run one per run), counted when the reply reaches the client, so they add up to the
//! services' `requests`. Context switches count the thread switched in by its class (kernel
//! threads: throughput; a kblockd worker: the class of the request it last dispatched); the
//! two add up to the run's `cpu.context_switches`, and `interrupts` to its `cpu.interrupts`.
//! Page-cache, online, context-switch and interrupt columns are 0 in device-level runs (no
//! page cache, no application, no scheduler).
//!
//! ## How it is sampled
//! By simulated time, never wall time: the run loop checks, before it runs an event at time
//! `t`, whether `t` has reached the current window's end, and if so closes the window (and any
//! empty windows up to `t`) from the models' state at that instant — nothing has happened
//! since the last event before the boundary. Sampling only reads counters (the host's CPU
//! accounting is brought up to the boundary, which splits a running burst's accounting in two
//! without changing its end), so a run with series on produces the same `summary.json` as with
//! series off (a test checks it). When series are off the only cost is one branch per event.
//! Memory is bounded: one window of histograms; each row is written when its window closes.
//! The last window ends at the run's end and may be shorter.
//!
//! Worked example: `--series-ms 10` on a 25 ms run gives three rows, [0, 10 ms), [10, 20 ms)
//! and [20, 25 ms); an I/O completing at exactly 10 ms counts in the second; `lc_iops` of a
//! row is `lc_ios × 10⁹ / (t_end_ns − t_start_ns)`.
//!
//! CPU is exact at window boundaries: the full host's scheduler settles every core's accounting
//! to the boundary; the thin host of device-level runs books a burst's CPU when it schedules
//! it (possibly ahead of time) and a polling thread's spin when its completion arrives, so its
//! sample subtracts the part of booked bursts past the boundary and adds the spin up to it.
//! Idle is the window's rest (cores × window − busy); a negative rest stops the run.
//!
//! A line belongs to the class of the command that last put data in it (`device/src/cache.rs`,
//! "Per-class accounting"), so `lc_cache_lines + tp_cache_lines` is the cache's valid lines and
//! `lc_wb_dirty_units + tp_wb_dirty_units = wb_dirty_units`. The ways and prefetch columns show
//! the class split (`cache.partition = "dynamic"`) and ghost prefetch (`cache.prefetch =
//! "ghost"`) at work; the throughput partition's share of the cache is
//! `tp_cache_ways / (lc_cache_ways + tp_cache_ways)` when split.
//!
//! ## What it leaves out
//! The `alone` run of a full-system config writes no series (only the co-run does).

use std::io::Write;

use engine::{IoClass, LatencyHistogram, SimTime};
use host::cpu::{CATS, CAT_COUNT};

/// Counters and gauges the run reads at a window's end. Cumulative fields (`pages_dirtied`,
/// `pages_written_back`, `cache_read_*`, `cache_prefetch_hits`, `cache_lines_evicted`,
/// `wb_units_written_back`, `gc_*`, `erases`, `cpu_ns`) are running totals since the run's
/// start; the series turns them into per-window differences. The rest are gauges.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Sample {
    pub dirty_pages: u64,
    pub writeback_pages: u64,
    /// By `IoClass::index`.
    pub pages_dirtied: [u64; 2],
    pub pages_written_back: [u64; 2],
    pub wb_dirty_units: u64,
    pub wb_capacity_units: u64,
    pub cache_read_hits: [u64; 2],
    pub cache_read_misses: [u64; 2],
    /// Gauges: lines holding each class's data, and those in the write buffer.
    pub cache_lines: [u64; 2],
    pub wb_class_dirty_units: [u64; 2],
    pub cache_prefetch_hits: [u64; 2],
    pub cache_lines_evicted: [u64; 2],
    pub wb_units_written_back: [u64; 2],
    /// Gauges: ways each class may fill, and each class's prefetch size in pages.
    pub cache_ways: [u32; 2],
    pub prefetch_pages: [u32; 2],
    pub gc_runs: u64,
    pub gc_units_programmed: u64,
    pub erases: u64,
    /// Context switches by the class of the thread switched in, and interrupts.
    pub context_switches: [u64; 2],
    pub interrupts: u64,
    /// Busy time per category summed over cores (idle is computed from the window).
    pub cpu_ns: [u64; CAT_COUNT],
}

impl Sample {
    /// Fills the device's part: write buffer, cache lookups, GC.
    pub fn read_device(&mut self, ssd: &device::Ssd) {
        (self.wb_dirty_units, self.wb_capacity_units) = ssd.write_buffer_units();
        let c = ssd.cache_stats();
        for (i, k) in [&c.latency_critical, &c.throughput].into_iter().enumerate() {
            self.cache_read_hits[i] = k.read_hits;
            self.cache_read_misses[i] = k.read_misses;
            self.cache_lines[i] = k.lines;
            self.wb_class_dirty_units[i] = k.dirty_units;
            self.cache_prefetch_hits[i] = k.prefetch_hits;
            self.cache_lines_evicted[i] = k.lines_evicted;
            self.wb_units_written_back[i] = k.units_written_back;
        }
        self.cache_ways = ssd.cache_ways_by_class();
        self.prefetch_pages = ssd.cache_prefetch_pages_by_class();
        let f = ssd.ftl_stats();
        self.gc_runs = f.gc_runs;
        self.gc_units_programmed = f.gc_units_programmed;
        self.erases = f.erases;
    }

    /// Fills the host's part at `at`: page cache and CPU.
    pub fn read_host(&mut self, h: &mut host::Host, at: SimTime) {
        (self.dirty_pages, self.writeback_pages) = h.pagecache_gauges();
        let pc = h.pagecache_counters();
        for (i, k) in [&pc.latency_critical, &pc.throughput]
            .into_iter()
            .enumerate()
        {
            self.pages_dirtied[i] = k.pages_dirtied;
            self.pages_written_back[i] = k.pages_written_back;
        }
        self.cpu_ns = h.cpu_busy_ns(at);
        (self.context_switches, self.interrupts) = h.switches_and_interrupts();
    }
}

#[derive(Default)]
struct ClassWindow {
    ios: u64,
    bytes: u64,
    latency: LatencyHistogram,
}

/// Online requests answered in a window.
#[derive(Default)]
struct OnlineWindow {
    requests: u64,
    response: LatencyHistogram,
}

/// The series of one run: the open window and where rows go.
pub struct Series {
    window_ns: u64,
    start: SimTime,
    end: SimTime,
    cores: u64,
    classes: [ClassWindow; 2],
    online: OnlineWindow,
    prev: Sample,
    out: Box<dyn Write>,
    rows: u64,
}

/// Column names, in order.
pub fn header() -> String {
    let (w, s) = (ClassWindow::default(), Sample::default());
    let mut cols: Vec<String> = vec!["t_start_ns".into(), "t_end_ns".into()];
    for c in ["lc", "tp"] {
        for (name, _) in class_cells(&w, 1) {
            cols.push(format!("{c}_{name}"));
        }
    }
    for (name, _) in online_cells(&OnlineWindow::default()) {
        cols.push(name.into());
    }
    for (name, _) in state_cells(&s, &s) {
        cols.push(name.into());
    }
    for cat in CATS {
        cols.push(format!("cpu_{}_ns", cat.name()));
    }
    cols.join(",")
}

/// One class's cells of a row (named without the `lc_`/`tp_` prefix) for a window of `len_ns`:
/// the one place that says what each column holds, so the header and the rows cannot drift.
fn class_cells(w: &ClassWindow, len_ns: u64) -> [(&'static str, String); 8] {
    let h = &w.latency;
    [
        ("ios", w.ios.to_string()),
        ("iops", format!("{:.3}", w.ios as f64 * 1e9 / len_ns as f64)),
        ("bytes", w.bytes.to_string()),
        ("lat_mean_ns", h.mean_ns().to_string()),
        ("lat_p50_ns", h.quantile_ns(0.50).to_string()),
        ("lat_p99_ns", h.quantile_ns(0.99).to_string()),
        ("lat_p99_9_ns", h.quantile_ns(0.999).to_string()),
        ("lat_max_ns", h.max_ns().to_string()),
    ]
}

/// The online requests' cells of a row.
fn online_cells(w: &OnlineWindow) -> [(&'static str, u64); 3] {
    [
        ("online_requests", w.requests),
        ("online_resp_mean_ns", w.response.mean_ns()),
        ("online_resp_p99_ns", w.response.quantile_ns(0.99)),
    ]
}

/// The page-cache, device and scheduler cells of a row: gauges as sampled at the window's end
/// `s`, cumulative counters as the difference from the previous window's end `p`.
#[rustfmt::skip] // a table: one column a line
fn state_cells(s: &Sample, p: &Sample) -> [(&'static str, u64); 32] {
    let d = since;
    [
        ("dirty_pages", s.dirty_pages),
        ("writeback_pages", s.writeback_pages),
        ("lc_pages_dirtied", d(s.pages_dirtied[0], p.pages_dirtied[0])),
        ("tp_pages_dirtied", d(s.pages_dirtied[1], p.pages_dirtied[1])),
        ("lc_pages_written_back", d(s.pages_written_back[0], p.pages_written_back[0])),
        ("tp_pages_written_back", d(s.pages_written_back[1], p.pages_written_back[1])),
        ("wb_dirty_units", s.wb_dirty_units),
        ("wb_capacity_units", s.wb_capacity_units),
        ("lc_cache_read_hits", d(s.cache_read_hits[0], p.cache_read_hits[0])),
        ("lc_cache_read_misses", d(s.cache_read_misses[0], p.cache_read_misses[0])),
        ("tp_cache_read_hits", d(s.cache_read_hits[1], p.cache_read_hits[1])),
        ("tp_cache_read_misses", d(s.cache_read_misses[1], p.cache_read_misses[1])),
        ("lc_cache_lines", s.cache_lines[0]),
        ("tp_cache_lines", s.cache_lines[1]),
        ("lc_wb_dirty_units", s.wb_class_dirty_units[0]),
        ("tp_wb_dirty_units", s.wb_class_dirty_units[1]),
        ("lc_cache_prefetch_hits", d(s.cache_prefetch_hits[0], p.cache_prefetch_hits[0])),
        ("tp_cache_prefetch_hits", d(s.cache_prefetch_hits[1], p.cache_prefetch_hits[1])),
        ("lc_cache_lines_evicted", d(s.cache_lines_evicted[0], p.cache_lines_evicted[0])),
        ("tp_cache_lines_evicted", d(s.cache_lines_evicted[1], p.cache_lines_evicted[1])),
        ("lc_wb_units_written_back", d(s.wb_units_written_back[0], p.wb_units_written_back[0])),
        ("tp_wb_units_written_back", d(s.wb_units_written_back[1], p.wb_units_written_back[1])),
        ("lc_cache_ways", u64::from(s.cache_ways[0])),
        ("tp_cache_ways", u64::from(s.cache_ways[1])),
        ("lc_prefetch_pages", u64::from(s.prefetch_pages[0])),
        ("tp_prefetch_pages", u64::from(s.prefetch_pages[1])),
        ("gc_runs", d(s.gc_runs, p.gc_runs)),
        ("gc_units_programmed", d(s.gc_units_programmed, p.gc_units_programmed)),
        ("erases", d(s.erases, p.erases)),
        ("lc_context_switches", d(s.context_switches[0], p.context_switches[0])),
        ("tp_context_switches", d(s.context_switches[1], p.context_switches[1])),
        ("interrupts", d(s.interrupts, p.interrupts)),
    ]
}

/// A cumulative counter's growth since the previous sample.
fn since(now: u64, before: u64) -> u64 {
    now.checked_sub(before)
        .expect("cumulative counters never go down")
}

impl Series {
    /// A series of `window_ns` windows over a host of `cores` cores, writing to `out` (the
    /// header first).
    pub fn new(window_ns: u64, cores: u32, mut out: Box<dyn Write>) -> std::io::Result<Series> {
        assert!(window_ns > 0, "a series window must be positive");
        writeln!(out, "{}", header())?;
        Ok(Series {
            window_ns,
            start: SimTime::ZERO,
            end: SimTime(window_ns),
            cores: u64::from(cores),
            classes: Default::default(),
            online: OnlineWindow::default(),
            prev: Sample::default(),
            out,
            rows: 0,
        })
    }

    /// Whether an event at `t` is past the open window (call [`Series::close`] first).
    #[inline]
    pub fn due(&self, t: SimTime) -> bool {
        t >= self.end
    }

    /// End of the open window.
    pub fn window_end(&self) -> SimTime {
        self.end
    }

    /// An I/O of `class` completed in the open window.
    #[inline]
    pub fn record(&mut self, class: IoClass, bytes: u64, latency_ns: u64) {
        let w = &mut self.classes[class.index()];
        w.ios += 1;
        w.bytes += bytes;
        w.latency.record(latency_ns);
    }

    /// An online request was answered (its reply reached the client) in the open window.
    #[inline]
    pub fn record_response(&mut self, response_ns: u64) {
        self.online.requests += 1;
        self.online.response.record(response_ns);
    }

    /// Closes the open window with the state at its end, and opens the next.
    pub fn close(&mut self, sample: &Sample) -> std::io::Result<()> {
        let end = self.end;
        self.write_row(end, sample)?;
        self.start = end;
        self.end = end + self.window_ns;
        Ok(())
    }

    /// Closes the last window at the run's end `at` (if it holds any time) and flushes.
    pub fn finish(mut self, at: SimTime, sample: &Sample) -> std::io::Result<u64> {
        assert!(at < self.end, "windows up to {at} were closed");
        if at > self.start {
            self.write_row(at, sample)?;
        }
        self.out.flush()?;
        Ok(self.rows)
    }

    fn write_row(&mut self, end: SimTime, s: &Sample) -> std::io::Result<()> {
        let len_ns = end - self.start;
        let p = self.prev;
        let mut row = format!("{},{}", self.start.as_ns(), end.as_ns());
        for w in &mut self.classes {
            for (_, cell) in class_cells(w, len_ns) {
                row.push(',');
                row.push_str(&cell);
            }
            *w = ClassWindow::default();
        }
        for (_, v) in online_cells(&self.online) {
            row.push_str(&format!(",{v}"));
        }
        self.online = OnlineWindow::default();
        for (_, v) in state_cells(s, &p) {
            row.push_str(&format!(",{v}"));
        }
        let idle = host::Cat::Idle.index();
        let cpu: Vec<u64> = s
            .cpu_ns
            .iter()
            .zip(&p.cpu_ns)
            .map(|(&now, &before)| since(now, before))
            .collect();
        let busy: u64 = cpu
            .iter()
            .enumerate()
            .filter(|&(i, _)| i != idle)
            .map(|(_, v)| v)
            .sum();
        for (i, v) in cpu.iter().enumerate() {
            let v = if i == idle {
                (self.cores * len_ns).checked_sub(busy).unwrap_or_else(|| {
                    panic!(
                        "window ending at {end}: {busy} ns busy on {} cores in {len_ns} ns",
                        self.cores
                    )
                })
            } else {
                *v
            };
            row.push_str(&format!(",{v}"));
        }
        writeln!(self.out, "{row}")?;
        self.prev = *s;
        self.rows += 1;
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A writer the test can read back.
    #[derive(Clone, Default)]
    struct Shared(std::rc::Rc<std::cell::RefCell<Vec<u8>>>);
    impl Write for Shared {
        fn write(&mut self, b: &[u8]) -> std::io::Result<usize> {
            self.0.borrow_mut().extend_from_slice(b);
            Ok(b.len())
        }
        fn flush(&mut self) -> std::io::Result<()> {
            Ok(())
        }
    }

    /// The essay's worked example: 10 ms windows over 25 ms give three rows, the last 5 ms
    /// long; counters become per-window differences; idle is the window's rest.
    #[test]
    fn windows_close_at_their_boundaries_and_counters_become_differences() {
        let buf = Shared::default();
        let mut s = Series::new(10_000_000, 1, Box::new(buf.clone())).unwrap();
        s.record(IoClass::LatencyCritical, 4096, 12_000);
        assert!(!s.due(SimTime::from_ms(9)));
        assert!(s.due(SimTime::from_ms(10)));
        let mut sample = Sample {
            gc_runs: 2,
            ..Default::default()
        };
        sample.cpu_ns[host::Cat::User.index()] = 4_000_000;
        s.close(&sample).unwrap();
        s.record(IoClass::Throughput, 8192, 30_000);
        sample.gc_runs = 5;
        s.close(&sample).unwrap();
        let rows = s.finish(SimTime::from_ms(25), &sample).unwrap();
        assert_eq!(rows, 3);
        let text = String::from_utf8(buf.0.borrow().clone()).unwrap();
        let lines: Vec<&str> = text.lines().collect();
        let cols: Vec<&str> = lines[0].split(',').collect();
        let get = |row: usize, name: &str| -> String {
            let i = cols.iter().position(|c| *c == name).unwrap();
            lines[row].split(',').nth(i).unwrap().to_string()
        };
        assert_eq!(lines.len(), 4);
        assert_eq!(get(1, "lc_ios"), "1");
        assert_eq!(get(1, "lc_iops"), "100.000");
        assert_eq!(get(1, "lc_lat_mean_ns"), "12000", "the mean is exact");
        assert_eq!(get(2, "lc_ios"), "0");
        assert_eq!(get(2, "tp_bytes"), "8192");
        assert_eq!(get(1, "gc_runs"), "2");
        assert_eq!(get(2, "gc_runs"), "3");
        assert_eq!(get(3, "gc_runs"), "0");
        assert_eq!(get(3, "t_start_ns"), "20000000");
        assert_eq!(get(3, "t_end_ns"), "25000000");
        assert_eq!(get(1, "cpu_user_ns"), "4000000");
        assert_eq!(get(1, "cpu_idle_ns"), "6000000");
        assert_eq!(get(3, "cpu_idle_ns"), "5000000");
        assert!(cols.iter().all(|c| !c.is_empty()));
    }
}
