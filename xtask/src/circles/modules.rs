//! One crate's module tree and its `use` imports resolved to files: which
//! file defines what a path names, following re-exports (`pub use`, and a
//! parent's `use` of a child's item that a grandchild imports through
//! `super::`) to the file that defines the item.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

use super::syntax::{self, FileItems};

/// How many re-exports a path is followed through before giving up.
const MAX_HOPS: usize = 16;

/// A module of the crate.
#[derive(Debug, Default)]
struct Module {
    /// The file its items are in (the parent's for an inline module).
    file: PathBuf,
    /// Its child modules.
    children: BTreeSet<String>,
    /// The names of the items it defines.
    defined: BTreeSet<String>,
    /// Each name its item-level `use` declarations bind, with the
    /// absolute path it names.
    bindings: BTreeMap<String, Vec<String>>,
    /// The absolute modules it imports with a glob.
    globs: Vec<Vec<String>>,
}

/// One import between two files: from the file of a `use`, to the file
/// that defines what it names.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord)]
pub struct Import {
    /// The importing file.
    pub from: PathBuf,
    /// The file that defines what it imports.
    pub to: PathBuf,
    /// The path as written.
    pub path: String,
}

/// The imports between different files of the crate whose root is `root`.
pub fn imports(root: &Path) -> Vec<Import> {
    let mut modules: BTreeMap<Vec<String>, Module> = BTreeMap::new();
    let mut uses: Vec<(PathBuf, Vec<String>, syntax::UsePath)> = Vec::new();
    // What each file's code (outside its `use` declarations) names.
    let mut written: BTreeMap<PathBuf, FileItems> = BTreeMap::new();
    let mut pending = vec![(Vec::new(), root.to_owned(), true)];
    while let Some((path, file, mod_root)) = pending.pop() {
        if modules.contains_key(&path) {
            continue;
        }
        let Ok(source) = std::fs::read_to_string(&file) else {
            continue;
        };
        let mut items = syntax::read(&source);
        add_file(&mut modules, &path, &file, &items);
        for declaration in &items.modules {
            let mut child = path.clone();
            child.extend(declaration.inline.iter().cloned());
            child.push(declaration.name.clone());
            let child_file = module_file(&file, mod_root, declaration);
            let child_root = declaration.path.is_some() || child_file.ends_with("mod.rs");
            pending.push((child, child_file, child_root));
        }
        for used in std::mem::take(&mut items.uses) {
            let mut module = path.clone();
            module.extend(used.inline.iter().cloned());
            uses.push((file.clone(), module, used));
        }
        written.insert(file, items);
    }
    // Each item-level binding, made absolute once every module is known.
    let mut bindings = Vec::new();
    for (_, module, used) in uses.iter().filter(|(_, _, used)| used.item) {
        if let Some(absolute) = absolute(&modules, module, &used.segments) {
            bindings.push((module.clone(), used.bound.clone(), absolute));
        }
    }
    for (module, bound, absolute) in bindings {
        let entry = modules.entry(module).or_default();
        match bound {
            Some(name) => {
                entry.bindings.insert(name, absolute);
            }
            None => entry.globs.push(absolute),
        }
    }
    let mut found = Vec::new();
    for (file, module, used) in &uses {
        let Some(absolute) = absolute(&modules, module, &used.segments) else {
            continue;
        };
        let code = &written[file];
        if used.public
            && used
                .bound
                .as_ref()
                .is_none_or(|name| !code.mentioned.contains(name))
        {
            // A re-export the file does not use itself.
            continue;
        }
        // A module imported to name its items (`use crate::lease;` then
        // `lease::Lease`): each item named through it.
        let mut targets: Vec<Vec<String>> = Vec::new();
        if let Some(name) = &used.bound
            && longest_module(&modules, &absolute).1.is_empty()
        {
            targets.extend(
                code.paths
                    .iter()
                    .filter(|(_, path)| &path[0] == name)
                    .map(|(_, path)| [absolute.as_slice(), &path[1..]].concat()),
            );
        }
        if targets.is_empty() {
            targets.push(absolute);
        }
        for target in targets {
            let Some(to) = defining_file(&modules, &target, 0)
                .or_else(|| nearest_module_file(&modules, &target))
            else {
                continue;
            };
            if &to != file {
                found.push(Import {
                    from: file.clone(),
                    to,
                    path: used.segments.join("::"),
                });
            }
        }
    }
    found.sort();
    found.dedup();
    found
}

