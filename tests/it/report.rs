//! `wanda report` on a copy of the committed SmolLM2 sweep: the page holds `wanda table`'s
//! perplexities, the plot, every cell's details behind its link and the unreadable records;
//! and, where a Chromium is installed, a real browser parses the page, finds the link targets
//! and draws it (`WANDA_REQUIRE_BROWSER=1` turns a missing browser into a failure).

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use crate::common::{output_ok, output_refused};

const SWEEP: &str = "results/smollm2-135m-sweep";

/// A copy of the sweep's records (run.json only) with one corrupt record added.
fn sweep_copy(dir: &Path) -> PathBuf {
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join(SWEEP);
    let copy = dir.join("smollm2-135m-sweep");
    for entry in std::fs::read_dir(&src).unwrap() {
        let cell = entry.unwrap().path();
        let record = cell.join("run.json");
        if record.is_file() {
            let to = copy.join(cell.file_name().unwrap());
            std::fs::create_dir_all(&to).unwrap();
            std::fs::copy(&record, to.join("run.json")).unwrap();
        }
    }
    std::fs::create_dir_all(copy.join("broken")).unwrap();
    std::fs::write(copy.join("broken/run.json"), "{ \"cell\": ").unwrap();
    copy
}

/// Writes the report of `results` to `<dir>/report.html` and returns the page.
fn report(results: &Path, dir: &Path) -> String {
    let out = dir.join("report.html");
    let run = output_ok(
        Command::new(env!("CARGO_BIN_EXE_wanda"))
            .arg("report")
            .arg(results)
            .arg("--out")
            .arg(&out),
    );
    let stderr = String::from_utf8_lossy(&run.stderr);
    assert!(stderr.contains("broken/run.json"), "{stderr}");
    std::fs::read_to_string(&out).unwrap()
}

/// The values of `wanda table`'s Markdown (bold marks removed), row by row.
fn table_values(results: &Path) -> Vec<(String, Vec<String>)> {
    let out = output_ok(
        Command::new(env!("CARGO_BIN_EXE_wanda"))
            .arg("table")
            .arg(results)
            .args(["--rows", "method", "--cols", "sparsity"]),
    );
    String::from_utf8(out.stdout)
        .unwrap()
        .lines()
        .skip(2)
        .map(|line| {
            let cells: Vec<String> = line
                .trim_matches('|')
                .split('|')
                .map(|c| c.trim().replace("**", ""))
                .collect();
            (cells[0].clone(), cells[1..].to_vec())
        })
        .collect()
}

/// The text between `start` and the next `end` after it.
fn between<'a>(text: &'a str, start: &str, end: &str) -> &'a str {
    let from = text.find(start).unwrap_or_else(|| panic!("no `{start}`")) + start.len();
    let rest = &text[from..];
    &rest[..rest
        .find(end)
        .unwrap_or_else(|| panic!("no `{end}` after `{start}`"))]
}

#[test]
fn the_sweep_report_holds_the_table_the_plot_and_every_cell() {
    let dir = tempfile::tempdir().unwrap();
    let results = sweep_copy(dir.path());
    let html = report(&results, dir.path());
    assert!(html.starts_with("<!DOCTYPE html>"));
    // The perplexity table holds exactly `wanda table`'s numbers, row by row.
    let table = between(&html, "<h2 id=\"perplexity\">", "</table>");
    let rows = table_values(&results);
    assert_eq!(rows.len(), 5, "dense and four methods");
    for (label, values) in rows {
        let row = between(table, &format!("<tr><th>{label}</th>"), "</tr>");
        let shown: Vec<String> = row
            .split("<td class=\"num\">")
            .skip(1)
            .map(|td| {
                let text = td.split("</td>").next().unwrap();
                text.split('<')
                    .map(|part| part.rsplit('>').next().unwrap())
                    .collect::<String>()
            })
            .collect();
        assert_eq!(shown, values, "row `{label}`");
    }
    // The plot: one line per method, on a log axis, inline.
    let plot = between(&html, "<figure class=\"plot\">", "</figure>");
    assert_eq!(plot.matches("<polyline").count(), 4, "{plot}");
    assert!(plot.contains("ppl (log scale)"));
    // Every cell has a section with its recipe, provenance and charts, reached by its link.
    assert_eq!(html.matches("<section class=\"cell\"").count(), 44);
    let wanda_50 = "cell-9a554801ddfc";
    assert!(
        table.contains(&format!("<a href=\"#{wanda_50}\">65.45</a>")),
        "{table}"
    );
    let section = between(&html, &format!("id=\"{wanda_50}\">"), "</section>");
    assert!(section.contains("wanda-0.5-unstructured"));
    assert!(section.contains("<th>git commit</th>"));
    assert!(section.contains("<td>../../../pipelines/smollm2-135m-sweep.yaml</td>"));
    assert!(section.contains("peak RSS per stage") && section.contains("sparsity per layer"));
    // Sections without data say so; the corrupt record is named with its reason.
    assert!(html.contains("No record has zero-shot metrics"));
    assert!(html.contains("No record holds a speed measurement"));
    let failures = between(&html, "<ul class=\"failures\">", "</ul>");
    assert!(
        failures.contains("<code>broken/run.json</code>: corrupt run record (not valid json)"),
        "{failures}"
    );
    // Deterministic and free of this machine's paths outside the header.
    assert_eq!(report(&results, dir.path()), html);
    let tmp = dir.path().display().to_string();
    assert_eq!(
        html.matches(&tmp).count(),
        2,
        "only the header names the folder"
    );
}

