//! The house rule that modules import in one direction only, checked for every crate of the
//! workspace from its `crate::`, `super::` and `self::` paths.
//!
//! A crate's modules form a tree. Each path from a module `A` to a module `B` is taken at the
//! level of their lowest common ancestor `M`: it is an edge from the child of `M` that holds `A`
//! to the child of `M` that holds `B` (so `run/contenders.rs` naming `engines::Engine` is the
//! edge `run → engines`, and `experiments/soak.rs` naming `experiments::safety` is
//! `soak → safety`). A parent naming its child, or a child its parent, is composition, not an
//! edge. The rule: among the children of any module, these edges form no cycle. A vocabulary
//! type two siblings both need then lives in a leaf module below both, and the pipeline's
//! folders import downwards only.
//!
//! `#[cfg(test)]` modules are left out: tests may reach anywhere, they are not part of the
//! layering a reader follows.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

/// One reference: the file and line it is on, and the module path it names.
#[derive(Debug, Clone)]
struct Reference {
    file: PathBuf,
    line: usize,
    target: Vec<String>,
}

/// The module path of a source file (`src/engines/mod.rs` → `["engines"]`).
fn module_of(src: &Path, file: &Path) -> Vec<String> {
    let rel = file.strip_prefix(src).expect("under src");
    let mut parts: Vec<String> =
        rel.iter().map(|p| p.to_string_lossy().trim_end_matches(".rs").to_string()).collect();
    if matches!(parts.last().map(String::as_str), Some("mod" | "lib" | "main")) {
        parts.pop();
    }
    parts
}

fn rust_files(dir: &Path, out: &mut Vec<PathBuf>) {
    let mut entries: Vec<_> = std::fs::read_dir(dir).expect("read dir").flatten().collect();
    entries.sort_by_key(|e| e.path());
    for e in entries {
        let p = e.path();
        if p.is_dir() {
            rust_files(&p, out);
        } else if p.extension().is_some_and(|x| x == "rs") {
            out.push(p);
        }
    }
}

/// The lines of a file outside its `#[cfg(test)]` modules, with their numbers.
fn non_test_lines(text: &str) -> Vec<(usize, &str)> {
    let mut out = Vec::new();
    let mut skip_until: Option<String> = None;
    let mut after_cfg_test = false;
    for (i, line) in text.lines().enumerate() {
        if let Some(close) = &skip_until {
            if line == close {
                skip_until = None;
            }
            continue;
        }
        let trimmed = line.trim_start();
        if trimmed.starts_with("#[cfg(test)]") {
            after_cfg_test = true;
            continue;
        }
        if after_cfg_test && trimmed.starts_with("mod ") && trimmed.ends_with('{') {
            let indent = &line[..line.len() - trimmed.len()];
            skip_until = Some(format!("{indent}}}"));
            after_cfg_test = false;
            continue;
        }
        after_cfg_test = false;
        // Comments (docs included) name paths for the reader, not the compiler.
        let code = match line.find("//") {
            Some(at) => &line[..at],
            None => line,
        };
        out.push((i + 1, code));
    }
    out
}

/// The path trees that start at `root` (`crate`, `super` or `self`) in `code`, expanded:
/// `crate::{a::B, c::{d, e}}` gives `a::B`, `c::d` and `c::e`.
fn paths_from(code: &str, root: &str) -> Vec<Vec<String>> {
    let mut out = Vec::new();
    let pat = format!("{root}::");
    let bytes = code.as_bytes();
    let mut from = 0;
    while let Some(at) = code[from..].find(&pat) {
        let start = from + at;
        from = start + pat.len();
        // Only whole words: not `my_crate::` nor `a.super::`.
        if start > 0 && (bytes[start - 1].is_ascii_alphanumeric() || bytes[start - 1] == b'_') {
            continue;
        }
        // `super::super::x` is one path that climbs twice, not two paths.
        let mut rest = &code[from..];
        let mut prefix = Vec::new();
        while let Some(r) = rest.strip_prefix("super::") {
            prefix.push("super".to_string());
            rest = r;
            from += "super::".len();
        }
        expand_tree(rest, prefix, &mut out);
    }
    out
}

/// Expand one use tree at the start of `s` into `out`, each path prefixed by `prefix`.
fn expand_tree(s: &str, prefix: Vec<String>, out: &mut Vec<Vec<String>>) {
    let s = s.trim_start();
    if let Some(inner) = s.strip_prefix('{') {
        // Split the braces' content at top-level commas.
        let mut depth = 0;
        let mut item = String::new();
        for c in inner.chars() {
            match c {
                '{' => depth += 1,
                '}' if depth == 0 => break,
                '}' => depth -= 1,
                ',' if depth == 0 => {
                    expand_tree(&item, prefix.clone(), out);
                    item.clear();
                    continue;
                }
                _ => {}
            }
            item.push(c);
        }
        if !item.trim().is_empty() {
            expand_tree(&item, prefix, out);
        }
        return;
    }
    let ident: String = s.chars().take_while(|c| c.is_alphanumeric() || *c == '_').collect();
    if ident.is_empty() {
        if !prefix.is_empty() {
            out.push(prefix);
        }
        return;
    }
    let mut path = prefix;
    path.push(ident.clone());
    match s[ident.len()..].strip_prefix("::") {
        Some(rest) => expand_tree(rest, path, out),
        None => out.push(path),
    }
}

/// A module's path from the crate root (`["run", "contenders"]`).
type ModPath = Vec<String>;

