//! The source tree as a graph of files: every path a file writes (`use` trees and paths inside
//! the code, `crate::…`, `super::…`, `self::…`) resolved to the file that defines what it names,
//! through the `use` declarations of the modules on the way (a face's `pub use x::*`, a parent's
//! imports its children see), so a re-export does not hide which file a name comes from.

use std::collections::{BTreeMap, BTreeSet};
use std::path::Path;

/// A module path below the crate root, e.g. `["model", "arch", "config"]`.
pub type ModPath = Vec<String>;

/// One source file: its module, what it declares and what it writes.
struct File {
    /// Relative to `src/`, e.g. `model/arch/config.rs`.
    rel: String,
    /// Names of the items it defines at its top level.
    defines: BTreeSet<String>,
    /// Its `use` leaves, absolute: (name it brings in, where from); `*` for a glob.
    uses: Vec<(String, ModPath)>,
    /// Every path it writes, absolute, with whether its inline test module writes it.
    paths: Vec<(ModPath, bool)>,
}

/// The crate's files and the arrows between them.
pub struct Graph {
    files: BTreeMap<ModPath, File>,
    /// `from -> to`, files by `rel`, a module's arrows to its own descendants left out (a face
    /// holds its parts).
    pub edges: BTreeMap<String, BTreeSet<String>>,
    /// The arrows of the files' inline test modules (`from` is the file): a test module is a
    /// module nothing imports, so it closes no circle, but it keeps to the floors.
    pub test_edges: BTreeMap<String, BTreeSet<String>>,
}

/// `text` without comments, and with every string and char literal emptied, so that neither
/// reads as code.
pub fn code_only(text: &str) -> String {
    let b = text.as_bytes();
    let mut out = String::with_capacity(text.len());
    let mut i = 0;
    while i < b.len() {
        let rest = &text[i..];
        if rest.starts_with("//") {
            let end = rest.find('\n').unwrap_or(rest.len());
            i += end;
        } else if rest.starts_with("/*") {
            let end = rest.find("*/").map_or(rest.len(), |e| e + 2);
            out.extend(rest[..end].chars().filter(|&c| c == '\n'));
            i += end;
        } else if let Some(hashes) = raw_string_start(rest) {
            let close = format!("\"{}", "#".repeat(hashes));
            let body = 2 + hashes;
            let end = rest[body..]
                .find(&close)
                .map_or(rest.len(), |e| body + e + close.len());
            out.push_str("\"\"");
            out.extend(rest[..end].chars().filter(|&c| c == '\n'));
            i += end;
        } else if b[i] == b'"' {
            let mut j = i + 1;
            while j < b.len() && b[j] != b'"' {
                j += if b[j] == b'\\' { 2 } else { 1 };
            }
            out.push_str("\"\"");
            out.extend(text[i..j.min(b.len())].chars().filter(|&c| c == '\n'));
            i = (j + 1).min(b.len());
        } else if b[i] == b'\'' && char_literal_len(rest).is_some() {
            out.push_str("' '");
            i += char_literal_len(rest).unwrap();
        } else {
            let c = rest.chars().next().unwrap();
            out.push(c);
            i += c.len_utf8();
        }
    }
    out
}

/// The number of `#` of a raw string starting `text` (`r"`, `r#"`, `br"`…).
fn raw_string_start(text: &str) -> Option<usize> {
    let t = text.strip_prefix('b').unwrap_or(text);
    let t = t.strip_prefix('r')?;
    let hashes = t.len() - t.trim_start_matches('#').len();
    t[hashes..]
        .starts_with('"')
        .then_some(hashes + text.len() - t.len() - 1)
}

/// The length of a char literal starting `text` (`'a'`, `'\n'`, `'\u{1F}'`), `None` for a
/// lifetime.
fn char_literal_len(text: &str) -> Option<usize> {
    let mut chars = text.char_indices().skip(1);
    let (_, c) = chars.next()?;
    if c == '\\' {
        return text[2..].find('\'').map(|e| e + 3);
    }
    let (at, close) = chars.next()?;
    (close == '\'').then_some(at + 1)
}

