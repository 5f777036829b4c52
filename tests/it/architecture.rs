//! The source tree keeps the shape `../shared/design/ARCHITECTURE.md` gives it: arrows between
//! the top-level modules point down only (cli → stages → pipeline → memory → prune/eval → model →
//! data → sys; report and queue sit beside stages, serve beside memory), in the code and in its
//! unit tests; between files no arrow closes a circle ([`graph`]); `model`'s five floors point down
//! (arch < kernels < decoder < family < checkpoint); and no source file grows past 1,500 lines.

mod graph;

use std::path::{Path, PathBuf};

use crate::common::files_below;
use graph::Graph;

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
    let (src, files) = source_files();
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

/// `model`'s floors, lowest first: a file may use files of its own floor or lower ones.
const MODEL_FLOORS: [&str; 5] = ["arch", "kernels", "decoder", "family", "checkpoint"];

fn source_files() -> (PathBuf, Vec<PathBuf>) {
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
    let files = files_below(&src)
        .into_iter()
        .filter(|p| p.extension().is_some_and(|e| e == "rs"))
        .collect();
    (src, files)
}

/// The floor of a file below `src/`, where it lies in one of `model`'s floors.
fn model_floor(rel: &str) -> Option<usize> {
    let floor = rel.strip_prefix("model/")?.split('/').next()?;
    MODEL_FLOORS.iter().position(|f| *f == floor)
}

#[test]
fn no_file_imports_in_a_circle_and_model_floors_point_down() {
    let (src, files) = source_files();
    let graph = Graph::read(&src, &files);
    // The graph saw real arrows, through faces (a wrong resolver would pass vacuously).
    let layer = &graph.edges["model/decoder/layer.rs"];
    assert!(layer.contains("model/arch/config.rs"), "{layer:?}");
    assert!(graph.edges["stages/prune.rs"]
        .iter()
        .any(|to| to.starts_with("prune/")));
    let circles = graph.circles();
    assert!(
        circles.is_empty(),
        "files that import each other in a circle (move the shared piece into a file both use):\n{}",
        circles
            .iter()
            .map(|c| c.join(" ↔ "))
            .collect::<Vec<_>>()
            .join("\n")
    );
    let mut upward = Vec::new();
    for (from, targets) in graph.edges.iter().chain(&graph.test_edges) {
        let Some(own) = model_floor(from) else {
            continue;
        };
        for to in targets {
            if model_floor(to).is_some_and(|floor| floor > own) {
                upward.push(format!("{from} uses {to}"));
            }
        }
    }
    assert!(
        upward.is_empty(),
        "arrows up between model's floors ({}):\n{}",
        MODEL_FLOORS.join(" < "),
        upward.join("\n")
    );
    let entries = std::fs::read_dir(src.join("model")).unwrap().count();
    assert!(
        entries <= 7,
        "src/model has {entries} entries; keep at most 7 (its floors and face)"
    );
    for floor in MODEL_FLOORS {
        assert!(
            src.join("model").join(floor).join("mod.rs").is_file(),
            "no face for {floor}"
        );
    }
}

#[test]
fn paths_resolve_through_faces_to_the_file_that_defines_them() {
    let root = std::env::temp_dir().join(format!("wanda-arch-{}", std::process::id()));
    let files = [
        ("lib.rs", "pub mod a;\npub mod b;\n"),
        ("a/mod.rs", "mod inner;\npub use inner::*;\n"),
        (
            "a/inner.rs",
            "// crate::b::Gone in a comment\nuse crate::b::Thing as Alias;\npub struct Face;\nconst S: &str = \"crate::b::Text\";\n",
        ),
        ("b/mod.rs", "mod deep;\npub use deep::{Thing, Text};\n"),
        (
            "b/deep.rs",
            "pub struct Thing;\npub struct Text;\nfn f() -> crate::a::Face { crate::a::Face }\n#[cfg(test)]\nmod tests {\n    use super::*;\n}\n",
        ),
    ];
    for (rel, text) in files {
        let path = root.join(rel);
        std::fs::create_dir_all(path.parent().unwrap()).unwrap();
        std::fs::write(path, text).unwrap();
    }
    let paths: Vec<PathBuf> = files.iter().map(|(rel, _)| root.join(rel)).collect();
    let graph = Graph::read(&root, &paths);
    std::fs::remove_dir_all(&root).unwrap();
    assert_eq!(
        graph.edges["a/inner.rs"].iter().collect::<Vec<_>>(),
        ["b/deep.rs"],
        "through b's face to the file that defines Thing; comments and strings are not code"
    );
    assert_eq!(
        graph.edges["b/deep.rs"].iter().collect::<Vec<_>>(),
        ["a/inner.rs"]
    );
    assert_eq!(
        graph.circles(),
        [vec!["a/inner.rs".to_string(), "b/deep.rs".to_string()]]
    );
}

#[test]
fn use_trees_expand_to_their_leaves() {
    let leaves = graph::use_leaves("crate::{a::{b, c as d}, e::*, f::{self}}");
    let joined: Vec<String> = leaves.iter().map(|l| l.join("::")).collect();
    assert_eq!(
        joined,
        [
            "crate::a::b",
            "crate::a::c as d",
            "crate::e::*",
            "crate::f::self"
        ]
    );
    assert_eq!(graph::module_of("model/arch/mod.rs"), ["model", "arch"]);
    let code = graph::code_only(
        "let s = \"crate::x\"; // super::y\nlet c = '\"'; let r = r#\"self::z\"#; x::<'a>()",
    );
    assert!(
        !code.contains("crate::x") && !code.contains("super::y") && !code.contains("self::z"),
        "{code}"
    );
    assert!(code.contains("x::<'a>()"), "{code}");
}
