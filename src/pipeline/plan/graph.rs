//! The stage graph: ids, `needs:` and cycles checked, and the DAG built (shared stages once,
//! per-cell stages once per cell), in a stable topological order.

use super::*;

/// Ids, `needs:` and cycles, on the declared stages.
pub(super) fn check_stage_graph(parsed: &Parsed) -> Result<(), Vec<Diagnostic>> {
    let mut problems = Vec::new();
    let mut first_seen: HashMap<&str, &StageLayout> = HashMap::new();
    for layout in &parsed.layout {
        let valid = !layout.id.is_empty()
            && layout
                .id
                .chars()
                .all(|c| c.is_ascii_alphanumeric() || c == '-' || c == '_');
        if !valid {
            problems.push(Diagnostic {
                origin: layout.origin.clone(),
                problem: Problem::InvalidStageId {
                    id: layout.id.clone(),
                },
            });
        }
        match first_seen.get(layout.id.as_str()) {
            Some(first) => problems.push(Diagnostic {
                origin: layout.origin.clone(),
                problem: Problem::DuplicateStageId {
                    id: layout.id.clone(),
                    first: first.origin.clone(),
                },
            }),
            None => {
                first_seen.insert(&layout.id, layout);
            }
        }
    }
    let ids: Vec<&str> = parsed.spec.stages.iter().map(|s| s.id.as_str()).collect();
    for (stage, layout) in parsed.spec.stages.iter().zip(&parsed.layout) {
        for (need, origin) in stage.needs.iter().zip(&layout.need_origins) {
            if !ids.contains(&need.as_str()) {
                problems.push(Diagnostic {
                    origin: origin.clone(),
                    problem: Problem::UnknownNeed {
                        stage: stage.id.clone(),
                        need: need.clone(),
                        suggestion: nearest(need, ids.iter().copied().filter(|i| *i != stage.id))
                            .map(Into::into),
                    },
                });
            }
        }
    }
    if problems.is_empty() {
        if let Some((path, origin)) = find_cycle(parsed) {
            problems.push(Diagnostic {
                origin,
                problem: Problem::Cycle { path },
            });
        }
    }
    if problems.is_empty() {
        Ok(())
    } else {
        Err(problems)
    }
}

/// The first cycle by declaration order, as ids along the data flow (`a → b → a`: b needs a,
/// a needs b), with the origin of the `needs:` entry that closes it.
pub(super) fn find_cycle(parsed: &Parsed) -> Option<(Vec<String>, Origin)> {
    let stages = &parsed.spec.stages;
    let index: HashMap<&str, usize> = stages
        .iter()
        .enumerate()
        .map(|(i, s)| (s.id.as_str(), i))
        .collect();
    // dependents[i]: stages that need i, in declaration order.
    let mut dependents: Vec<Vec<usize>> = vec![Vec::new(); stages.len()];
    for (j, stage) in stages.iter().enumerate() {
        for need in &stage.needs {
            if let Some(&i) = index.get(need.as_str()) {
                dependents[i].push(j);
            }
        }
    }
    #[derive(Clone, Copy, PartialEq)]
    enum Mark {
        New,
        Active,
        Done,
    }
    pub(super) fn visit(
        v: usize,
        dependents: &[Vec<usize>],
        marks: &mut [Mark],
        stack: &mut Vec<usize>,
    ) -> Option<Vec<usize>> {
        marks[v] = Mark::Active;
        stack.push(v);
        for &w in &dependents[v] {
            match marks[w] {
                Mark::Active => {
                    let start = stack.iter().position(|&s| s == w).unwrap_or(0);
                    let mut cycle = stack[start..].to_vec();
                    cycle.push(w);
                    return Some(cycle);
                }
                Mark::New => {
                    if let Some(cycle) = visit(w, dependents, marks, stack) {
                        return Some(cycle);
                    }
                }
                Mark::Done => {}
            }
        }
        stack.pop();
        marks[v] = Mark::Done;
        None
    }
    let mut marks = vec![Mark::New; stages.len()];
    for start in 0..stages.len() {
        if marks[start] == Mark::New {
            if let Some(cycle) = visit(start, &dependents, &mut marks, &mut Vec::new()) {
                // The closing edge: the last stage needs the one before it.
                let (closer, needed) = (cycle[cycle.len() - 1], cycle[cycle.len() - 2]);
                let layout = &parsed.layout[closer];
                let origin = stages[closer]
                    .needs
                    .iter()
                    .position(|n| n == &stages[needed].id)
                    .and_then(|p| layout.need_origins.get(p))
                    .cloned()
                    .unwrap_or_else(|| layout.origin.clone());
                let path = cycle.iter().map(|&i| stages[i].id.clone()).collect();
                return Some((path, origin));
            }
        }
    }
    None
}

