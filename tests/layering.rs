//! The library's layering, checked from its source (docs/ARCHITECTURE.md draws it): the
//! syscall layer `src/os/` imports nothing above it (only `error`, `token`, `local`,
//! `sync` and itself); the protocol rooms (the refcount, the sweeps, the manager and what
//! they stand on) import no user room (buffers, handles, pools, transport, channels,
//! CUDA, reports); no module imports the crate's face (`crate::Item` for an item that is
//! only re-exported at the root); the top-level modules import each other without a
//! cycle, and so do the files of each room folder but `os/` (`protocol/` and its
//! `holders/`, `manager/`, `cuda/`, `buf/`, `channel/`, `pubsub/`). Unit-test modules are left
//! out (a test may reach anything: `mod tests { .. }` blocks, `tests.rs` files and
//! `src/tests/`);
//! doc comments and comments are too. The checker
//! is shown to fail on a planted upward import and a planted cycle.
// A check of the sources, not of a build: once, in the normal build.
#![cfg(not(any(shmrc_loom, shmrc_shuttle)))]

use std::collections::{BTreeMap, BTreeSet};
use std::path::Path;

/// What `src/os/` may import besides itself.
const BELOW_OS: [&str; 4] = ["error", "token", "local", "sync"];

/// The protocol rooms: the crash-safe refcount and what it stands on, the sweeps, the
/// manager. They never import a room of the user API.
const PROTOCOL_ROOMS: [&str; 10] = [
    "sync",
    "token",
    "error",
    "local",
    "namespace",
    "environment",
    "strategy",
    "os",
    "protocol",
    "manager",
];

/// The rooms of the user API, above the protocol rooms.
const USER_ROOMS: [&str; 9] = [
    "buf",
    "handle",
    "in_flight",
    "pool",
    "pubsub",
    "transport",
    "channel",
    "cuda",
    "report",
];

/// Module name → the top-level modules it imports, with one place each.
type Graph = BTreeMap<String, BTreeMap<String, String>>;

/// The `crate::` imports of one file's non-test code, as top-level module names with the
/// line they are on. Groups are read whole, over several lines and nested
/// (`use crate::{a::{b, c}, d};`).
fn imports(source: &str, modules: &BTreeSet<String>) -> Vec<(String, usize)> {
    let code = match source.find("#[cfg(test)]\nmod tests") {
        Some(at) => &source[..at],
        None => match source.find("\nmod tests {") {
            Some(at) if source[..at].ends_with(")]") => &source[..at],
            _ => source,
        },
    };
    // Comment lines blanked (line numbers kept).
    let code: String = code
        .lines()
        .map(|line| {
            if line.trim_start().starts_with("//") {
                ""
            } else {
                line
            }
        })
        .collect::<Vec<_>>()
        .join("\n");
    let line_of = |at: usize| code[..at].matches('\n').count() + 1;
    let mut found = Vec::new();
    let mut from = 0;
    while let Some(at) = code[from..].find("crate::") {
        let start = from + at + "crate::".len();
        from = start;
        let rest = &code[start..];
        let names: Vec<&str> = if let Some(group) = rest.strip_prefix('{') {
            top_level_items(group)
        } else {
            vec![rest]
        };
        for name in names {
            let ident: String = name
                .trim()
                .chars()
                .take_while(|c| c.is_ascii_alphanumeric() || *c == '_')
                .collect();
            if modules.contains(&ident) {
                found.push((ident.clone(), line_of(start)));
            } else if !ident.is_empty() {
                // An item of the crate's face (`crate::ShmBuf`, `crate::sweep(..)`):
                // whatever it re-exports, the import points up to lib.rs.
                found.push((ROOT.to_owned(), line_of(start)));
            }
        }
    }
    found
}