/// The module of a file below `src/`.
pub fn module_of(rel: &str) -> ModPath {
    let mut parts: ModPath = rel
        .trim_end_matches(".rs")
        .split('/')
        .map(String::from)
        .collect();
    if parts.last().is_some_and(|p| p == "mod") || rel == "lib.rs" || rel == "main.rs" {
        parts.pop();
    }
    parts
}

/// The leaves of a `use` tree: each path with its last segment (`*`, a name, `name as alias`).
pub fn use_leaves(tree: &str) -> Vec<Vec<String>> {
    let tree: String = tree.split_whitespace().collect::<Vec<_>>().join(" ");
    let mut out = Vec::new();
    leaves_into(&[], &tree, &mut out);
    out
}

fn leaves_into(prefix: &[String], tree: &str, out: &mut Vec<Vec<String>>) {
    let tree = tree.trim();
    let Some(open) = tree.find('{') else {
        let mut path = prefix.to_vec();
        path.extend(tree.split("::").map(|s| s.trim().to_string()));
        out.push(path);
        return;
    };
    let mut path = prefix.to_vec();
    path.extend(
        tree[..open]
            .split("::")
            .map(str::trim)
            .filter(|s| !s.is_empty())
            .map(String::from),
    );
    let inner = &tree[open + 1..tree.rfind('}').unwrap_or(tree.len())];
    let (mut depth, mut start) = (0usize, 0);
    for (i, c) in inner.char_indices() {
        match c {
            '{' => depth += 1,
            '}' => depth -= 1,
            ',' if depth == 0 => {
                leaves_into(&path, &inner[start..i], out);
                start = i + 1;
            }
            _ => {}
        }
    }
    if !inner[start..].trim().is_empty() {
        leaves_into(&path, &inner[start..], out);
    }
}

/// `path` as written in the module `here` (whose files declares the modules `children`) made
/// absolute; `None` for paths into other crates. `in_inline_module`: written inside an inline
/// `mod x { … }` of the file (its tests).
fn absolute(
    path: &[String],
    here: &ModPath,
    children: &BTreeSet<String>,
    in_inline_module: bool,
) -> Option<ModPath> {
    let mut base = here.clone();
    if in_inline_module {
        base.push("tests".into());
    }
    match path.first()?.as_str() {
        "crate" => Some(path[1..].to_vec()),
        "self" => Some([base, path[1..].to_vec()].concat()),
        "super" => {
            let ups = path.iter().take_while(|s| *s == "super").count();
            base.truncate(base.len().saturating_sub(ups));
            Some([base, path[ups..].to_vec()].concat())
        }
        first if !in_inline_module && children.contains(first) => {
            Some([here.clone(), path.to_vec()].concat())
        }
        _ => None,
    }
}

/// Paths written inside the code: `crate::a::b`, `super::x`, `self::y`.
fn inline_paths(code: &str) -> Vec<(usize, Vec<String>)> {
    let mut out = Vec::new();
    let bytes = code.as_bytes();
    for root in ["crate::", "super::", "self::"] {
        for (at, _) in code.match_indices(root) {
            let before = at.checked_sub(1).map(|i| bytes[i]);
            if before.is_some_and(|c| c.is_ascii_alphanumeric() || c == b'_' || c == b':') {
                continue;
            }
            let path: Vec<String> = code[at..]
                .split("::")
                .map(|s| {
                    s.chars()
                        .take_while(|c| c.is_ascii_alphanumeric() || *c == '_')
                        .collect::<String>()
                })
                .scan(true, |go, s| {
                    let keep = *go && !s.is_empty();
                    *go = keep;
                    keep.then_some(s)
                })
                .collect();
            out.push((at, path));
        }
    }
    out
}

/// Names a file defines at its top level (`pub struct X`, `fn y`, `mod z;`…).
fn definitions(code: &str) -> BTreeSet<String> {
    const KINDS: [&str; 9] = [
        "struct ", "enum ", "trait ", "fn ", "const ", "static ", "type ", "mod ", "union ",
    ];
    let mut names = BTreeSet::new();
    for line in code.lines().filter(|l| !l.starts_with(char::is_whitespace)) {
        let mut rest = line.trim_start_matches("pub");
        if rest.starts_with('(') {
            rest = rest.split_once(')').map_or("", |(_, r)| r);
        }
        let rest = rest.trim_start().trim_start_matches("unsafe ");
        let rest = rest
            .trim_start_matches("const fn ")
            .trim_start_matches("async ");
        for kind in KINDS {
            if let Some(tail) = rest.strip_prefix(kind) {
                let name: String = tail
                    .chars()
                    .take_while(|c| c.is_ascii_alphanumeric() || *c == '_')
                    .collect();
                names.insert(name);
            }
        }
        if let Some(tail) = rest.strip_prefix("macro_rules! ") {
            names.insert(tail.chars().take_while(|c| *c != ' ').collect());
        }
    }
    names
}

