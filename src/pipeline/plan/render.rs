//! Renders a [`Plan`]'s DAG as Graphviz `dot`, Mermaid `flowchart`, or plain text. Output
//! depends only on the plan (node order is insertion order, which is deterministic), so it
//! can be snapshot-tested and diffed.

use std::fmt::Write as _;

use super::{Plan, Scope};

/// A graph rendering format.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum GraphFormat {
    /// Graphviz DOT: shared stages at top level, one cluster per cell.
    Dot,
    /// Mermaid flowchart: one subgraph per cell.
    Mermaid,
    /// An indented listing: shared stages, then each cell's stages.
    Text,
}

impl GraphFormat {
    /// Every format, by name.
    pub const ALL: [(&'static str, GraphFormat); 3] = [
        ("dot", GraphFormat::Dot),
        ("mermaid", GraphFormat::Mermaid),
        ("text", GraphFormat::Text),
    ];
}

impl std::str::FromStr for GraphFormat {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        GraphFormat::ALL
            .iter()
            .find(|(name, _)| *name == s)
            .map(|(_, f)| *f)
            .ok_or_else(|| format!("unknown graph format `{s}`: use `dot`, `mermaid` or `text`"))
    }
}

/// Renders the plan's DAG.
pub fn render(plan: &Plan, format: GraphFormat) -> String {
    match format {
        GraphFormat::Dot => dot(plan),
        GraphFormat::Mermaid => mermaid(plan),
        GraphFormat::Text => text(plan),
    }
}

fn node_label(plan: &Plan, n: petgraph::graph::NodeIndex) -> String {
    let node = &plan.graph()[n];
    if node.stage == node.kind.name() {
        node.stage.clone()
    } else {
        format!("{} ({})", node.stage, node.kind)
    }
}

fn cell_title(plan: &Plan, c: usize) -> String {
    let cell = &plan.cells[c];
    format!("{} · {}", cell.label, cell.id)
}

fn dot(plan: &Plan) -> String {
    let esc = |s: &str| s.replace('\\', "\\\\").replace('"', "\\\"");
    let graph = plan.graph();
    let mut out = String::new();
    let _ = writeln!(out, "digraph \"{}\" {{", esc(plan.name()));
    let _ = writeln!(out, "  rankdir=LR;");
    let _ = writeln!(out, "  node [shape=box];");
    for n in graph.node_indices() {
        if graph[n].is_shared() {
            let _ = writeln!(
                out,
                "  n{} [label=\"{}\"];",
                n.index(),
                esc(&node_label(plan, n))
            );
        }
    }
    for c in 0..plan.cells.len() {
        let _ = writeln!(out, "  subgraph \"cluster_{c}\" {{");
        let _ = writeln!(out, "    label=\"{}\";", esc(&cell_title(plan, c)));
        for n in plan.cell_nodes(c) {
            let _ = writeln!(
                out,
                "    n{} [label=\"{}\"];",
                n.index(),
                esc(&node_label(plan, n))
            );
        }
        let _ = writeln!(out, "  }}");
    }
    for n in graph.node_indices() {
        for u in plan.needs(n) {
            let _ = writeln!(out, "  n{} -> n{};", u.index(), n.index());
        }
    }
    out.push_str("}\n");
    out
}

fn mermaid(plan: &Plan) -> String {
    let esc = |s: &str| s.replace('"', "#quot;");
    let graph = plan.graph();
    let mut out = String::from("flowchart LR\n");
    for n in graph.node_indices() {
        if graph[n].is_shared() {
            let _ = writeln!(out, "  n{}[\"{}\"]", n.index(), esc(&node_label(plan, n)));
        }
    }
    for c in 0..plan.cells.len() {
        let _ = writeln!(out, "  subgraph c{c}[\"{}\"]", esc(&cell_title(plan, c)));
        for n in plan.cell_nodes(c) {
            let _ = writeln!(out, "    n{}[\"{}\"]", n.index(), esc(&node_label(plan, n)));
        }
        let _ = writeln!(out, "  end");
    }
    for n in graph.node_indices() {
        for u in plan.needs(n) {
            let _ = writeln!(out, "  n{} --> n{}", u.index(), n.index());
        }
    }
    out
}

fn text(plan: &Plan) -> String {
    let graph = plan.graph();
    let cells = plan.cells.len();
    let shared: Vec<_> = graph
        .node_indices()
        .filter(|&n| graph[n].is_shared())
        .collect();
    let per_cell_stages = plan.cell_nodes(0).count();
    let rows = |nodes: &[petgraph::graph::NodeIndex]| -> Vec<[String; 3]> {
        nodes
            .iter()
            .map(|&n| {
                let needs: Vec<String> = plan
                    .needs(n)
                    .iter()
                    .map(|&u| graph[u].stage.clone())
                    .collect();
                let makes: Vec<String> = graph[n]
                    .produces
                    .iter()
                    .map(|a| {
                        serde_json::to_value(a)
                            .ok()
                            .and_then(|v| v.as_str().map(String::from))
                            .unwrap_or_default()
                    })
                    .collect();
                [
                    node_label(plan, n),
                    if needs.is_empty() {
                        "—".into()
                    } else {
                        needs.join(", ")
                    },
                    makes.join(", "),
                ]
            })
            .collect()
    };
    let all_rows: Vec<[String; 3]> = rows(&graph.node_indices().collect::<Vec<_>>());
    let w0 = all_rows
        .iter()
        .map(|r| r[0].chars().count())
        .max()
        .unwrap_or(0);
    let w1 = all_rows
        .iter()
        .map(|r| r[1].chars().count())
        .max()
        .unwrap_or(0);
    let line = |out: &mut String, r: &[String; 3]| {
        let _ = writeln!(
            out,
            "  {:<w0$}  needs {:<w1$}  makes {}",
            r[0],
            r[1],
            r[2],
            w0 = w0,
            w1 = w1
        );
    };
    let mut out = String::new();
    let _ = writeln!(
        out,
        "pipeline `{}`: {} cell{}, {} shared stage{}, {} per-cell stage{}",
        plan.name(),
        cells,
        plural(cells),
        shared.len(),
        plural(shared.len()),
        per_cell_stages,
        plural(per_cell_stages)
    );
    if !shared.is_empty() {
        let _ = writeln!(
            out,
            "\nshared (run once for all {cells} cell{}):",
            plural(cells)
        );
        for r in rows(&shared) {
            line(&mut out, &r);
        }
    }
    for c in 0..cells {
        let cell = &plan.cells[c];
        let nodes: Vec<_> = plan.cell_nodes(c).collect();
        if nodes.is_empty() {
            continue;
        }
        let _ = writeln!(
            out,
            "\ncell {:>w$}/{cells}  {}  {}",
            c + 1,
            cell.id,
            cell.label,
            w = cells.to_string().len()
        );
        for r in rows(&nodes) {
            line(&mut out, &r);
        }
    }
    if per_cell_stages == 0 && cells > 0 {
        let cell = &plan.cells[0];
        let _ = writeln!(out, "\ncell 1/1  {}  {}", cell.id, cell.label);
    }
    debug_assert!(graph.node_indices().all(|n| match &graph[n].scope {
        Scope::Shared { cells: covered } => covered.len() == cells,
        Scope::Cell(c) => *c < cells,
    }));
    out
}

fn plural(n: usize) -> &'static str {
    if n == 1 {
        ""
    } else {
        "s"
    }
}