/// The items of a `{ ... }` group (`group` starts after the `{`), split at its own
/// commas, nested groups kept whole.
fn top_level_items(group: &str) -> Vec<&str> {
    let mut items = Vec::new();
    let (mut depth, mut item_start) = (0usize, 0);
    for (i, c) in group.char_indices() {
        match c {
            '{' => depth += 1,
            '}' if depth == 0 => {
                items.push(&group[item_start..i]);
                return items;
            }
            '}' => depth -= 1,
            ',' if depth == 0 => {
                items.push(&group[item_start..i]);
                item_start = i + 1;
            }
            _ => {}
        }
    }
    items.push(&group[item_start..]);
    items
}

/// What [`imports`] calls the crate's face (lib.rs and its re-exports).
const ROOT: &str = "<root>";

/// The import graph of the top-level modules of `src`.
fn graph(src: &Path) -> Graph {
    let modules: BTreeSet<String> = std::fs::read_dir(src)
        .unwrap()
        .filter_map(|e| {
            let name = e.ok()?.file_name().into_string().ok()?;
            Some(name.trim_end_matches(".rs").to_owned())
        })
        .filter(|name| name != "lib" && name != "main")
        .collect();
    let mut graph = Graph::new();
    let mut stack = vec![src.to_owned()];
    while let Some(dir) = stack.pop() {
        for entry in std::fs::read_dir(&dir).unwrap() {
            let path = entry.unwrap().path();
            if path.is_dir() {
                stack.push(path);
                continue;
            }
            let rel = path.strip_prefix(src).unwrap();
            let top = rel.iter().next().unwrap().to_string_lossy();
            let top = top.trim_end_matches(".rs").to_owned();
            // `tests.rs` files, and `src/tests/`: the crate's cross-module unit tests.
            let is_test_module =
                top == "tests" || path.file_name().is_some_and(|name| name == "tests.rs");
            if top == "lib" || is_test_module || path.extension().is_none_or(|e| e != "rs") {
                continue;
            }
            let source = std::fs::read_to_string(&path).unwrap();
            for (module, line) in imports(&source, &modules) {
                if module != top {
                    graph
                        .entry(top.clone())
                        .or_default()
                        .entry(module)
                        .or_insert_with(|| format!("{}:{line}", rel.display()));
                }
            }
        }
    }
    graph
}

/// Every import of `os` that is not below it.
fn upward_from_os(graph: &Graph) -> Vec<String> {
    graph
        .get("os")
        .into_iter()
        .flatten()
        .filter(|(module, _)| !BELOW_OS.contains(&module.as_str()))
        .map(|(module, at)| format!("os imports {module} at {at}"))
        .collect()
}

/// Every import of a user room by a protocol room.
fn protocol_importing_user_rooms(graph: &Graph) -> Vec<String> {
    PROTOCOL_ROOMS
        .iter()
        .flat_map(|room| {
            graph
                .get(*room)
                .into_iter()
                .flatten()
                .filter(|(module, _)| USER_ROOMS.contains(&module.as_str()))
                .map(move |(module, at)| format!("{room} imports {module} at {at}"))
        })
        .collect()
}

/// Every import of the crate's face.
fn imports_of_the_root(graph: &Graph) -> Vec<String> {
    graph
        .iter()
        .filter_map(|(room, imports)| {
            imports
                .get(ROOT)
                .map(|at| format!("{room} imports the crate root at {at}"))
        })
        .collect()
}