impl File {
    /// The file at `rel` (below `src/`) holding `text`: its top-level names, its `use` leaves
    /// and every path it writes, made absolute.
    fn parse(rel: String, text: &str) -> File {
        let here = module_of(&rel);
        let code = code_only(text);
        let inline_start = code
            .match_indices("mod ")
            .find(|(at, _)| {
                let line_start = code[..*at].rfind('\n').map_or(0, |i| i + 1);
                code[line_start..*at].trim().is_empty()
                    && code[*at..]
                        .split('\n')
                        .next()
                        .unwrap()
                        .trim_end()
                        .ends_with('{')
            })
            .map_or(code.len(), |(at, _)| at);
        let children: BTreeSet<String> = code[..inline_start]
            .lines()
            .filter_map(|line| {
                let line = line.trim();
                let rest = line.strip_prefix("pub ").unwrap_or(line);
                let rest = rest.strip_prefix("pub(crate) ").unwrap_or(rest);
                rest.strip_prefix("mod ")?
                    .strip_suffix(';')
                    .map(String::from)
            })
            .collect();
        let mut uses = Vec::new();
        let mut paths = Vec::new();
        let mut use_spans = Vec::new();
        for (at, _) in code.match_indices("use ") {
            let line_start = code[..at].rfind('\n').map_or(0, |i| i + 1);
            let lead = code[line_start..at].trim();
            if !(lead.is_empty() || lead.starts_with("pub")) {
                continue;
            }
            let Some(len) = code[at..].find(';') else {
                continue;
            };
            use_spans.push(at..at + len);
            for leaf in use_leaves(&code[at + 4..at + len]) {
                let (last, alias) = match leaf.last().unwrap().split_once(" as ") {
                    Some((name, alias)) => (name.trim().to_string(), alias.trim().to_string()),
                    None => (leaf.last().unwrap().clone(), leaf.last().unwrap().clone()),
                };
                let mut written = leaf[..leaf.len() - 1].to_vec();
                if last != "self" {
                    written.push(last.clone());
                }
                if let Some(abs) = absolute(&written, &here, &children, at > inline_start) {
                    let name = if last == "self" {
                        written.last().cloned().unwrap_or_default()
                    } else {
                        alias
                    };
                    if last != "*" || !written.starts_with(&["super".to_string()]) {
                        paths.push((abs.clone(), at > inline_start));
                    }
                    if at < inline_start {
                        uses.push((name, abs));
                    }
                }
            }
        }
        for (at, path) in inline_paths(&code) {
            if use_spans.iter().any(|s| s.contains(&at)) {
                continue;
            }
            if let Some(abs) = absolute(&path, &here, &children, at > inline_start) {
                paths.push((abs, at > inline_start));
            }
        }
        let defines = definitions(&code[..inline_start]);
        File {
            rel,
            defines,
            uses,
            paths,
        }
    }
}

impl Graph {
    /// Reads every `.rs` file below `src` and resolves what each writes.
    pub fn read(src: &Path, files: &[std::path::PathBuf]) -> Graph {
        let mut parsed = BTreeMap::new();
        for path in files {
            let rel = path
                .strip_prefix(src)
                .unwrap()
                .to_string_lossy()
                .replace('\\', "/");
            let file = File::parse(rel, &std::fs::read_to_string(path).unwrap());
            parsed.insert(module_of(&file.rel), file);
        }
        let mut graph = Graph {
            files: parsed,
            edges: BTreeMap::new(),
            test_edges: BTreeMap::new(),
        };
        let (mut edges, mut test_edges) = (BTreeMap::new(), BTreeMap::new());
        for (module, file) in &graph.files {
            for (path, in_test) in &file.paths {
                let Some(target) = graph.resolve(path, 0) else {
                    continue;
                };
                let descends = target.len() > module.len() && target.starts_with(module);
                if target != *module && !descends {
                    let to = graph.files[&target].rel.clone();
                    let into = if *in_test {
                        &mut test_edges
                    } else {
                        &mut edges
                    };
                    into.entry(file.rel.clone())
                        .or_insert_with(BTreeSet::new)
                        .insert(to);
                }
            }
        }
        graph.edges = edges;
        graph.test_edges = test_edges;
        graph
    }

