//! docs/architecture.md's inventories cannot fall behind the code: its
//! routes are the router's (as the OpenAPI document, which covers every
//! route, lists them), its tables are those the migrations create, and its
//! migrations are the files in `migrations/`. On a mismatch the test prints
//! the section as it should read.

#[path = "support/lib.rs"]
mod support;

use std::collections::BTreeSet;

use support::TestApp;

fn doc() -> String {
    std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/../docs/architecture.md")).unwrap()
}

/// The table rows between `<!-- NAME:begin -->` and `<!-- NAME:end -->`,
/// header and separator left out, each as its cells.
fn rows(doc: &str, name: &str) -> Vec<Vec<String>> {
    let begin = format!("<!-- {name}:begin -->");
    let end = format!("<!-- {name}:end -->");
    let start = doc.find(&begin).unwrap_or_else(|| panic!("docs/architecture.md has no {begin}")) + begin.len();
    let stop = doc[start..].find(&end).unwrap_or_else(|| panic!("docs/architecture.md has no {end}")) + start;
    doc[start..stop]
        .lines()
        .filter(|l| l.starts_with('|'))
        .skip(2)
        .map(|l| l.trim_matches('|').split('|').map(|c| c.trim().trim_matches('`').to_owned()).collect())
        .collect()
}

fn migrations() -> Vec<(String, String)> {
    let dir = concat!(env!("CARGO_MANIFEST_DIR"), "/../migrations");
    let mut files: Vec<(u32, String, String)> = std::fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap())
        .map(|e| {
            let name = e.file_name().to_string_lossy().into_owned();
            let n: u32 = name[1..name.find("__").unwrap()].parse().unwrap();
            (n, name, std::fs::read_to_string(e.path()).unwrap())
        })
        .collect();
    files.sort();
    files.into_iter().map(|(_, name, sql)| (name, sql)).collect()
}

#[tokio::test]
async fn the_routes_in_the_architecture_doc_are_the_routers() {
    let app = TestApp::start("inventory").await;
    let spec = app.get("/openapi.json").await.json();
    let mut actual = BTreeSet::new();
    for (path, ops) in spec["paths"].as_object().unwrap() {
        for (method, op) in ops.as_object().unwrap() {
            let tag = op["tags"][0].as_str().unwrap_or_default().to_owned();
            actual.insert((path.clone(), method.to_uppercase(), tag));
        }
    }
    let documented: BTreeSet<(String, String, String)> =
        rows(&doc(), "routes").into_iter().map(|r| (r[1].clone(), r[0].clone(), r[2].clone())).collect();
    let expected: String =
        actual.iter().map(|(path, method, tag)| format!("| {method} | `{path}` | {tag} |\n")).collect();
    assert_eq!(documented, actual, "docs/architecture.md's routes should read:\n{expected}");
}

#[test]
fn the_tables_and_migrations_in_the_architecture_doc_are_the_migrations() {
    let migrations = migrations();
    let mut created: Vec<(String, String)> = Vec::new();
    for (file, sql) in &migrations {
        for line in sql.lines() {
            let Some(rest) = line.trim().strip_prefix("CREATE TABLE ") else { continue };
            if line.contains("PARTITION OF") {
                continue;
            }
            let name = rest.split_whitespace().next().unwrap().trim_end_matches('(').to_owned();
            created.push((name, file.clone()));
        }
    }
    let doc = doc();
    let documented: Vec<(String, String)> =
        rows(&doc, "tables").into_iter().map(|r| (r[0].clone(), r[1].clone())).collect();
    let expected: String = created.iter().map(|(t, f)| format!("| `{t}` | `{f}` | ... |\n")).collect();
    assert_eq!(documented, created, "docs/architecture.md's tables should be, in this order:\n{expected}");
    let files: Vec<String> = migrations.iter().map(|(f, _)| f.clone()).collect();
    let listed: Vec<String> = rows(&doc, "migrations").into_iter().map(|r| r[0].clone()).collect();
    let expected: String = files.iter().map(|f| format!("| `{f}` | ... |\n")).collect();
    assert_eq!(listed, files, "docs/architecture.md's migrations should be:\n{expected}");
}

/// Every `.rs` file under `dir`, as a path relative to the repository.
fn source_files(root: &std::path::Path, dir: &std::path::Path, out: &mut Vec<String>) {
    for entry in std::fs::read_dir(dir).unwrap().map(|e| e.unwrap()) {
        let path = entry.path();
        let name = entry.file_name().to_string_lossy().into_owned();
        if path.is_dir() && !matches!(name.as_str(), "target" | "vendor" | "node_modules" | ".git") {
            source_files(root, &path, out);
        } else if name.ends_with(".rs") {
            out.push(path.strip_prefix(root).unwrap().to_string_lossy().into_owned());
        }
    }
}

/// The code map and the prose name source files (`feed.rs`,
/// `dispatch/lock.rs`, `common/store/src/jobs.rs`): each must still exist,
/// so that a file renamed or moved takes the documentation with it.
#[test]
fn every_source_file_the_architecture_doc_names_exists() {
    let root = std::path::Path::new(concat!(env!("CARGO_MANIFEST_DIR"), "/.."));
    let mut files = Vec::new();
    source_files(root, root, &mut files);
    let doc = doc();
    let named: BTreeSet<&str> = doc
        .split('`')
        .skip(1)
        .step_by(2)
        .filter(|s| s.ends_with(".rs") && s.chars().all(|c| c.is_ascii_alphanumeric() || "_./-".contains(c)))
        .collect();
    assert!(named.len() > 50, "the doc names {} files: the pattern no longer reads it", named.len());
    let missing: Vec<&str> =
        named.into_iter().filter(|n| !files.iter().any(|f| f == n || f.ends_with(&format!("/{n}")))).collect();
    assert!(missing.is_empty(), "docs/architecture.md names files that do not exist: {missing:?}");
}

/// Each crate of the workspace is described in the code map.
#[test]
fn every_crate_of_the_workspace_is_in_the_code_map() {
    let manifest = std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/../Cargo.toml")).unwrap();
    let members = manifest.split("members = [").nth(1).and_then(|m| m.split(']').next()).unwrap();
    let doc = doc();
    let code_map = doc.split("## Code map").nth(1).expect("a code map section");
    for member in members.split(',').map(|m| m.trim().trim_matches('"')).filter(|m| !m.is_empty()) {
        assert!(code_map.contains(&format!("**`{member}")), "the code map does not describe the crate {member}");
    }
}