/// The import graph of the files of one room (`src/manager/`): `super::x` and
/// `crate::manager::x` imports between its files. A folder inside the room
/// (`protocol/holders/`) is one module, its files' imports its own (the files of the
/// folder itself, importing each other through `super::`, are that module's inside).
fn room_graph(room: &Path) -> Graph {
    let files: BTreeSet<String> = std::fs::read_dir(room)
        .unwrap()
        .filter_map(|e| {
            let entry = e.ok()?;
            let name = entry.file_name().into_string().ok()?;
            if entry.path().join("mod.rs").exists() {
                return Some(name);
            }
            Some(name.strip_suffix(".rs")?.to_owned())
        })
        .filter(|name| name != "mod" && name != "tests")
        .collect();
    let room_name = room.file_name().unwrap().to_string_lossy().into_owned();
    let room_path = room_path(room);
    let mut graph = Graph::new();
    for file in &files {
        let sources: Vec<(String, String)> = if room.join(file).is_dir() {
            std::fs::read_dir(room.join(file))
                .unwrap()
                .filter_map(|e| {
                    let name = e.ok()?.file_name().into_string().ok()?;
                    (name.ends_with(".rs") && name != "tests.rs").then(|| {
                        let at = format!("{room_name}/{file}/{name}");
                        let source = std::fs::read_to_string(room.join(file).join(&name));
                        // Inside the folder, `super::` is the folder's own module.
                        (at, source.unwrap().replace("super::", "self::"))
                    })
                })
                .collect()
        } else {
            let source = std::fs::read_to_string(room.join(format!("{file}.rs"))).unwrap();
            vec![(format!("{room_name}/{file}.rs"), source)]
        };
        for (at, source) in sources {
            // The room's own paths become `crate::` (what `imports` reads), and every
            // other `crate::` path is set aside (`crate::buf` in `cuda/` is not
            // `cuda/buf.rs`).
            let source = source.replace(&format!("crate::{room_path}::"), "\0");
            let source = source.replace("super::", "\0");
            let source = source.replace("crate::", "outside::");
            let source = source.replace('\0', "crate::");
            for (module, line) in imports(&source, &files) {
                if module != *file {
                    graph
                        .entry(file.clone())
                        .or_default()
                        .entry(module)
                        .or_insert_with(|| format!("{at}:{line}"));
                }
            }
        }
    }
    graph
}

/// The module path of room folder `room` under `src/` (`manager`, `os::posix`).
fn room_path(room: &Path) -> String {
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
    let rel = room.strip_prefix(&src).unwrap_or(room);
    rel.iter()
        .map(|c| c.to_string_lossy().into_owned())
        .collect::<Vec<_>>()
        .join("::")
}

/// A cycle of imports, as the modules along it, if there is one.
fn cycle(graph: &Graph) -> Option<Vec<String>> {
    fn visit(
        graph: &Graph,
        node: &str,
        path: &mut Vec<String>,
        done: &mut BTreeSet<String>,
    ) -> Option<Vec<String>> {
        if let Some(at) = path.iter().position(|n| n == node) {
            let mut found = path[at..].to_vec();
            found.push(node.to_owned());
            return Some(found);
        }
        if done.contains(node) {
            return None;
        }
        path.push(node.to_owned());
        for next in graph.get(node).into_iter().flat_map(|m| m.keys()) {
            if let Some(found) = visit(graph, next, path, done) {
                return Some(found);
            }
        }
        path.pop();
        done.insert(node.to_owned());
        None
    }
    let mut done = BTreeSet::new();
    graph
        .keys()
        .find_map(|node| visit(graph, node, &mut Vec::new(), &mut done))
}

/// Panics naming the places of a cycle in `graph`, if there is one.
fn assert_no_cycle(graph: &Graph) {
    if let Some(found) = cycle(graph) {
        let places: Vec<_> = found
            .windows(2)
            .map(|w| format!("{} -> {} ({})", w[0], w[1], graph[&w[0]][&w[1]]))
            .collect();
        panic!("import cycle: {}", places.join(", "));
    }
}

#[test]
fn the_syscall_layer_imports_only_what_is_below_it_and_modules_form_no_cycle() {
    let graph = graph(&Path::new(env!("CARGO_MANIFEST_DIR")).join("src"));
    assert!(graph.contains_key("buf"), "the graph was read: {graph:?}");
    assert_eq!(upward_from_os(&graph), Vec::<String>::new());
    assert_no_cycle(&graph);
}

#[test]
fn protocol_rooms_import_no_user_room_and_nothing_imports_the_crate_root() {
    let graph = graph(&Path::new(env!("CARGO_MANIFEST_DIR")).join("src"));
    assert!(
        graph.contains_key("protocol"),
        "the graph was read: {graph:?}"
    );
    for room in PROTOCOL_ROOMS.iter().chain(&USER_ROOMS) {
        assert!(
            Path::new(env!("CARGO_MANIFEST_DIR"))
                .join("src")
                .join(room)
                .with_extension("rs")
                .exists()
                || Path::new(env!("CARGO_MANIFEST_DIR"))
                    .join("src")
                    .join(room)
                    .is_dir(),
            "the room {room} named here exists in src/"
        );
    }
    assert_eq!(protocol_importing_user_rooms(&graph), Vec::<String>::new());
    assert_eq!(imports_of_the_root(&graph), Vec::<String>::new());
}