/// The DAG: stages in dependency order (declaration order breaking ties); shared nodes
/// first, then each cell's nodes.
pub(super) fn build_graph(
    parsed: &Parsed,
    targets: &[Vec<Target>],
    cells: &[Cell],
) -> DiGraph<StageNode, ()> {
    let stages = &parsed.spec.stages;
    let index: HashMap<&str, usize> = stages
        .iter()
        .enumerate()
        .map(|(i, s)| (s.id.as_str(), i))
        .collect();
    let order = topological(stages, &index);

    // Directly swept stages, then everything downstream of them.
    let mut per_cell = vec![false; stages.len()];
    for target in targets.iter().flatten() {
        match target.owner {
            Owner::Stage(i) => per_cell[i] = true,
            Owner::Setting(section) => {
                let kind = if section == "evaluation" {
                    StageKind::Eval
                } else {
                    StageKind::Calibrate
                };
                for (i, s) in stages.iter().enumerate() {
                    if s.kind() == kind {
                        per_cell[i] = true;
                    }
                }
            }
        }
    }
    for &i in &order {
        if stages[i]
            .needs
            .iter()
            .any(|n| index.get(n.as_str()).is_some_and(|&u| per_cell[u]))
        {
            per_cell[i] = true;
        }
    }

    let all: Vec<usize> = (0..cells.len()).collect();
    let mut graph = DiGraph::new();
    let mut shared_nodes: HashMap<usize, NodeIndex> = HashMap::new();
    let node = |stage: &StageSpec, scope: Scope| StageNode {
        stage: stage.id.clone(),
        kind: stage.kind(),
        requires: requires(&stage.options),
        produces: produces(stage.kind()),
        options: stage.options.clone(),
        scope,
    };
    for &i in order.iter().filter(|&&i| !per_cell[i]) {
        // Shared options are the same in every cell; take them from the first.
        let stage = cells
            .first()
            .and_then(|c| c.spec.stage(&stages[i].id))
            .unwrap_or(&stages[i]);
        let n = graph.add_node(node(stage, Scope::Shared { cells: all.clone() }));
        for need in &stages[i].needs {
            if let Some(&u) = index.get(need.as_str()).and_then(|u| shared_nodes.get(u)) {
                graph.add_edge(u, n, ());
            }
        }
        shared_nodes.insert(i, n);
    }
    for (c, cell) in cells.iter().enumerate() {
        let mut cell_nodes: HashMap<usize, NodeIndex> = HashMap::new();
        for &i in order.iter().filter(|&&i| per_cell[i]) {
            let stage = cell.spec.stage(&stages[i].id).unwrap_or(&stages[i]);
            let n = graph.add_node(node(stage, Scope::Cell(c)));
            for need in &stages[i].needs {
                let Some(&u) = index.get(need.as_str()) else {
                    continue;
                };
                if let Some(&from) = cell_nodes.get(&u).or_else(|| shared_nodes.get(&u)) {
                    graph.add_edge(from, n, ());
                }
            }
            cell_nodes.insert(i, n);
        }
    }
    graph
}

/// Kahn's algorithm, lowest declaration index first among the ready stages.
pub(super) fn topological(stages: &[StageSpec], index: &HashMap<&str, usize>) -> Vec<usize> {
    let mut pending: Vec<usize> = stages
        .iter()
        .map(|s| {
            s.needs
                .iter()
                .filter(|n| index.contains_key(n.as_str()))
                .count()
        })
        .collect();
    let mut done = vec![false; stages.len()];
    let mut order = Vec::with_capacity(stages.len());
    while order.len() < stages.len() {
        let Some(next) = (0..stages.len()).find(|&i| !done[i] && pending[i] == 0) else {
            break; // a cycle; ruled out before this runs
        };
        done[next] = true;
        order.push(next);
        for (j, s) in stages.iter().enumerate() {
            pending[j] -= s
                .needs
                .iter()
                .filter(|n| n.as_str() == stages[next].id)
                .count();
        }
    }
    order
}
