//! A study's results: the headline figures read back from each run's `summary.json`, and
//! `study.json`.
//!
//! Results are always read from disk, whether the run was simulated now or reused, so a resumed
//! study and a fresh one go through the same code and give the same `study.json`. That file holds,
//! per run, its id, config hash, device, host, job, and the headline numbers of each direction
//! with I/O (`ios`, `iops`, `bytes_per_sec`, `mean_ns`, `p99_ns`, `p99_999_ns`), plus CPU use
//! when there is a figure for it. It holds nothing that depends on wall time, worker count or
//! sharding, so two executions of the same study compare byte for byte.
//!
//! ## CPU use
//! When a run's `summary.json` reports CPU use (an object named `cpu` in the job, at the top
//! level, or under `host`/`sim`, with a `…user…` and a `…kernel…`/`…sys…` field in percent
//! (`_pct`) or nanoseconds (`_ns`)), that is what is reported, `source: "summary"`. Otherwise,
//! for synchronous (depth-1) runs only, it is derived from the thin host's fixed costs, which
//! are all kernel time: a polled thread spins for the whole run (100 % of its core); an
//! interrupt-driven one is busy `submit_ns + isr_ns + wakeup_ns` per I/O, e.g. x86-4 at 69 000
//! IOPS (zssd, QD1 reads): 69 000 × 5.2 µs = 36 % of a core. Those are marked `source: "derived"`.

use std::collections::BTreeMap;
use std::path::Path;

use serde::Serialize;
use serde_json::Value;

use crate::exec::run_dir;
use crate::spec::RunSpec;

/// Headline numbers of one direction (read or write) of a run.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct OpHeadline {
    pub ios: u64,
    pub iops: f64,
    pub bytes_per_sec: f64,
    pub mean_ns: u64,
    pub p99_ns: u64,
    pub p99_999_ns: u64,
}

/// CPU use of a run's thread, percent of one core.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct CpuUse {
    pub kernel_pct: f64,
    pub user_pct: f64,
    /// `summary` (reported by the simulator) or `derived` (from the thin host's costs).
    pub source: &'static str,
}

/// One run's entry in `study.json`.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct RunResult {
    pub id: String,
    pub config_hash: String,
    pub device: String,
    pub host: String,
    pub job: String,
    pub simulated_ns: u64,
    pub read: Option<OpHeadline>,
    pub write: Option<OpHeadline>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub cpu: Option<CpuUse>,
}

/// Every run's result, by id.
pub type Results = BTreeMap<String, RunResult>;

/// Reads the results of `specs` from their folders under `out`.
pub fn load(out: &Path, specs: &[RunSpec]) -> Result<Results, String> {
    let mut results = Results::new();
    for spec in specs {
        let path = run_dir(out, &spec.id).join("summary.json");
        let text = std::fs::read_to_string(&path)
            .map_err(|e| format!("reading {}: {e}", path.display()))?;
        let summary: Value = serde_json::from_str(&text)
            .map_err(|e| format!("{}: not JSON: {e}", path.display()))?;
        let r = headline(spec, &summary).map_err(|e| format!("{}: {e}", path.display()))?;
        results.insert(spec.id.clone(), r);
    }
    Ok(results)
}

fn headline(spec: &RunSpec, s: &Value) -> Result<RunResult, String> {
    let jobs = s["jobs"].as_array().ok_or("no `jobs` array")?;
    let [job] = jobs.as_slice() else {
        return Err(format!(
            "a study run has exactly one job; this summary has {}",
            jobs.len()
        ));
    };
    let simulated_ns = s["sim"]["simulated_ns"]
        .as_u64()
        .ok_or("no sim.simulated_ns")?;
    let read = op(&job["read"])?;
    let write = op(&job["write"])?;
    let cpu = reported_cpu(s, job, simulated_ns).or_else(|| derived_cpu(spec, &read, &write));
    Ok(RunResult {
        id: spec.id.clone(),
        config_hash: spec.config_hash(),
        device: spec.device.clone(),
        host: spec.host.clone(),
        job: job["name"].as_str().unwrap_or("").to_string(),
        simulated_ns,
        read,
        write,
        cpu,
    })
}

fn op(v: &Value) -> Result<Option<OpHeadline>, String> {
    let ios = v["ios"].as_u64().ok_or("an op without `ios`")?;
    if ios == 0 {
        return Ok(None);
    }
    let l = &v["latency_ns"];
    let u = |x: &Value, name: &str| x.as_u64().ok_or(format!("no latency_ns.{name}"));
    Ok(Some(OpHeadline {
        ios,
        iops: v["iops"].as_f64().ok_or("no iops")?,
        bytes_per_sec: v["bytes_per_sec"].as_f64().ok_or("no bytes_per_sec")?,
        mean_ns: u(&l["mean"], "mean")?,
        p99_ns: u(&l["p99"], "p99")?,
        p99_999_ns: u(&l["p99_999"], "p99_999")?,
    }))
}

fn round3(x: f64) -> f64 {
    (x * 1000.0).round() / 1000.0
}

