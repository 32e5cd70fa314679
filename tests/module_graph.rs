//! No import cycles between the top-level modules of any crate of the
//! workspace: a module's dependencies can be read, tested and replaced without
//! the modules that use it. Reads the sources, so it needs no build of them.

#![allow(clippy::unwrap_used)] // tests fail loudly

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

/// Module → the modules it refers to, each with a file that does.
type Graph = BTreeMap<String, BTreeMap<String, String>>;

#[test]
fn no_crate_has_an_import_cycle_between_its_modules() {
    let workspace = Path::new(env!("CARGO_MANIFEST_DIR"));
    let mut crates = vec![workspace.to_path_buf()];
    crates.extend(members(workspace));
    assert!(crates.len() > 5, "found the workspace's crates: {crates:?}");
    let mut cycles = Vec::new();
    for krate in &crates {
        let graph = module_graph(&krate.join("src"));
        for cycle in strongly_connected(&graph) {
            let edges: Vec<String> = cycle
                .iter()
                .flat_map(|from| {
                    graph[from]
                        .iter()
                        .filter(|(to, _)| cycle.contains(*to))
                        .map(move |(to, file)| format!("{from} → {to} ({file})"))
                })
                .collect();
            cycles.push(format!("{}: {}", krate.display(), edges.join(", ")));
        }
    }
    assert!(cycles.is_empty(), "import cycles:\n{}", cycles.join("\n"));
}

#[test]
fn a_cycle_is_found() {
    let dir = tempfile::tempdir().unwrap();
    let src = dir.path();
    std::fs::write(
        src.join("lib.rs"),
        "pub mod a;\npub mod b;\npub use b::Thing;\n",
    )
    .unwrap();
    std::fs::create_dir(src.join("a")).unwrap();
    std::fs::write(src.join("a.rs"), "mod inner;\n").unwrap();
    std::fs::write(src.join("a/inner.rs"), "use crate::{c::X, Thing};\n").unwrap();
    std::fs::write(
        src.join("b.rs"),
        "// crate::c::Y in a comment\nuse crate::a;\n",
    )
    .unwrap();
    std::fs::write(src.join("c.rs"), "fn f() { crate::b::g() }\n").unwrap();
    let graph = module_graph(src);
    assert_eq!(
        strongly_connected(&graph),
        vec![BTreeSet::from([
            "a".to_owned(),
            "b".to_owned(),
            "c".to_owned()
        ])],
        "{graph:?}"
    );
    std::fs::write(src.join("b.rs"), "pub struct Thing;\n").unwrap();
    assert_eq!(
        strongly_connected(&module_graph(src)),
        Vec::<BTreeSet<String>>::new()
    );
}

/// The workspace's member crates, from its `Cargo.toml`.
fn members(workspace: &Path) -> Vec<PathBuf> {
    let manifest = std::fs::read_to_string(workspace.join("Cargo.toml")).unwrap();
    let list = manifest
        .split_once("members = [")
        .and_then(|(_, rest)| rest.split_once(']'))
        .map(|(list, _)| list)
        .expect("the workspace lists its members");
    list.split(',')
        .map(|m| m.trim().trim_matches('"'))
        .filter(|m| !m.is_empty())
        .map(|m| workspace.join(m))
        .collect()
}

/// Which top-level module of the crate rooted at `src` refers to which.
fn module_graph(src: &Path) -> Graph {
    let root = ["lib.rs", "main.rs"]
        .iter()
        .map(|r| src.join(r))
        .find(|p| p.exists())
        .expect("a crate root");
    let reexports = reexports(&std::fs::read_to_string(&root).unwrap());
    let modules: BTreeSet<String> = std::fs::read_dir(src)
        .unwrap()
        .filter_map(|e| {
            let name = e.unwrap().file_name().into_string().unwrap();
            match name.strip_suffix(".rs") {
                Some("lib" | "main") => None,
                Some(stem) => Some(stem.to_owned()),
                None => src.join(&name).is_dir().then_some(name),
            }
        })
        .collect();
    let mut graph = Graph::new();
    for file in rust_files(src) {
        let relative = file
            .strip_prefix(src)
            .unwrap()
            .to_string_lossy()
            .into_owned();
        let first = relative.split('/').next().unwrap();
        let from = first.strip_suffix(".rs").unwrap_or(first).to_owned();
        if !modules.contains(&from) {
            continue;
        }
        let text = std::fs::read_to_string(&file).unwrap();
        for name in crate_paths(&without_comments(&text)) {
            let to = if modules.contains(&name) {
                Some(name)
            } else {
                reexports.get(&name).cloned()
            };
            if let Some(to) = to.filter(|to| *to != from) {
                graph
                    .entry(from.clone())
                    .or_default()
                    .entry(to)
                    .or_insert_with(|| relative.clone());
            }
        }
    }
    graph
}

