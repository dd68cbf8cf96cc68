//! README's figures stay true: a change to the models that moves one fails here until README is
//! updated with what the command now prints.
//!
//! Pinned: the QD1 calibration table (README, "QD1, 4 KiB, from the `x86-4` host"), each cell the
//! mean latency `ullstack sim --device PRESET --job examples/qd1-calibration.fio` prints, to
//! 0.1 µs.

use std::path::PathBuf;
use std::process::Command;

fn repo() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../..")
}

/// The QD1 table's rows: preset and its four measured cells, as README writes them.
fn readme_qd1_rows() -> Vec<(String, [String; 4])> {
    let readme = std::fs::read_to_string(repo().join("README.md")).expect("README.md");
    let header = "| preset | random read, irq | random write, irq | read, polled | write, polled |";
    let start = readme
        .find(header)
        .expect("README has the QD1 calibration table with its header");
    readme[start..]
        .lines()
        .skip(2) // header and separator
        .take_while(|l| l.starts_with('|'))
        .map(|line| {
            let cells: Vec<String> = line
                .split('|')
                .map(|c| c.trim().trim_matches('`').to_string())
                .collect();
            // "", preset, 4 figures, published, ""
            assert!(cells.len() >= 6, "malformed QD1 row: {line}");
            (
                cells[1].clone(),
                [
                    cells[2].clone(),
                    cells[3].clone(),
                    cells[4].clone(),
                    cells[5].clone(),
                ],
            )
        })
        .collect()
}

/// The four job means (µs, one decimal) the simulator prints for `preset`.
fn measured(preset: &str) -> [String; 4] {
    let dir = std::env::temp_dir().join(format!("ullstack-readme-{preset}-{}", std::process::id()));
    let out = Command::new(env!("CARGO_BIN_EXE_ullstack"))
        .args(["sim", "--device", preset, "--json", "--job"])
        .arg(repo().join("examples/qd1-calibration.fio"))
        .arg("--out")
        .arg(&dir)
        .output()
        .expect("run ullstack");
    assert!(
        out.status.success(),
        "ullstack sim --device {preset}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    let _ = std::fs::remove_dir_all(&dir);
    let summary: serde_json::Value = serde_json::from_slice(&out.stdout).expect("summary JSON");
    let jobs = summary["jobs"].as_array().expect("jobs");
    let mean_us = |name: &str, op: &str| {
        let job = jobs
            .iter()
            .find(|j| j["name"] == name)
            .unwrap_or_else(|| panic!("job {name} in the summary"));
        let ns = job[op]["latency_ns"]["mean"]
            .as_u64()
            .expect("mean latency");
        format!("{:.1} µs", ns as f64 / 1000.0)
    };
    [
        mean_us("randread-irq", "read"),
        mean_us("randwrite-irq", "write"),
        mean_us("randread-poll", "read"),
        mean_us("randwrite-poll", "write"),
    ]
}

#[test]
fn readme_qd1_calibration_table_is_what_the_simulator_prints() {
    let rows = readme_qd1_rows();
    let presets: Vec<&str> = rows.iter().map(|(p, _)| p.as_str()).collect();
    assert_eq!(
        presets,
        ["zssd", "nvme-tlc", "bics", "vnand"],
        "README's QD1 table lists every device preset"
    );
    let mut stale = Vec::new();
    for (preset, written) in &rows {
        let got = measured(preset);
        if &got != written {
            stale.push(format!("{preset}: README {written:?}, simulator {got:?}"));
        }
    }
    assert!(
        stale.is_empty(),
        "README's QD1 calibration table is stale; update it (or fix the model):\n{}",
        stale.join("\n")
    );
}
