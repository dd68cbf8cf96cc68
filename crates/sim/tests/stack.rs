//! Named stacks (`--stack`): every stack parses onto a system file, sets exactly the switches
//! it lists, and a run's summary names the stack and those switches.

use std::path::Path;

use sim::stack;
use sim::system::{run, SystemConfig};
use sim::Silent;

/// A short write-back co-run on the FastDrain study's host and device (buffer flushed only
/// when full), ungzip on eight threads so that 30 ms write back (its profile runs GNU gzip's
/// one thread).
const TINY: &str = "
seed = 2
duration_ms = 30
[host]
preset = \"arm8-4g\"
[device]
preset = \"nvme-tlc\"
[device.cache]
flush = \"on-full\"
[[process]]
profile = \"apache-upload\"
[[process]]
profile = \"ungzip\"
threads = 8
";

/// The value at dotted `path` of `table`.
fn lookup<'a>(table: &'a toml::Table, path: &str) -> &'a toml::Value {
    let mut parts = path.split('.');
    let first = parts.next().unwrap();
    parts.fold(&table[first], |v, p| &v[p])
}

#[test]
fn each_stack_parses_and_its_summary_names_its_switches() {
    for s in stack::all() {
        let cfg = SystemConfig::parse_with_stack(TINY, "tiny.toml", Path::new("."), Some(s))
            .unwrap_or_else(|e| panic!("stack {}: {e}", s.name));
        let host = toml::Table::try_from(&cfg.host).unwrap();
        let device = toml::Table::try_from(&cfg.device).unwrap();
        for (key, text) in s.settings() {
            let want: toml::Table = toml::from_str(&format!("v = {text}")).unwrap();
            let got = match key.split_once('.').unwrap() {
                ("host", rest) => lookup(&host, rest),
                (_, rest) => lookup(&device, rest),
            };
            assert_eq!(got, &want["v"], "stack {}: {key}", s.name);
        }
        let summary = run(&cfg, &mut Silent).unwrap();
        let table = summary.table();
        assert!(
            table.contains(&format!("stack {}:", s.name)),
            "{}: {table}",
            s.name
        );
        for (key, text) in s.settings() {
            assert!(
                table.contains(&format!("{key} = {text}")),
                "{}: {key}: {table}",
                s.name
            );
        }
        let json: serde_json::Value = serde_json::from_str(&summary.to_json()).unwrap();
        assert_eq!(json["stack"]["name"], s.name);
        assert_eq!(
            json["stack"]["switches"].as_array().unwrap().len(),
            s.settings().len()
        );
    }
}

#[test]
fn a_key_the_file_sets_differently_is_an_error_naming_both() {
    let text = TINY.replace(
        "[device.cache]",
        "[device.ftl]\nalloc = \"lsb-skip\"\n[device.cache]",
    );
    let text = text.as_str();
    let fd = stack::find("fd").unwrap();
    let e = SystemConfig::parse_with_stack(text, "tiny.toml", Path::new("."), Some(fd))
        .unwrap_err()
        .to_string();
    assert!(
        e.contains("device.ftl.alloc = \"latency-aware\"")
            && e.contains("device.ftl.alloc = \"lsb-skip\"")
            && e.contains("`fd`"),
        "{e}"
    );
    // Without a stack the file runs as written.
    SystemConfig::parse(text, "tiny.toml", Path::new(".")).unwrap();
}

/// Under `fd-buf` every write-back wave the host starts reaches the device as one hint: the
/// device reads as many hints as the flusher started waves, announcing the pages the host
/// counted (`fastdrain.rs` checks the order and that the count is what the waves wrote).
#[test]
fn every_write_back_wave_reaches_the_device_as_a_hint() {
    let text = TINY.replace("duration_ms = 30", "duration_ms = 400");
    let fd_buf = stack::find("fd-buf").unwrap();
    let cfg =
        SystemConfig::parse_with_stack(&text, "tiny.toml", Path::new("."), Some(fd_buf)).unwrap();
    let s = run(&cfg, &mut Silent).unwrap();
    let waves = s.run.host.pagecache.writeback_waves;
    let drain = s
        .run
        .device
        .drain
        .as_ref()
        .expect("fastdrain reports its counters");
    assert!(waves > 0, "the co-run started no write-back wave");
    assert_eq!(drain.hints, waves);
    // The pages the device was told are the pages the host's hints counted.
    let host = &s.run.host.pagecache;
    assert!(host.writeback_hinted_pages > waves, "{host:?}");
    assert_eq!(drain.hinted_pages, host.writeback_hinted_pages);
    let vanilla = SystemConfig::parse(&text, "tiny.toml", Path::new(".")).unwrap();
    let v = run(&vanilla, &mut Silent).unwrap();
    assert!(
        v.run.device.drain.is_none(),
        "vanilla's summary keeps its shape"
    );
}
