//! The front ends stand on the library's public API alone (docs/ARCHITECTURE.md): the CLI
//! (this package) and the Python extension (`python/`) neither depend on the bench
//! package nor turn on the checkers' seam, and their sources never name either.
//! (`.ci/publish` also compiles the CLI from its tarball against `shmrc` without the
//! seam.) Shown to fail on a planted dependency and a planted import.

use std::path::{Path, PathBuf};

/// What a front end's manifest must not name among its dependencies: the bench package,
/// the seam's feature.
const IN_MANIFEST: [&str; 2] = ["shmrc-bench", "checkers"];
/// What its sources must not name: the bench crate, the seam (the program's name,
/// `shmrc-bench`, is fine).
const IN_SOURCES: [&str; 2] = ["shmrc_bench", "checkers::"];

/// Every forbidden name in a manifest's dependency sections, or in its `src/` files.
fn forbidden_names(package: &Path) -> Vec<String> {
    let mut found = Vec::new();
    let manifest = std::fs::read_to_string(package.join("Cargo.toml")).unwrap();
    let mut in_dependencies = false;
    for line in manifest.lines() {
        if line.starts_with('[') {
            in_dependencies = line.trim() == "[dependencies]";
        }
        found.extend(scan(&IN_MANIFEST, in_dependencies, line, "Cargo.toml"));
    }
    let mut stack = vec![package.join("src")];
    while let Some(dir) = stack.pop() {
        for entry in std::fs::read_dir(&dir).unwrap() {
            let path = entry.unwrap().path();
            if path.is_dir() {
                stack.push(path);
            } else if path.extension().is_some_and(|e| e == "rs") {
                let source = std::fs::read_to_string(&path).unwrap();
                for line in source.lines().filter(|l| !l.trim_start().starts_with("//")) {
                    found.extend(scan(&IN_SOURCES, true, line, &path.display().to_string()));
                }
            }
        }
    }
    found
}

fn scan(forbidden: &[&str], active: bool, line: &str, file: &str) -> Vec<String> {
    forbidden
        .iter()
        .filter(|name| active && line.contains(*name))
        .map(|name| format!("{file}: {name} in {line:?}"))
        .collect()
}

fn package(name: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("..").join(name)
}

#[test]
fn the_cli_and_the_python_extension_use_the_public_api_alone() {
    assert_eq!(forbidden_names(&package("cli")), Vec::<String>::new());
    assert_eq!(forbidden_names(&package("python")), Vec::<String>::new());
}

#[test]
fn a_planted_dependency_and_a_planted_import_are_caught() {
    let planted = tempfile::tempdir().unwrap();
    std::fs::create_dir(planted.path().join("src")).unwrap();
    std::fs::write(
        planted.path().join("Cargo.toml"),
        "[package]\nname = \"x\"\n[dependencies]\nshmrc = { path = \"..\", features = [\"checkers\"] }\n\
         [dev-dependencies]\nshmrc-bench = \"0.1\"\n",
    )
    .unwrap();
    std::fs::write(
        planted.path().join("src/main.rs"),
        "// shmrc_bench in a comment is fine\nuse shmrc_bench::harness;\nconst P: &str = \"shmrc-bench\";\n",
    )
    .unwrap();
    let found = forbidden_names(planted.path());
    assert_eq!(found.len(), 2, "{found:#?}");
    assert!(found[0].contains("checkers") && found[1].contains("shmrc_bench"));
}