/// The room folders whose files must form no cycle: every folder of `src/` but `os/`,
/// whose simulated kernel's files know each other (one kernel, several views of it), and
/// `tests/` (unit tests may reach anything).
const ACYCLIC_ROOMS: [&str; 8] = [
    "buf",
    "channel",
    "cuda",
    "manager",
    "pool",
    "protocol",
    "protocol/holders",
    "pubsub",
];

#[test]
fn the_files_of_each_room_folder_form_no_cycle() {
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
    let mut folders: Vec<String> = std::fs::read_dir(&src)
        .unwrap()
        .filter_map(|e| {
            let e = e.ok()?;
            e.path()
                .is_dir()
                .then(|| e.file_name().into_string().ok())?
        })
        .filter(|name| name != "os" && name != "tests")
        .collect();
    folders.push("protocol/holders".into());
    folders.sort();
    assert_eq!(folders, ACYCLIC_ROOMS, "each room folder is named here");
    for room in ACYCLIC_ROOMS {
        assert_no_cycle(&room_graph(&src.join(room)));
    }
    // The protocol folder was read as one: its sweep stands on the holders' folder.
    let protocol = room_graph(&src.join("protocol"));
    assert!(
        protocol
            .get("sweep")
            .is_some_and(|to| to.contains_key("holders") && to.contains_key("segment")),
        "the graph was read: {protocol:?}"
    );
}

#[test]
fn the_files_of_the_managers_room_form_no_cycle() {
    let graph = room_graph(&Path::new(env!("CARGO_MANIFEST_DIR")).join("src/manager"));
    assert!(
        graph
            .get("client")
            .is_some_and(|to| to.contains_key("connection")),
        "the graph was read: {graph:?}"
    );
    assert_no_cycle(&graph);
}

#[test]
fn the_checker_catches_an_upward_import_and_a_cycle() {
    let modules: BTreeSet<String> = ["os", "buf", "manager", "error", "sync"]
        .map(String::from)
        .into();
    let planted = "use crate::error::Result;\n// crate::buf in a comment\nuse crate::{sync::X, manager::client};\n#[cfg(test)]\nmod tests { use crate::buf; }\n";
    let found: Vec<String> = imports(planted, &modules)
        .into_iter()
        .map(|(m, _)| m)
        .collect();
    assert_eq!(found, ["error", "sync", "manager"]);

    let mut graph = Graph::new();
    for (from, to) in [
        ("os", "error"),
        ("os", "manager"),
        ("manager", "buf"),
        ("buf", "os"),
    ] {
        graph
            .entry(from.into())
            .or_default()
            .insert(to.into(), "x.rs:1".into());
    }
    assert_eq!(upward_from_os(&graph), ["os imports manager at x.rs:1"]);
    assert_eq!(
        cycle(&graph).unwrap(),
        ["buf", "os", "manager", "buf"].map(String::from)
    );
    graph.get_mut("buf").unwrap().clear();
    assert_eq!(cycle(&graph), None);

    // A protocol room that imports a user room, and an import of the crate's face.
    let planted = "use crate::buf::ShmBuf;\nuse crate::ShmPool;\n";
    let mut graph = Graph::new();
    for (module, line) in imports(planted, &modules) {
        graph
            .entry("protocol".into())
            .or_default()
            .insert(module, format!("protocol/sweep.rs:{line}"));
    }
    assert_eq!(
        protocol_importing_user_rooms(&graph),
        ["protocol imports buf at protocol/sweep.rs:1"]
    );
    assert_eq!(
        imports_of_the_root(&graph),
        ["protocol imports the crate root at protocol/sweep.rs:2"]
    );
}