/// Records `file`'s modules (its own at `path` and its inline ones) and
/// what they define.
fn add_file(
    modules: &mut BTreeMap<Vec<String>, Module>,
    path: &[String],
    file: &Path,
    items: &FileItems,
) {
    let mut own = vec![path.to_vec()];
    own.extend(
        items
            .inline_modules
            .iter()
            .map(|inline| [path, inline].concat()),
    );
    for module in &own {
        modules.entry(module.clone()).or_default().file = file.to_owned();
        if let Some((name, parent)) = module.split_last() {
            modules
                .entry(parent.to_vec())
                .or_default()
                .children
                .insert(name.clone());
        }
    }
    for declaration in &items.modules {
        let parent = [path, &declaration.inline].concat();
        modules
            .entry(parent)
            .or_default()
            .children
            .insert(declaration.name.clone());
    }
    for (inline, name) in &items.defined {
        modules
            .entry([path, inline].concat())
            .or_default()
            .defined
            .insert(name.clone());
    }
}

/// The file of `mod NAME;` declared in `file` (a crate root or `mod.rs`
/// when `mod_root`), as rustc finds it.
fn module_file(file: &Path, mod_root: bool, declaration: &syntax::ModDecl) -> PathBuf {
    let parent = file.parent().unwrap_or(Path::new("."));
    if let Some(path) = &declaration.path {
        return parent.join(path);
    }
    let mut dir = if mod_root {
        parent.to_owned()
    } else {
        parent.join(file.file_stem().unwrap_or_default())
    };
    dir.extend(&declaration.inline);
    let flat = dir.join(format!("{}.rs", declaration.name));
    if flat.exists() {
        flat
    } else {
        dir.join(&declaration.name).join("mod.rs")
    }
}

/// `segments` as written in `module`, as a path from the crate root;
/// `None` for another crate's path.
fn absolute(
    modules: &BTreeMap<Vec<String>, Module>,
    module: &[String],
    segments: &[String],
) -> Option<Vec<String>> {
    let (first, rest) = segments.split_first()?;
    let mut path = match first.as_str() {
        "crate" => return Some(rest.to_vec()),
        "self" => module.to_vec(),
        "super" => module.split_last()?.1.to_vec(),
        _ if modules
            .get(module)
            .is_some_and(|own| own.children.contains(first)) =>
        {
            return Some([module, segments].concat());
        }
        _ => return None,
    };
    let mut rest = rest;
    while let Some((next, after)) = rest.split_first()
        && next == "super"
    {
        path.pop()?;
        rest = after;
    }
    path.extend(rest.iter().cloned());
    Some(path)
}

/// The file that defines what the absolute `path` names, through
/// re-exports; `None` when no module of the crate defines it.
fn defining_file(
    modules: &BTreeMap<Vec<String>, Module>,
    path: &[String],
    hops: usize,
) -> Option<PathBuf> {
    if hops > MAX_HOPS {
        return None;
    }
    let (module, rest) = longest_module(modules, path);
    let own = modules.get(module)?;
    let Some(name) = rest.first() else {
        return Some(own.file.clone());
    };
    if own.defined.contains(name) {
        return Some(own.file.clone());
    }
    if let Some(target) = own.bindings.get(name) {
        let target = [target.as_slice(), &rest[1..]].concat();
        return defining_file(modules, &target, hops + 1);
    }
    own.globs
        .iter()
        .find_map(|glob| defining_file(modules, &[glob.as_slice(), rest].concat(), hops + 1))
}

/// The file of the deepest module on `path`.
fn nearest_module_file(
    modules: &BTreeMap<Vec<String>, Module>,
    path: &[String],
) -> Option<PathBuf> {
    let (module, _) = longest_module(modules, path);
    modules.get(module).map(|module| module.file.clone())
}

/// The longest prefix of `path` that is a module, and the rest.
fn longest_module<'a>(
    modules: &BTreeMap<Vec<String>, Module>,
    path: &'a [String],
) -> (&'a [String], &'a [String]) {
    let mut depth = 0;
    while depth < path.len() && modules.contains_key(&path[..=depth]) {
        depth += 1;
    }
    path.split_at(depth)
}
