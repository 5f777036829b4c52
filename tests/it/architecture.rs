//! The source tree keeps the shape `../shared/design/ARCHITECTURE.md` gives it: arrows between
//! the top-level modules point down only (cli → stages → pipeline → memory → prune/eval → model →
//! data → sys; report and queue sit beside stages, serve beside memory), in the code and in its unit tests, and no
//! source file grows past 1,500 lines.

use std::path::{Path, PathBuf};

use crate::common::files_below;

/// The floor of each top-level module: a module may use modules on a higher number only.
const FLOORS: &[(&str, u8)] = &[
    ("cli", 0),
    ("fuzzing", 0),
    ("stages", 1),
    ("report", 1),
    ("queue", 1),
    ("pipeline", 2),
    ("memory", 3),
    ("serve", 3),
    ("prune", 4),
    ("eval", 4),
    ("model", 5),
    ("data", 6),
    ("sys", 7),
];

const MAX_LINES: usize = 1_500;

fn floor(module: &str) -> Option<u8> {
    FLOORS.iter().find(|(m, _)| *m == module).map(|&(_, f)| f)
}

/// The top-level modules `text` names through `crate::…`, also inside `use crate::{a, b::c}`.
fn crate_modules(text: &str) -> Vec<String> {
    let ident = |s: &str| -> String {
        s.chars()
            .take_while(|c| c.is_ascii_alphanumeric() || *c == '_')
            .collect()
    };
    let mut found = Vec::new();
    for (at, _) in text.match_indices("crate::") {
        let rest = &text[at + "crate::".len()..];
        if let Some(group) = rest.strip_prefix('{') {
            let mut depth = 0usize;
            let mut start = 0;
            for (i, c) in group.char_indices() {
                match c {
                    '{' => depth += 1,
                    '}' if depth == 0 => {
                        found.push(ident(group[start..i].trim()));
                        break;
                    }
                    '}' => depth -= 1,
                    ',' if depth == 0 => {
                        found.push(ident(group[start..i].trim()));
                        start = i + 1;
                    }
                    _ => {}
                }
            }
        } else {
            found.push(ident(rest));
        }
    }
    found.retain(|m| !m.is_empty());
    found
}

#[test]
fn arrows_between_modules_point_down_and_files_stay_small() {
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
    let files: Vec<PathBuf> = files_below(&src)
        .into_iter()
        .filter(|p| p.extension().is_some_and(|e| e == "rs"))
        .collect();
    let mut upward = Vec::new();
    let mut large = Vec::new();
    for path in &files {
        let rel = path.strip_prefix(&src).unwrap();
        let text = std::fs::read_to_string(path).unwrap();
        if text.lines().count() > MAX_LINES {
            large.push(format!(
                "{} ({} lines)",
                rel.display(),
                text.lines().count()
            ));
        }
        let module = rel
            .components()
            .next()
            .unwrap()
            .as_os_str()
            .to_string_lossy()
            .trim_end_matches(".rs")
            .to_string();
        let Some(own) = floor(&module) else { continue };
        for used in crate_modules(&text) {
            if floor(&used).is_some_and(|f| f < own) {
                upward.push(format!("{} uses crate::{used}", rel.display()));
            }
        }
    }
    upward.sort();
    upward.dedup();
    assert!(
        upward.is_empty(),
        "arrows that point up (move the shared piece down, or the user up):\n{}",
        upward.join("\n")
    );
    assert!(
        large.is_empty(),
        "files over {MAX_LINES} lines (split them by concern):\n{}",
        large.join("\n")
    );
    // The walk saw the tree (a wrong root would pass vacuously).
    assert!(files.len() > 50, "only {} source files found", files.len());
    assert!(FLOORS
        .iter()
        .all(|(m, _)| src.join(m).exists() || src.join(format!("{m}.rs")).exists()));
}

#[test]
fn crate_paths_are_read_from_plain_and_grouped_uses() {
    let text = "use crate::model::llama::Llama;\nuse crate::{data::hash, sys::{atomic, allocator}, pipeline};\nlet x = crate::prune::Method::Wanda;";
    assert_eq!(
        crate_modules(text),
        ["model", "data", "sys", "pipeline", "prune"]
    );
}