    /// The module whose file defines what `path` names, following `use` declarations.
    fn resolve(&self, path: &[String], depth: usize) -> Option<ModPath> {
        if depth > 16 {
            return None;
        }
        let mut module: ModPath = Vec::new();
        let mut i = 0;
        while i < path.len() {
            let mut next = module.clone();
            next.push(path[i].clone());
            if !self.files.contains_key(&next) {
                break;
            }
            module = next;
            i += 1;
        }
        let file = self.files.get(&module)?;
        let Some(name) = path.get(i) else {
            return Some(module);
        };
        if file.defines.contains(name) {
            return Some(module);
        }
        for (brought, from) in &file.uses {
            if brought == name {
                let mut target = from.clone();
                target.extend(path[i + 1..].iter().cloned());
                return self.resolve(&target, depth + 1).or(Some(module.clone()));
            }
        }
        for (brought, from) in &file.uses {
            if brought == "*" {
                let mut inner = from[..from.len() - 1].to_vec();
                inner.extend(path[i..].iter().cloned());
                if let Some(found) = self.resolve(&inner, depth + 1) {
                    let named = self.files[&found].defines.contains(name)
                        || found.iter().any(|segment| segment == name);
                    if named {
                        return Some(found);
                    }
                }
            }
        }
        Some(module)
    }

    /// The circles of files (strongly connected parts of more than one file), each sorted.
    pub fn circles(&self) -> Vec<Vec<String>> {
        let nodes: Vec<&String> = self.files.values().map(|f| &f.rel).collect();
        let index: BTreeMap<&String, usize> =
            nodes.iter().enumerate().map(|(i, n)| (*n, i)).collect();
        let adjacency: Vec<Vec<usize>> = nodes
            .iter()
            .map(|n| {
                self.edges
                    .get(*n)
                    .map(|to| to.iter().map(|t| index[t]).collect())
                    .unwrap_or_default()
            })
            .collect();
        let mut circles: Vec<Vec<String>> = strongly_connected(&adjacency)
            .into_iter()
            .filter(|c| c.len() > 1)
            .map(|c| {
                let mut files: Vec<String> = c.into_iter().map(|i| nodes[i].clone()).collect();
                files.sort();
                files
            })
            .collect();
        circles.sort();
        circles
    }
}

/// Tarjan's strongly connected components, iteratively.
fn strongly_connected(adjacency: &[Vec<usize>]) -> Vec<Vec<usize>> {
    let n = adjacency.len();
    let (mut index, mut low) = (vec![usize::MAX; n], vec![0; n]);
    let (mut on_stack, mut stack, mut out, mut counter) =
        (vec![false; n], Vec::new(), Vec::new(), 0);
    for root in 0..n {
        if index[root] != usize::MAX {
            continue;
        }
        let mut work = vec![(root, 0usize)];
        while let Some(&mut (v, ref mut next)) = work.last_mut() {
            if *next == 0 && index[v] == usize::MAX {
                index[v] = counter;
                low[v] = counter;
                counter += 1;
                stack.push(v);
                on_stack[v] = true;
            }
            if let Some(&w) = adjacency[v].get(*next) {
                *next += 1;
                if index[w] == usize::MAX {
                    work.push((w, 0));
                } else if on_stack[w] {
                    low[v] = low[v].min(index[w]);
                }
                continue;
            }
            work.pop();
            if let Some(&(parent, _)) = work.last() {
                low[parent] = low[parent].min(low[v]);
            }
            if low[v] == index[v] {
                let mut component = Vec::new();
                while let Some(w) = stack.pop() {
                    on_stack[w] = false;
                    component.push(w);
                    if w == v {
                        break;
                    }
                }
                out.push(component);
            }
        }
    }
    out
}
