//! Each crate of the workspace links its integration tests into one binary: `tests/main.rs`
//! declares every other `tests/*.rs` file as a module, and the crate's manifest turns cargo's
//! discovery of test files off (`autotests = false`, one `[[test]]` named `integration`). A
//! file left out of `tests/main.rs` would then be compiled by nobody and its tests never run,
//! with no warning: this test finds such a file.

use std::path::{Path, PathBuf};

use crate::layering::workspace_crates;

/// The files of `tests` (a crate's tests directory) that its `main.rs` does not declare with
/// `mod NAME;`, or every file when there is no `main.rs`.
fn undeclared(tests: &Path) -> Vec<PathBuf> {
    let main = std::fs::read_to_string(tests.join("main.rs")).unwrap_or_default();
    let declared = |name: &str| main.lines().any(|l| l.trim() == format!("mod {name};"));
    let mut missing: Vec<PathBuf> = std::fs::read_dir(tests)
        .map(|d| d.flatten().map(|e| e.path()).collect::<Vec<_>>())
        .unwrap_or_default()
        .into_iter()
        .filter(|p| p.extension().is_some_and(|e| e == "rs"))
        .filter(|p| {
            p.file_stem().and_then(|s| s.to_str()).is_some_and(|s| s != "main" && !declared(s))
        })
        .collect();
    missing.sort();
    missing
}

#[test]
fn every_test_file_is_a_module_of_its_crates_test_binary() {
    let crates = workspace_crates();
    assert!(crates.len() >= 10, "found the workspace's crates: {crates:?}");
    let mut missing = Vec::new();
    for krate in &crates {
        if !krate.join("tests").is_dir() {
            continue;
        }
        let manifest = std::fs::read_to_string(krate.join("Cargo.toml")).unwrap();
        assert!(
            manifest.contains("autotests = false") && manifest.contains("path = \"tests/main.rs\""),
            "{}: its tests are not linked as one binary (autotests = false, [[test]] tests/main.rs)",
            krate.display()
        );
        missing.extend(undeclared(&krate.join("tests")));
    }
    assert!(missing.is_empty(), "not declared in their crate's tests/main.rs: {missing:?}");
}

/// The check finds a file it is shown, and nothing when every file is declared.
#[test]
fn the_check_sees_a_planted_file() {
    let dir = std::env::temp_dir().join(format!("test-targets-{}", std::process::id()));
    std::fs::create_dir_all(dir.join("support")).unwrap();
    std::fs::write(dir.join("main.rs"), "mod support;\n\nmod a;\n").unwrap();
    std::fs::write(dir.join("a.rs"), "").unwrap();
    std::fs::write(dir.join("support/mod.rs"), "").unwrap();
    assert!(undeclared(&dir).is_empty(), "{:?}", undeclared(&dir));
    std::fs::write(dir.join("b.rs"), "").unwrap();
    let found = undeclared(&dir);
    std::fs::remove_dir_all(&dir).unwrap();
    assert_eq!(found, vec![dir.join("b.rs")]);
}