#[test]
fn a_missing_or_empty_folder_is_one_line_naming_the_fix() {
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("r.html");
    for (folder, expected) in [
        (dir.path().join("nope"), "does not exist"),
        (dir.path().to_path_buf(), "no readable run.json below"),
    ] {
        let stderr = output_refused(
            Command::new(env!("CARGO_BIN_EXE_wanda"))
                .arg("report")
                .arg(&folder)
                .arg("-o")
                .arg(&out),
        );
        assert!(stderr.contains(expected), "{stderr}");
        assert!(
            stderr.contains(&format!("`{}`", folder.display())),
            "{stderr}"
        );
        assert!(
            stderr.contains("pass the folder `wanda run` wrote"),
            "{stderr}"
        );
        assert_eq!(stderr.trim().lines().count(), 1, "{stderr}");
        assert!(!out.exists());
    }
}

/// The first of `chromium`, `chromium-browser`, `google-chrome` on `PATH`.
fn browser() -> Option<PathBuf> {
    let path = std::env::var_os("PATH")?;
    ["chromium", "chromium-browser", "google-chrome"]
        .iter()
        .flat_map(|name| std::env::split_paths(&path).map(move |d| d.join(name)))
        .find(|p| p.is_file())
}

/// Runs headless `browser` with `args` on `page` (a fresh profile in `dir`), killing it after
/// two minutes; returns stdout and stderr (through files: a pipe nobody reads while waiting
/// would fill up with the DOM and stall the browser).
fn headless(browser: &Path, dir: &Path, args: &[String], page: &str) -> (String, String) {
    let (stdout, stderr) = (dir.join("browser.out"), dir.join("browser.err"));
    let mut child = Command::new(browser)
        .args([
            "--headless",
            "--disable-gpu",
            "--no-sandbox",
            "--no-first-run",
        ])
        .arg(format!("--user-data-dir={}", dir.join("profile").display()))
        .args(args)
        .arg(page)
        .stdin(Stdio::null())
        .stdout(std::fs::File::create(&stdout).unwrap())
        .stderr(std::fs::File::create(&stderr).unwrap())
        .spawn()
        .unwrap();
    let deadline = Instant::now() + Duration::from_secs(120);
    while child.try_wait().unwrap().is_none() {
        if Instant::now() > deadline {
            let _ = child.kill();
            panic!("{} did not finish in two minutes", browser.display());
        }
        std::thread::sleep(Duration::from_millis(100));
    }
    let status = child.wait().unwrap();
    let stderr = std::fs::read_to_string(stderr).unwrap();
    assert!(status.success(), "{stderr}");
    (std::fs::read_to_string(stdout).unwrap(), stderr)
}

#[test]
fn a_real_browser_renders_the_plot_and_follows_a_cell_link() {
    let Some(browser) = browser() else {
        if std::env::var("WANDA_REQUIRE_BROWSER").as_deref() == Ok("1") {
            panic!("WANDA_REQUIRE_BROWSER=1 but none of chromium, chromium-browser, google-chrome is on PATH");
        }
        eprintln!(
            "skipped: no chromium, chromium-browser or google-chrome on PATH \
             (install one, e.g. `apt-get install -y chromium`, to run this test)"
        );
        return;
    };
    let dir = tempfile::tempdir().unwrap();
    let results = sweep_copy(dir.path());
    let source = report(&results, dir.path());
    let url = format!("file://{}", dir.path().join("report.html").display());
    let (dom, stderr) = headless(&browser, dir.path(), &["--dump-dom".into()], &url);
    // The browser parsed the page: the plot's lines and markers are SVG elements of its DOM.
    let plot = between(&dom, "<figure class=\"plot\">", "</figure>");
    assert!(plot.contains("<svg"), "{plot}");
    assert_eq!(plot.matches("<polyline").count(), 4);
    assert_eq!(
        plot.matches("<circle").count(),
        between(&source, "<figure class=\"plot\">", "</figure>")
            .matches("<circle")
            .count()
    );
    assert!(dom.contains("<title>smollm2-135m-sweep</title>"));
    assert!(
        !stderr.contains("net::ERR_") && !stderr.contains("Uncaught"),
        "{stderr}"
    );
    // A cell link of the table leads to an element with that id holding the cell's details.
    let table = between(&dom, "<h2 id=\"perplexity\">", "</table>");
    let target = between(table, "href=\"#", "\"");
    let section = between(&dom, &format!("id=\"{target}\">"), "</section>");
    assert!(section.contains("<h4>Recipe</h4>") && section.contains("<h4>Provenance</h4>"));
    assert_eq!(
        section.matches("<svg").count(),
        2,
        "memory and layer charts"
    );
    // And it draws: a screenshot of the page at the link's target.
    let png = dir.path().join("report.png");
    headless(
        &browser,
        dir.path(),
        &[
            format!("--screenshot={}", png.display()),
            "--window-size=1200,1600".into(),
            "--hide-scrollbars".into(),
        ],
        &url,
    );
    let bytes = std::fs::read(&png).unwrap();
    assert_eq!(&bytes[..8], b"\x89PNG\r\n\x1a\n");
    let size = |at: usize| u32::from_be_bytes(bytes[at..at + 4].try_into().unwrap());
    assert_eq!((size(16), size(20)), (1200, 1600), "IHDR width and height");
    assert!(bytes.len() > 30_000, "{} bytes: a blank page?", bytes.len());
}
