//! The study's run list: every stack comparison (service x partner x stack, per replicate),
//! the cache sensitivity runs, and the load-latency sweep ([`super::knee`]), in a fixed order.

use super::{
    cache_run_id, duration_ms, knee, partners, replicate_id, series_ms, ALONE, CACHES,
    CACHE_SERVICE, DETAIL_OFFLINE, DEVICE, HOST, OFFLINE, ONLINE, SERIES_OFFLINE, STACKS,
};
use crate::plan::Plan;
use crate::spec::{RunSpec, SystemFile, SystemRun};

/// Every run of the study, in a fixed order: the stack comparison, then the cache sensitivity.
pub fn runs(plan: &Plan) -> Vec<RunSpec> {
    let (size, seed) = (plan.size, plan.seed);
    let system = |id: String, text: String, stack: &str, series: bool, seed: u64| RunSpec {
        device_keys: String::new(),
        id,
        device: DEVICE.to_string(),
        host: HOST.to_string(),
        job_fio: text,
        seed,
        system: Some(SystemRun {
            stack: stack.to_string(),
            series_ms: if series { series_ms(size) } else { 0 },
        }),
    };
    let mut out = Vec::new();
    for r in 0..plan.replicates {
        for stack in STACKS {
            for online in ONLINE {
                for partner in partners() {
                    let series = r == 0
                        && online == CACHE_SERVICE
                        && (partner == SERIES_OFFLINE || partner == DETAIL_OFFLINE);
                    out.push(system(
                        replicate_id(stack, online, partner, r),
                        system_toml(online, partner, seed + r, duration_ms(size), None),
                        stack,
                        series,
                        seed + r,
                    ));
                }
            }
        }
    }
    for (cache, keys) in CACHES {
        for offline in OFFLINE {
            out.push(system(
                cache_run_id(cache, offline),
                system_toml(CACHE_SERVICE, offline, seed, duration_ms(size), Some(keys)),
                "vanilla",
                false,
                seed,
            ));
        }
    }
    out.extend(knee::runs(size, seed));
    out
}

/// The system file of one run (the stack is applied by the run, not written here).
fn system_toml(
    online: &str,
    partner: &str,
    seed: u64,
    duration_ms: u64,
    cache_keys: Option<&str>,
) -> String {
    let mut file = SystemFile::new(seed, duration_ms, HOST);
    if cache_keys.is_some() {
        file = file.key("attr = \"on\"");
    }
    file = file.device(DEVICE);
    if let Some(keys) = cache_keys {
        file = file.table("device.cache").raw(keys);
    }
    file = file.process(online);
    if partner != ALONE {
        file = file.process(partner);
    }
    file.finish()
}
