//! Headless Chromium reads a study's report as a reader's browser shows it: every image loads,
//! and no two text boxes of any figure overlap or run off the figure.
//!
//! `report.html` has no scripts (it is static and self-contained), so the check runs on a copy:
//! the report with every figure's SVG from the study folder appended (invisible but laid out, so
//! the browser measures the text with its own fonts) and a script that, on `load`, checks each
//! `<img>` (decoded, with a natural size), takes every SVG `<text>`'s box with
//! `getBoundingClientRect` (rotated labels as drawn), and writes a JSON verdict into
//! `<pre id="verdict">`. Chromium's `--dump-dom` prints the page after the load event and a
//! virtual-time budget; the test reads the verdict back. Chromium gets [`CHROMIUM_TIMEOUT`] and
//! is killed past it. Without Chromium the check skips, or fails under `ULLSTACK_REQUIRE_TOOLS`.

use std::path::Path;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

/// How long Chromium may take to load, check and dump one report.
const CHROMIUM_TIMEOUT: Duration = Duration::from_secs(90);

/// Two text boxes overlap when they share more than this many pixels both ways (anti-aliasing
/// and rounding of boxes that merely touch stay under it).
const OVERLAP_PX: f64 = 0.5;

/// The in-page check; it ends by writing `{"images":[…],"svgs":N,"texts":N,"overlaps":[…],
/// "outside":[…]}` into `#verdict`.
const SCRIPT: &str = r#"
window.addEventListener('load', () => {
  const v = {images: [], svgs: 0, texts: 0, overlaps: [], outside: []};
  for (const img of document.querySelectorAll('img')) {
    v.images.push({alt: img.alt, ok: img.complete && img.naturalWidth > 0 && img.naturalHeight > 0});
  }
  for (const holder of document.querySelectorAll('#svg-check > div')) {
    const svg = holder.querySelector('svg');
    v.svgs += 1;
    const frame = svg.getBoundingClientRect();
    const boxes = [...svg.querySelectorAll('text')]
      .filter(t => t.textContent.trim() !== '')
      .map(t => ({text: t.textContent.trim(), r: t.getBoundingClientRect()}));
    v.texts += boxes.length;
    const tol = OVERLAP;
    for (const b of boxes) {
      if (b.r.left < frame.left - 1 || b.r.right > frame.right + 1 ||
          b.r.top < frame.top - 1 || b.r.bottom > frame.bottom + 1) {
        v.outside.push({figure: holder.dataset.stem, text: b.text});
      }
    }
    for (let i = 0; i < boxes.length; i++) {
      for (let j = i + 1; j < boxes.length; j++) {
        const a = boxes[i].r, b = boxes[j].r;
        const w = Math.min(a.right, b.right) - Math.max(a.left, b.left);
        const h = Math.min(a.bottom, b.bottom) - Math.max(a.top, b.top);
        if (w > tol && h > tol) {
          v.overlaps.push({figure: holder.dataset.stem, a: boxes[i].text, b: boxes[j].text,
                           w: Math.round(w * 10) / 10, h: Math.round(h * 10) / 10});
        }
      }
    }
  }
  const pre = document.createElement('pre');
  pre.id = 'verdict';
  pre.textContent = JSON.stringify(v);
  document.body.appendChild(pre);
});
"#;

/// Loads `dir/report.html` with `dir`'s figures in headless Chromium and asserts that every
/// image loads and no figure's text boxes overlap or leave the figure. `test` names the caller
/// for a skip.
pub fn check_report(dir: &Path, test: &str) {
    let started = Instant::now();
    let Some(v) = verdict(dir, test) else {
        return;
    };
    let report = std::fs::read_to_string(dir.join("report.html")).expect("report.html");
    let figures = report.matches("<figure").count();
    let svgs = svg_files(dir).len();
    assert!(
        figures > 0 && svgs >= figures,
        "{figures} figures in the report, {svgs} SVGs in {}",
        dir.display()
    );
    let images = v["images"].as_array().expect("images");
    assert_eq!(images.len(), figures, "an image per figure: {v}");
    let broken: Vec<_> = images.iter().filter(|i| i["ok"] != true).collect();
    assert!(broken.is_empty(), "images that did not load: {broken:?}");
    assert_eq!(v["svgs"].as_u64(), Some(svgs as u64), "{v}");
    assert!(
        v["texts"].as_u64().unwrap_or(0) >= 5 * svgs as u64,
        "too few text boxes measured: {v}"
    );
    assert_eq!(
        v["overlaps"],
        serde_json::json!([]),
        "overlapping text in {}",
        dir.display()
    );
    assert_eq!(
        v["outside"],
        serde_json::json!([]),
        "text off its figure in {}",
        dir.display()
    );
    println!(
        "chromium checked {} images and {} text boxes in {svgs} figures of {} in {:?}",
        images.len(),
        v["texts"],
        dir.display(),
        started.elapsed()
    );
}

