//! `cargo xtask circles`: no two files of the workspace may import each
//! other, directly or around a loop. Builds the file graph of every crate
//! of the workspace from its `use crate::…`, `use super::…` and `use
//! self::…` declarations, each resolved to the file that defines what it
//! names (`modules`), and prints every circle: the shortest one through
//! each file that is on one.
//!
//! The circles the tree had when the check came are listed, one import a
//! line, in `xtask/known-circles.txt`: the check fails on an import on a
//! circle that is not listed (a new circle), and on a listed one that is no
//! longer on a circle (remove its line), so the list only shrinks.
//! `--update` rewrites the list to the imports on circles now: after a
//! merge that moved imports inside a circle, review its diff (a new line
//! is a new import on a circle).

mod modules;
mod syntax;

use std::collections::{BTreeMap, BTreeSet, VecDeque};
use std::path::{Path, PathBuf};

use crate::metadata::Workspace;
use modules::Import;

/// The list of the imports on the circles the tree still has.
const KNOWN: &str = "xtask/known-circles.txt";

type Graph = BTreeMap<PathBuf, BTreeMap<PathBuf, String>>;

/// Prints each circle; `Ok(false)` when an import on one is not in
/// [`KNOWN`], or a line of it is on none. With `update`, rewrites
/// [`KNOWN`] to the imports on circles instead.
pub fn run(update: bool) -> Result<bool, String> {
    let workspace = Workspace::load()?;
    let mut graph = Graph::new();
    let mut roots = workspace.crate_roots.clone();
    roots.sort();
    roots.dedup();
    for root in &roots {
        for Import { from, to, path } in modules::imports(root) {
            graph.entry(from).or_default().entry(to).or_insert(path);
        }
    }
    let shown = |file: &Path| {
        file.strip_prefix(&workspace.root)
            .unwrap_or(file)
            .display()
            .to_string()
    };
    let circles = circles(&graph);
    for circle in &circles {
        eprintln!("xtask: import circle:");
        for pair in circle.windows(2) {
            eprintln!(
                "  {}  imports  {}  (use {})",
                shown(&pair[0]),
                shown(&pair[1]),
                graph[&pair[0]][&pair[1]]
            );
        }
    }
    let on_circles: BTreeSet<String> = on_circles(&graph)
        .into_iter()
        .map(|(from, to)| format!("{} -> {}", shown(from), shown(to)))
        .collect();
    let listed = std::fs::read_to_string(workspace.root.join(KNOWN))
        .map_err(|error| format!("cannot read {KNOWN}: {error}"))?;
    if update {
        let header: String = listed
            .lines()
            .take_while(|line| line.starts_with('#'))
            .map(|line| format!("{line}\n"))
            .collect();
        let lines: String = on_circles
            .iter()
            .map(|import| format!("{import}\n"))
            .collect();
        std::fs::write(workspace.root.join(KNOWN), header + &lines)
            .map_err(|error| format!("cannot write {KNOWN}: {error}"))?;
        eprintln!(
            "xtask: circles: {KNOWN} lists the {} imports on circles now",
            on_circles.len()
        );
        return Ok(true);
    }
    let known: BTreeSet<String> = listed
        .lines()
        .map(str::trim)
        .filter(|line| !line.is_empty() && !line.starts_with('#'))
        .map(str::to_owned)
        .collect();
    let new: Vec<_> = on_circles.difference(&known).collect();
    let gone: Vec<_> = known.difference(&on_circles).collect();
    for import in &new {
        eprintln!("xtask: circles: a new import on a circle: {import}");
    }
    for import in &gone {
        eprintln!("xtask: circles: no longer on a circle, remove its line from {KNOWN}: {import}");
    }
    eprintln!(
        "xtask: circles: {} circles among the imports of {} files; {} imports on them, {} not listed in {KNOWN}",
        circles.len(),
        graph.len(),
        on_circles.len(),
        new.len()
    );
    Ok(new.is_empty() && gone.is_empty())
}

/// Every import `from -> to` on a circle: `to` leads back to `from`.
fn on_circles(graph: &Graph) -> BTreeSet<(&PathBuf, &PathBuf)> {
    graph
        .iter()
        .flat_map(|(from, imports)| imports.keys().map(move |to| (from, to)))
        .filter(|&(from, to)| reaches(graph, to, from))
        .collect()
}

/// Whether `start` leads to `goal` through imports.
fn reaches(graph: &Graph, start: &PathBuf, goal: &PathBuf) -> bool {
    let mut seen = BTreeSet::from([start]);
    let mut queue = VecDeque::from([start]);
    while let Some(file) = queue.pop_front() {
        if file == goal {
            return true;
        }
        for next in graph.get(file).into_iter().flat_map(BTreeMap::keys) {
            if seen.insert(next) {
                queue.push_back(next);
            }
        }
    }
    false
}

/// The shortest circle through each file that is on one, each once, as its
/// files with the first repeated at the end.
fn circles(graph: &Graph) -> Vec<Vec<PathBuf>> {
    let mut found: BTreeSet<Vec<PathBuf>> = BTreeSet::new();
    for start in graph.keys() {
        if let Some(mut circle) = shortest_circle(graph, start) {
            // The same circle found from each of its files: start it at its
            // least file.
            circle.pop();
            let least = circle
                .iter()
                .enumerate()
                .min_by_key(|(_, file)| *file)
                .map_or(0, |(at, _)| at);
            circle.rotate_left(least);
            circle.push(circle[0].clone());
            found.insert(circle);
        }
    }
    found.into_iter().collect()
}

/// The shortest path from `start` back to it, breadth first.
fn shortest_circle(graph: &Graph, start: &PathBuf) -> Option<Vec<PathBuf>> {
    let mut came_from: BTreeMap<&PathBuf, &PathBuf> = BTreeMap::new();
    let mut queue = VecDeque::from([start]);
    while let Some(file) = queue.pop_front() {
        for next in graph.get(file).into_iter().flat_map(BTreeMap::keys) {
            if next == start {
                let mut circle = vec![start.clone(), file.clone()];
                let mut at = file;
                while at != start {
                    at = came_from[at];
                    circle.push(at.clone());
                }
                circle.reverse();
                circle.dedup();
                return Some(circle);
            }
            if !came_from.contains_key(next) {
                came_from.insert(next, file);
                queue.push_back(next);
            }
        }
    }
    None
}

#[cfg(test)]
mod tests {
    use std::path::Path;

    use super::{circles, modules, Graph};

    #[test]
    fn finds_the_circle_through_a_re_export_and_not_a_parents_re_export() {
        let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("fixtures/circle");
        let mut graph = Graph::new();
        let mut imports = Vec::new();
        for import in modules::imports(&root.join("lib.rs")) {
            let from = import.from.strip_prefix(&root).unwrap().to_owned();
            let to = import.to.strip_prefix(&root).unwrap().to_owned();
            imports.push(format!("{} -> {}", from.display(), to.display()));
            graph.entry(from).or_default().insert(to, import.path);
        }
        assert_eq!(
            imports,
            [
                "a.rs -> b.rs",
                "b.rs -> a.rs",
                "c.rs -> parent/child.rs",
                "parent/child.rs -> parent/mod.rs"
            ]
        );
        let found: Vec<Vec<String>> = circles(&graph)
            .iter()
            .map(|circle| {
                circle
                    .iter()
                    .map(|file| file.display().to_string())
                    .collect()
            })
            .collect();
        assert_eq!(found, [["a.rs", "b.rs", "a.rs"]]);
    }
}