/// CPU use as the summary reports it, if it does (see the module essay for what is looked for).
fn reported_cpu(s: &Value, job: &Value, simulated_ns: u64) -> Option<CpuUse> {
    let candidates = [&job["cpu"], &s["cpu"], &s["host"]["cpu"], &s["sim"]["cpu"]];
    let obj = candidates.into_iter().find_map(|v| v.as_object())?;
    let pct = |want: &dyn Fn(&str) -> bool| -> Option<f64> {
        obj.iter().find_map(|(k, v)| {
            let k = k.to_ascii_lowercase();
            if !want(&k) {
                return None;
            }
            let x = v.as_f64()?;
            if k.ends_with("_ns") && simulated_ns > 0 {
                Some(100.0 * x / simulated_ns as f64)
            } else if k.ends_with("_pct") || k.ends_with("percent") {
                Some(x)
            } else {
                None
            }
        })
    };
    let kernel = pct(&|k| k.contains("kernel") || k.contains("sys"))?;
    let user = pct(&|k| k.contains("user")).unwrap_or(0.0);
    Some(CpuUse {
        kernel_pct: round3(kernel),
        user_pct: round3(user),
        source: "summary",
    })
}

/// CPU use of a synchronous run from the thin host's fixed costs (module essay).
fn derived_cpu(
    spec: &RunSpec,
    read: &Option<OpHeadline>,
    write: &Option<OpHeadline>,
) -> Option<CpuUse> {
    let jobs = workload::JobFile::parse_fio(&spec.job_fio, &spec.id).ok()?;
    let [job] = jobs.jobs.as_slice() else {
        return None;
    };
    if job.engine != workload::IoEngine::Sync {
        return None;
    }
    let costs = sim::HostCosts::preset(&spec.host).ok()?;
    let polled = job.completion == workload::Completion::Polled;
    let iops: f64 = [read, write]
        .iter()
        .filter_map(|o| o.as_ref())
        .map(|o| o.iops)
        .sum();
    let kernel = if polled {
        100.0
    } else {
        let per_io_ns = (costs.submit_ns + costs.isr_ns + costs.wakeup_ns) as f64;
        (100.0 * iops * per_io_ns / 1e9).min(100.0)
    };
    Some(CpuUse {
        kernel_pct: round3(kernel),
        user_pct: 0.0,
        source: "derived",
    })
}

/// `study.json`: what was run and its headline numbers.
#[derive(Debug, Serialize)]
pub struct StudyJson<'a> {
    pub study: &'a str,
    pub version: u32,
    pub size: &'a str,
    pub seed: u64,
    pub runs_total: usize,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub shard: Option<ShardInfo>,
    pub runs: Vec<&'a RunResult>,
}

/// Which part of a study a sharded execution holds: runs `index`, `index + count`, …
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, serde::Deserialize)]
pub struct ShardInfo {
    pub index: usize,
    pub count: usize,
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn spec(job_fio: &str) -> RunSpec {
        RunSpec {
            id: "r".into(),
            device: "zssd".into(),
            host: "x86-4".into(),
            job_fio: job_fio.into(),
            seed: 1,
        }
    }

    fn summary(cpu: Option<Value>) -> Value {
        let lat = json!({"mean": 10_000, "p99": 12_000, "p99_999": 20_000});
        let mut job = json!({
            "name": "j",
            "read": {"ios": 1000, "iops": 100000.0, "bytes_per_sec": 4.096e8, "latency_ns": lat},
            "write": {"ios": 0, "iops": 0.0, "bytes_per_sec": 0.0, "latency_ns": lat},
        });
        if let Some(c) = cpu {
            job["cpu"] = c;
        }
        json!({"sim": {"simulated_ns": 10_000_000}, "jobs": [job]})
    }

    #[test]
    fn a_cpu_field_in_the_summary_is_used_when_present() {
        let s = summary(Some(json!({"kernel_ns": 2_500_000, "user_ns": 500_000})));
        let r = headline(&spec("[j]\nioengine=pvsync2\n"), &s).unwrap();
        let cpu = r.cpu.unwrap();
        assert_eq!(
            (cpu.kernel_pct, cpu.user_pct, cpu.source),
            (25.0, 5.0, "summary")
        );
        let s = summary(Some(json!({"sys_pct": 40.0, "user_pct": 1.5})));
        let cpu = headline(&spec("[j]\n"), &s).unwrap().cpu.unwrap();
        assert_eq!(
            (cpu.kernel_pct, cpu.user_pct, cpu.source),
            (40.0, 1.5, "summary")
        );
    }

    #[test]
    fn without_a_cpu_field_sync_runs_derive_it_and_async_runs_have_none() {
        // 100 000 IOPS × (1.5 + 1.0 + 2.7) µs = 52 % of a core with interrupts.
        let irq = headline(&spec("[j]\nioengine=pvsync2\n"), &summary(None)).unwrap();
        let cpu = irq.cpu.unwrap();
        assert_eq!((cpu.kernel_pct, cpu.source), (52.0, "derived"));
        let poll = headline(&spec("[j]\nioengine=pvsync2\nhipri\n"), &summary(None)).unwrap();
        assert_eq!(poll.cpu.unwrap().kernel_pct, 100.0);
        let aio = headline(&spec("[j]\nioengine=libaio\n"), &summary(None)).unwrap();
        assert_eq!(aio.cpu, None);
        assert_eq!(aio.write, None, "a direction without I/O has no headline");
        assert_eq!(aio.read.unwrap().p99_999_ns, 20_000);
    }

    #[test]
    fn a_summary_with_two_jobs_is_refused() {
        let mut s = summary(None);
        let job = s["jobs"][0].clone();
        s["jobs"].as_array_mut().unwrap().push(job);
        let e = headline(&spec("[j]\n"), &s).unwrap_err();
        assert!(e.contains("exactly one job") && e.contains('2'), "{e}");
    }
}