/// The study folder's SVG files, sorted.
fn svg_files(dir: &Path) -> Vec<std::path::PathBuf> {
    let mut svgs: Vec<_> = std::fs::read_dir(dir)
        .expect("the study folder")
        .flatten()
        .map(|e| e.path())
        .filter(|p| p.extension().is_some_and(|x| x == "svg"))
        .collect();
    svgs.sort();
    svgs
}

/// The in-page check's verdict on `dir/report.html` and `dir`'s SVGs: `None` when Chromium is
/// missing (the test skips; under `ULLSTACK_REQUIRE_TOOLS` it fails instead).
pub fn verdict(dir: &Path, test: &str) -> Option<serde_json::Value> {
    let chromium = testkit::tool("chromium", test, "apt-get install chromium")?;
    let report = std::fs::read_to_string(dir.join("report.html")).expect("report.html");
    let svgs = svg_files(dir);
    let mut extra = String::from(
        "<div id=\"svg-check\" style=\"position:absolute;left:0;top:0;visibility:hidden\">\n",
    );
    for p in &svgs {
        let stem = p.file_stem().unwrap().to_string_lossy();
        let svg = std::fs::read_to_string(p).unwrap();
        extra.push_str(&format!("<div data-stem=\"{stem}\">{svg}</div>\n"));
    }
    extra.push_str("</div>\n<script>");
    extra.push_str(&SCRIPT.replace("OVERLAP", &OVERLAP_PX.to_string()));
    extra.push_str("</script>\n");
    let at = report.rfind("</body>").expect("report.html ends its body");
    let page = format!("{}{}{}", &report[..at], extra, &report[at..]);

    let tmp = tempfile::tempdir().unwrap();
    let page_path = tmp.path().join("check.html");
    std::fs::write(&page_path, page).unwrap();
    let dom_path = tmp.path().join("dom.html");
    let err_path = tmp.path().join("chromium.err");
    let mut child = Command::new(chromium)
        .args([
            "--headless",
            "--no-sandbox",
            "--disable-gpu",
            "--disable-quic",
            "--no-first-run",
            "--disable-background-networking",
            "--disable-component-update",
            "--disable-sync",
            "--virtual-time-budget=5000",
            "--dump-dom",
        ])
        .arg(format!(
            "--user-data-dir={}",
            tmp.path().join("profile").display()
        ))
        .arg(format!("file://{}", page_path.display()))
        .stdin(Stdio::null())
        .stdout(std::fs::File::create(&dom_path).unwrap())
        .stderr(std::fs::File::create(&err_path).unwrap())
        .spawn()
        .expect("chromium starts");
    let mut status = None;
    let done = testkit::wait_until(CHROMIUM_TIMEOUT, || {
        status = child.try_wait().expect("waiting for chromium");
        status.is_some()
    });
    if done.is_err() {
        child.kill().ok();
        child.wait().ok();
        panic!(
            "chromium did not finish within {CHROMIUM_TIMEOUT:?}:\n{}",
            std::fs::read_to_string(&err_path).unwrap_or_default()
        );
    }
    let dom = std::fs::read_to_string(&dom_path).unwrap();
    let verdict = dom
        .split("<pre id=\"verdict\">")
        .nth(1)
        .and_then(|rest| rest.split("</pre>").next())
        .unwrap_or_else(|| {
            panic!(
                "no verdict in chromium's DOM ({status:?}, {} bytes):\n{}",
                dom.len(),
                std::fs::read_to_string(&err_path).unwrap_or_default()
            )
        });
    let json = verdict
        .replace("&lt;", "<")
        .replace("&gt;", ">")
        .replace("&quot;", "\"")
        .replace("&amp;", "&");
    Some(serde_json::from_str(&json).expect("a JSON verdict"))
}
