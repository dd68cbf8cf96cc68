//! The parsers' tests: units, the reflex tenants, expansion, errors, trace keys, files.

use super::*;

#[test]
fn units_parse() {
    // One grammar for the tree (`engine::units`): KB is SI, KiB and k are IEC.
    let size = |v: &str| parse_tenant(&format!("name=t,size={v}")).map(|t| t[0].size_bytes);
    assert_eq!(size("4k").unwrap(), 4096);
    assert_eq!(size("4KiB").unwrap(), 4096);
    assert_eq!(size("4KB").unwrap(), 4000);
    let e = size("4x").unwrap_err().to_string();
    assert!(
        e.contains("size `4x`: expected a whole number of bytes"),
        "{e}"
    );
    let p95 = |v: &str| match parse_tenant(&format!("name=t,class=lc,iops=1k,p95={v}")) {
        Ok(t) => match t[0].class {
            qos::TenantSpec::LatencyCritical(slo) => Ok((slo.p95_read_latency_ns, slo.iops)),
            qos::TenantSpec::BestEffort(_) => unreachable!("class=lc"),
        },
        Err(e) => Err(e.to_string()),
    };
    assert_eq!(p95("500us"), Ok((500_000, 1_000)));
    assert_eq!(p95("1.5ms"), Ok((1_500_000, 1_000)));
    assert!(p95("fast")
        .unwrap_err()
        .contains("duration `fast`: expected"));
}

#[test]
fn reflex_tenant_a_parses() {
    let t =
        parse_tenant("name=A,class=lc,iops=120000,read=100,p95=500us,size=4k,secret=x").unwrap();
    assert_eq!(t.len(), 1);
    let t = &t[0];
    assert_eq!(
        t.class,
        qos::TenantSpec::LatencyCritical(qos::LcSlo {
            p95_read_latency_ns: 500_000,
            iops: 120_000,
            read_pct: 100,
            request_bytes: 4096,
        })
    );
    assert_eq!(t.load, Load::Open { iops: 120_000 });
    assert_eq!(
        (t.read_pct, t.size_bytes, t.secret.as_str()),
        (100, 4096, "x")
    );
    // Scenario 2: B registers 70K but offers 45K.
    let b = parse_tenant("name=B,class=lc,iops=70k,rate=45k,read=80,p95=500us").unwrap();
    assert_eq!(b[0].load, Load::Open { iops: 45_000 });
    let c = parse_tenant("name=C,read=95").unwrap();
    assert_eq!(
        c[0].class,
        qos::TenantSpec::BestEffort(qos::BeSpec::default())
    );
    assert_eq!(
        c[0].load,
        Load::Closed {
            queue_depth: BE_DEFAULT_QUEUE_DEPTH
        }
    );
}

#[test]
fn count_expands_and_zipf_takes_theta() {
    let t = parse_tenant("name=t,count=3,pattern=zipf:1.2,rate=100,size=1k").unwrap();
    assert_eq!(
        t.iter().map(|t| t.name.as_str()).collect::<Vec<_>>(),
        ["t-0", "t-1", "t-2"]
    );
    assert_eq!(t[0].pattern, Pattern::Zipf { theta_milli: 1200 });
    assert_eq!(t[0].size_bytes, 1024);
}

#[test]
fn bad_specs_name_the_value_and_the_expectation() {
    let cases = [
        ("name=A,class=lc,iops=1000", "p95"),
        ("name=A,class=xx", "\"xx\": expected lc or be"),
        ("name=A,read=150", "read=150"),
        ("name=A,qd=4,rate=10", "exclude"),
        ("name=A,iops=10", "class=be has no SLO"),
        ("name=A,size=4q", "size `4q`: expected a whole number"),
        ("name=A,colour=red", "unknown key \"colour\""),
        ("class=be", "missing name"),
        ("name=A,pattern=hot", "pattern=\"hot\""),
        ("name=A,qd", "not key=value"),
    ];
    for (spec, needle) in cases {
        let e = parse_tenant(spec).unwrap_err().to_string();
        assert!(e.contains(needle), "{spec}: {e}");
    }
}