/// Every module-to-module reference of the crate whose sources are in `src`.
fn references(src: &Path) -> (BTreeSet<ModPath>, BTreeMap<ModPath, Vec<Reference>>) {
    let mut files = Vec::new();
    rust_files(src, &mut files);
    let modules: BTreeSet<Vec<String>> = files.iter().map(|f| module_of(src, f)).collect();
    let mut refs: BTreeMap<Vec<String>, Vec<Reference>> = BTreeMap::new();
    for file in &files {
        let here = module_of(src, file);
        let text = std::fs::read_to_string(file).expect("read source");
        for (line, code) in non_test_lines(&text) {
            let mut found = Vec::new();
            found.extend(paths_from(code, "crate"));
            for p in paths_from(code, "self") {
                found.push(here.iter().cloned().chain(p).collect());
            }
            for p in paths_from(code, "super") {
                // One level for the `super` matched, one more for each that followed it.
                let ups = 1 + p.iter().take_while(|s| *s == "super").count();
                let mut base = here.clone();
                base.truncate(here.len().saturating_sub(ups));
                base.extend(p.into_iter().skip_while(|s| s == "super"));
                found.push(base);
            }
            for path in found {
                // The longest prefix that is a module of this crate.
                let target = (0..=path.len())
                    .rev()
                    .map(|n| path[..n].to_vec())
                    .find(|p| modules.contains(p))
                    .unwrap_or_default();
                refs.entry(here.clone()).or_default().push(Reference {
                    file: file.clone(),
                    line,
                    target,
                });
            }
        }
    }
    (modules, refs)
}

/// The cycles among siblings: for each cycle, its modules and the references that make it.
fn cycles(src: &Path) -> Vec<String> {
    let (_, refs) = references(src);
    // parent → (child → child → references)
    type Edges = BTreeMap<(String, String), Vec<Reference>>;
    let mut levels: BTreeMap<ModPath, Edges> = BTreeMap::new();
    for (from, list) in &refs {
        for r in list {
            let common = from.iter().zip(&r.target).take_while(|(a, b)| a == b).count();
            if common == from.len() || common == r.target.len() {
                continue; // ancestor and descendant
            }
            let key = (from[common].clone(), r.target[common].clone());
            levels
                .entry(from[..common].to_vec())
                .or_default()
                .entry(key)
                .or_default()
                .push(r.clone());
        }
    }
    let mut found = Vec::new();
    for (parent, edges) in &levels {
        let reach = |a: &str, b: &str| -> bool {
            let mut seen = BTreeSet::new();
            let mut stack = vec![a.to_string()];
            while let Some(n) = stack.pop() {
                if n == b {
                    return true;
                }
                if seen.insert(n.clone()) {
                    stack.extend(edges.keys().filter(|(x, _)| *x == n).map(|(_, y)| y.clone()));
                }
            }
            false
        };
        for ((a, b), list) in edges {
            if reach(b, a) {
                let first = &list[0];
                found.push(format!(
                    "in `{}`: `{a}` → `{b}` ({}:{} names `{}`), and `{b}` reaches `{a}` back",
                    if parent.is_empty() { "crate".to_string() } else { parent.join("::") },
                    first.file.display(),
                    first.line,
                    first.target.join("::"),
                ));
            }
        }
    }
    found
}

/// The workspace's crates: the folders beside this one with a manifest and a `src`.
pub(crate) fn workspace_crates() -> Vec<PathBuf> {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).parent().expect("workspace root");
    let mut crates: Vec<PathBuf> = std::fs::read_dir(root)
        .expect("read workspace")
        .flatten()
        .map(|e| e.path())
        .filter(|p| p.join("Cargo.toml").is_file() && p.join("src").is_dir())
        .collect();
    crates.sort();
    crates
}

#[test]
fn no_module_imports_one_that_imports_it_back() {
    let crates = workspace_crates();
    assert!(crates.len() >= 10, "found only {crates:?}");
    let mut problems = Vec::new();
    for krate in &crates {
        problems.extend(cycles(&krate.join("src")));
    }
    assert!(problems.is_empty(), "import cycles:\n{}", problems.join("\n"));
}

/// The checker finds a cycle it is shown, and none where there is none.
#[test]
fn the_checker_sees_a_planted_cycle() {
    let dir = std::env::temp_dir().join(format!("layering-{}", std::process::id()));
    let src = dir.join("src");
    std::fs::create_dir_all(src.join("engines")).unwrap();
    std::fs::write(src.join("lib.rs"), "pub mod config;\npub mod engines;\n").unwrap();
    std::fs::write(src.join("engines/mod.rs"), "pub mod embedded;\npub trait Engine {}\n").unwrap();
    std::fs::write(src.join("engines/embedded.rs"), "use super::Engine;\n").unwrap();
    std::fs::write(src.join("config.rs"), "use crate::engines::{embedded, Engine};\n").unwrap();
    assert!(cycles(&src).is_empty(), "{:?}", cycles(&src));
    std::fs::write(
        src.join("engines/embedded.rs"),
        "use super::Engine;\n#[cfg(test)]\nmod tests {\n    use crate::config::X;\n}\n",
    )
    .unwrap();
    assert!(cycles(&src).is_empty(), "tests are left out: {:?}", cycles(&src));
    std::fs::write(src.join("engines/embedded.rs"), "fn f(_: crate::config::RunConfig) {}\n")
        .unwrap();
    let found = cycles(&src);
    std::fs::remove_dir_all(&dir).unwrap();
    assert_eq!(found.len(), 2, "{found:?}");
    assert!(found.iter().any(|c| c.contains("`engines` → `config`")), "{found:?}");
}