/// `pub use module::{A, B as C}` of the crate root: item name → module.
fn reexports(root: &str) -> BTreeMap<String, String> {
    let mut items = BTreeMap::new();
    for statement in root.split(';') {
        let Some(path) = statement.trim().strip_prefix("pub use ") else {
            continue;
        };
        let Some((module, names)) = path.split_once("::") else {
            continue;
        };
        for name in names.trim_matches(|c| c == '{' || c == '}').split(',') {
            let name = name.rsplit(" as ").next().unwrap().trim();
            if !name.is_empty() {
                items.insert(name.to_owned(), module.to_owned());
            }
        }
    }
    items
}

/// The first segment of every `crate::` path, including each member of
/// `use crate::{a::X, b}` groups.
fn crate_paths(text: &str) -> BTreeSet<String> {
    let ident = |s: &str| -> String {
        s.chars()
            .take_while(|c| c.is_alphanumeric() || *c == '_')
            .collect()
    };
    let mut names = BTreeSet::new();
    for (at, _) in text.match_indices("crate::") {
        let rest = &text[at + "crate::".len()..];
        if let Some(group) = rest.strip_prefix('{') {
            let group = &group[..group.find(';').unwrap_or(group.len())];
            // Members at the group's top level: after `{` or a `,` at depth 0.
            let mut depth = 0;
            let mut start = true;
            for (i, c) in group.char_indices() {
                match c {
                    '{' => depth += 1,
                    '}' => depth -= 1,
                    ',' if depth == 0 => start = true,
                    c if c.is_whitespace() => {}
                    _ if start => {
                        names.insert(ident(&group[i..]));
                        start = false;
                    }
                    _ => {}
                }
            }
        } else {
            names.insert(ident(rest));
        }
    }
    names.remove("");
    names
}

/// `text` without `//` comments (doc links are not imports).
fn without_comments(text: &str) -> String {
    text.lines()
        .map(|line| line.find("//").map_or(line, |at| &line[..at]))
        .collect::<Vec<_>>()
        .join("\n")
}

fn rust_files(dir: &Path) -> Vec<PathBuf> {
    let mut files = Vec::new();
    for entry in std::fs::read_dir(dir).unwrap() {
        let path = entry.unwrap().path();
        if path.is_dir() {
            files.extend(rust_files(&path));
        } else if path.extension().is_some_and(|e| e == "rs") {
            files.push(path);
        }
    }
    files.sort();
    files
}

/// The strongly connected components of more than one module (Tarjan).
fn strongly_connected(graph: &Graph) -> Vec<BTreeSet<String>> {
    struct Walk<'a> {
        graph: &'a Graph,
        index: BTreeMap<&'a str, usize>,
        low: BTreeMap<&'a str, usize>,
        stack: Vec<&'a str>,
        components: Vec<BTreeSet<String>>,
    }
    impl<'a> Walk<'a> {
        fn visit(&mut self, v: &'a str) {
            let i = self.index.len();
            self.index.insert(v, i);
            self.low.insert(v, i);
            self.stack.push(v);
            let graph = self.graph;
            for w in graph.get(v).into_iter().flat_map(|e| e.keys()) {
                if !self.index.contains_key(w.as_str()) {
                    self.visit(w);
                    let low = self.low[v].min(self.low[w.as_str()]);
                    self.low.insert(v, low);
                } else if self.stack.contains(&w.as_str()) {
                    let low = self.low[v].min(self.index[w.as_str()]);
                    self.low.insert(v, low);
                }
            }
            if self.low[v] == self.index[v] {
                let mut component = BTreeSet::new();
                while let Some(w) = self.stack.pop() {
                    component.insert(w.to_owned());
                    if w == v {
                        break;
                    }
                }
                if component.len() > 1 {
                    self.components.push(component);
                }
            }
        }
    }
    let mut walk = Walk {
        graph,
        index: BTreeMap::new(),
        low: BTreeMap::new(),
        stack: Vec::new(),
        components: Vec::new(),
    };
    for v in graph.keys() {
        if !walk.index.contains_key(v.as_str()) {
            walk.visit(v);
        }
    }
    walk.components
}