#[test]
fn trace_tenants_take_the_replay_options() {
    assert_eq!(
        tenant::TRACE_ONLY_KEYS,
        [
            "speed",
            "trace_format",
            "trace_device",
            "from",
            "to",
            "skip_bad_lines"
        ]
    );
    use workload::trace::{BadLines, TraceFormat};
    let t = parse_tenant(
        "name=T,trace=hm_1.csv,trace_format=msr,trace_device=8:16,from=1.5s,to=250000ms,skip_bad_lines=yes,qd=8",
    )
    .unwrap();
    let load = t[0].trace.as_ref().unwrap();
    assert_eq!(
        load,
        &TraceLoad {
            path: "hm_1.csv".into(),
            format: Some(TraceFormat::Msr),
            device: Some(8 << 20 | 16),
            from_ns: 1_500_000_000,
            to_ns: Some(250_000_000_000),
            bad_lines: BadLines::Skip,
        }
    );
    assert_eq!(t[0].load, Load::Closed { queue_depth: 8 });
    let plain = parse_tenant("name=T,trace=t.csv,trace_device=3").unwrap();
    assert_eq!(plain[0].trace.as_ref().unwrap().device, Some(3));
    assert_eq!(plain[0].trace.as_ref().unwrap().bad_lines, BadLines::Fail);
    // A scenario file may write MAJ,MIN too (no comma splitting there).
    let s = parse_scenario(
        "[[tenant]]\nname = \"T\"\ntrace = \"t.txt\"\ntrace_device = \"8,0\"\nskip_bad_lines = true\n",
        "s.toml",
    )
    .unwrap();
    let load = s.tenants[0].trace.as_ref().unwrap();
    assert_eq!(
        (load.device, load.bad_lines),
        (Some(8 << 20), BadLines::Skip)
    );
    let cases = [
        (
            "name=T,trace=t,trace_format=iolog",
            "trace_format=\"iolog\": expected one of blkparse",
        ),
        (
            "name=T,trace=t,trace_device=sda",
            "trace_device=\"sda\": expected a device number",
        ),
        (
            "name=T,trace=t,from=soon",
            "from: duration `soon`: expected a number with an optional unit",
        ),
        ("name=T,trace=t,to=x", "to: duration `x`: expected"),
        (
            "name=T,trace=t,from=2s,to=1s",
            "to=\"1s\": expected a time after from=\"2s\"",
        ),
        (
            "name=T,trace=t,skip_bad_lines=maybe",
            "skip_bad_lines=\"maybe\": expected yes or no",
        ),
        ("name=T,from=1s", "from= needs trace=FILE"),
        ("name=T,trace_format=msr", "trace_format= needs trace=FILE"),
        ("name=T,speed=2", "speed= needs trace=FILE"),
        ("name=T,trace=", "trace=\"\": expected a trace file"),
    ];
    for (spec, needle) in cases {
        let e = parse_tenant(spec).unwrap_err().to_string();
        assert!(e.contains(needle), "{spec}: {e}");
    }
}

#[test]
fn scenario_files_parse_and_reject_unknown_keys() {
    let s = parse_scenario(
        r#"
server = "127.0.0.1:7000"
duration = "5s"
warmup = "500ms"
threads = 2
seed = 9
[[tenant]]
name = "A"
class = "lc"
iops = 120000
p95 = "500us"
[[tenant]]
name = "C"
read = 95
fua = true
"#,
        "s.toml",
    )
    .unwrap();
    assert_eq!(s.server.as_deref(), Some("127.0.0.1:7000"));
    assert_eq!(s.duration_ns, Some(5_000_000_000));
    assert_eq!(s.warmup_ns, Some(500_000_000));
    assert_eq!(s.tenants.len(), 2);
    assert_eq!(s.tenants[1].write_mode, WriteMode::Fua);
    let e = parse_scenario("durration = \"5s\"", "s.toml").unwrap_err();
    assert!(e.to_string().contains("durration"), "{e}");
    let e = parse_scenario("[[tenant]]\nname = \"A\"\nrate = 0\n", "s.toml").unwrap_err();
    assert!(e.to_string().contains("rate=0"), "{e}");
}

/// A tenant's results keep the JSON spelling their readers know: the simulator's with
/// `read_pct` and `size_bytes`, a real run's (the `reflex` study's `study.json`) with
/// `send_lag_ns_p99` and `errors` last, the class as `lc` / `be`.
#[test]
fn tenant_results_keep_their_json_spelling() {
    let sim = TenantResult {
        name: "A".into(),
        class: TenantClass::LatencyCritical,
        slo_p95_read_latency_ns: Some(500_000),
        slo_iops: Some(1_000),
        read_pct: Some(80),
        size_bytes: Some(4096),
        reads: 8,
        writes: 2,
        iops: 1000.5,
        read_latency_ns_p50: 1,
        read_latency_ns_p95: 2,
        read_latency_ns_p99: 3,
        read_latency_ns_mean: 4,
        write_latency_ns_p95: 5,
        write_latency_ns_mean: 6,
        tokens_per_sec: 2.5,
        slo_met: Some(true),
        client: None,
    };
    assert_eq!(
        serde_json::to_string(&sim).expect("json"),
        r#"{"name":"A","class":"lc","slo_p95_read_latency_ns":500000,"slo_iops":1000,"read_pct":80,"size_bytes":4096,"reads":8,"writes":2,"iops":1000.5,"read_latency_ns_p50":1,"read_latency_ns_p95":2,"read_latency_ns_p99":3,"read_latency_ns_mean":4,"write_latency_ns_p95":5,"write_latency_ns_mean":6,"tokens_per_sec":2.5,"slo_met":true}"#
    );
    let real = TenantResult {
        class: TenantClass::BestEffort,
        slo_p95_read_latency_ns: None,
        slo_iops: None,
        read_pct: None,
        size_bytes: None,
        slo_met: None,
        client: Some(ClientSide {
            send_lag_ns_p99: None,
            errors: 7,
        }),
        ..sim
    };
    assert_eq!(
        serde_json::to_string(&real).expect("json"),
        r#"{"name":"A","class":"be","slo_p95_read_latency_ns":null,"slo_iops":null,"reads":8,"writes":2,"iops":1000.5,"read_latency_ns_p50":1,"read_latency_ns_p95":2,"read_latency_ns_p99":3,"read_latency_ns_mean":4,"write_latency_ns_p95":5,"write_latency_ns_mean":6,"tokens_per_sec":2.5,"slo_met":null,"send_lag_ns_p99":null,"errors":7}"#
    );
}
