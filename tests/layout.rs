//! The arrows of `src/lib.rs`'s `# Layout` section, checked on the source: which room may
//! name which, which crates the pure rooms stay free of, no import cycles, and a Layout
//! section (and module docs) that name every module.
//!
//! A reference is any `crate::<room>` path or `use` of an external crate in code; comments and
//! string literals do not count, so a doc line may still point at another room.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

const SRC: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/src");

/// The top-level modules of the crate (files or directories under src/).
const ROOMS: [&str; 14] = [
    "learn",
    "data",
    "codec",
    "deque",
    "files",
    "config",
    "telemetry",
    "stream",
    "engine",
    "daemon",
    "serve",
    "cli",
    "lib",
    "main",
];

/// (room, the rooms it may name besides itself, the external crates among [`EXTERNAL`] it may
/// use). `cli`, `main` and `lib` may name everything; nothing may name `cli`.
const ALLOWED: [(&str, &[&str], &[&str]); 11] = [
    ("learn", &["data", "codec"], &[]),
    ("data", &[], &[]),
    ("codec", &[], &[]),
    ("deque", &[], &[]),
    ("files", &[], &[]),
    ("config", &["learn", "data"], &[]),
    ("telemetry", &["learn"], &[]),
    (
        "stream",
        &["data", "config", "deque", "files"],
        &["tokio", "rdkafka", "tracing"],
    ),
    (
        "engine",
        &[
            "stream",
            "data",
            "learn",
            "config",
            "telemetry",
            "codec",
            "deque",
            "files",
        ],
        &["tracing"],
    ),
    (
        "serve",
        &[
            "engine",
            "stream",
            "learn",
            "config",
            "telemetry",
            "data",
            "codec",
        ],
        &["tokio", "axum", "tracing"],
    ),
    (
        "daemon",
        &[
            "engine",
            "serve",
            "stream",
            "learn",
            "data",
            "config",
            "telemetry",
            "codec",
            "deque",
            "files",
        ],
        &["tokio", "rdkafka", "axum", "tracing"],
    ),
];

const EXTERNAL: [&str; 4] = ["tokio", "rdkafka", "axum", "tracing"];

/// Every `.rs` file under `dir`, sorted.
fn rust_files(dir: &Path) -> Vec<PathBuf> {
    let mut out = Vec::new();
    let mut stack = vec![dir.to_path_buf()];
    while let Some(d) = stack.pop() {
        for entry in std::fs::read_dir(&d).expect("read src") {
            let path = entry.expect("entry").path();
            if path.is_dir() {
                stack.push(path);
            } else if path.extension().is_some_and(|e| e == "rs") {
                out.push(path);
            }
        }
    }
    out.sort();
    out
}

/// The room a file under src/ belongs to: its first path component, without `.rs`.
fn room_of(path: &Path) -> String {
    let rel = path.strip_prefix(SRC).expect("under src");
    let first = rel
        .components()
        .next()
        .expect("component")
        .as_os_str()
        .to_string_lossy()
        .to_string();
    first.trim_end_matches(".rs").to_string()
}

/// The code of a Rust file with comments and string/char literals blanked out.
fn code_only(text: &str) -> String {
    let bytes = text.as_bytes();
    let mut out = String::with_capacity(text.len());
    let mut i = 0;
    while i < bytes.len() {
        let rest = &text[i..];
        if rest.starts_with("//") {
            let end = rest.find('\n').map_or(text.len(), |n| i + n);
            i = end;
        } else if rest.starts_with("/*") {
            let end = rest.find("*/").map_or(text.len(), |n| i + n + 2);
            i = end;
        } else if rest.starts_with("r#\"") || rest.starts_with("r\"") {
            let hashes = rest[1..].chars().take_while(|&c| c == '#').count();
            let close = format!("\"{}", "#".repeat(hashes));
            let body = 2 + hashes;
            let end = rest[body..]
                .find(&close)
                .map_or(text.len(), |n| i + body + n + close.len());
            out.push_str("\"\"");
            i = end;
        } else if rest.starts_with('"') {
            let mut j = i + 1;
            while j < bytes.len() && bytes[j] != b'"' {
                j += if bytes[j] == b'\\' { 2 } else { 1 };
            }
            out.push_str("\"\"");
            i = j + 1;
        } else if let Some(len) = char_literal_len(rest) {
            out.push_str("' '");
            i += len;
        } else {
            let c = rest.chars().next().expect("char");
            out.push(c);
            i += c.len_utf8();
        }
    }
    out
}

/// The length of the char literal `rest` starts with ('a', 'π', '\n', '\''), or `None` when
/// it does not start with one (a lifetime, or not a quote at all).
fn char_literal_len(rest: &str) -> Option<usize> {
    let body = rest.strip_prefix('\'')?;
    let first = body.chars().next()?;
    if first == '\\' {
        return body[1..].find('\'').map(|n| n + 3);
    }
    let after = &body[first.len_utf8()..];
    after.starts_with('\'').then(|| 2 + first.len_utf8())
}

/// The rooms (`crate::x`) and external crates among [`EXTERNAL`] a file's code names.
fn references(code: &str) -> BTreeSet<String> {
    let mut found = BTreeSet::new();
    let words = |prefix: &str| -> Vec<String> {
        code.match_indices(prefix)
            .filter(|(at, _)| {
                *at == 0
                    || !code.as_bytes()[at - 1].is_ascii_alphanumeric()
                        && code.as_bytes()[at - 1] != b'_'
            })
            .map(|(at, _)| {
                code[at + prefix.len()..]
                    .chars()
                    .take_while(|c| c.is_ascii_alphanumeric() || *c == '_')
                    .collect()
            })
            .collect()
    };
    for room in words("crate::") {
        found.insert(room);
    }
    for external in EXTERNAL {
        if !words(&format!("{external}::")).is_empty() || code.contains(&format!("use {external};"))
        {
            found.insert(external.to_string());
        }
    }
    found
}

/// room → (name it references → the files that do).
fn reference_map() -> BTreeMap<String, BTreeMap<String, BTreeSet<String>>> {
    let mut map: BTreeMap<String, BTreeMap<String, BTreeSet<String>>> = BTreeMap::new();
    for file in rust_files(Path::new(SRC)) {
        let text = std::fs::read_to_string(&file).expect("read file");
        let room = room_of(&file);
        let rel = file
            .strip_prefix(SRC)
            .expect("under src")
            .display()
            .to_string();
        for name in references(&code_only(&text)) {
            map.entry(room.clone())
                .or_default()
                .entry(name)
                .or_default()
                .insert(rel.clone());
        }
    }
    map
}

#[test]
fn the_scanner_sees_code_and_not_comments_or_strings() {
    let code = code_only(
        "use crate::engine::x; // crate::daemon\n/* tokio::spawn */ let s = \"rdkafka::x\";\n\
         let r = r#\"axum::x\"#; let c = '\"'; tracing::info!(\"hi\");",
    );
    let refs = references(&code);
    assert_eq!(
        refs,
        ["engine", "tracing"]
            .iter()
            .map(|s| s.to_string())
            .collect(),
        "{code}"
    );
}

#[test]
fn every_file_is_in_a_known_room() {
    for file in rust_files(Path::new(SRC)) {
        let room = room_of(&file);
        assert!(
            ROOMS.contains(&room.as_str()),
            "{} is in room {room:?}, which lib.rs's Layout does not know",
            file.display()
        );
    }
}

#[test]
fn rooms_name_only_what_lies_below_them() {
    let map = reference_map();
    let mut broken = Vec::new();
    for (room, refs) in &map {
        let Some((_, rooms, externals)) = ALLOWED.iter().find(|(r, ..)| r == room) else {
            continue;
        };
        for (name, files) in refs {
            let allowed = name == room
                || rooms.contains(&name.as_str())
                || externals.contains(&name.as_str());
            if !allowed {
                broken.push(format!("{room} names {name}: {files:?}"));
            }
        }
    }
    for (room, _, _) in ALLOWED {
        assert!(ROOMS.contains(&room), "{room} is not a room");
    }
    assert!(broken.is_empty(), "{}", broken.join("\n"));
}

/// The crate's rooms form no cycle (cli, main and lib use everything and nothing uses them).
#[test]
fn the_rooms_form_no_cycle() {
    let map = reference_map();
    let edges: BTreeMap<&str, Vec<&str>> = map
        .iter()
        .filter(|(room, _)| !["cli", "main", "lib"].contains(&room.as_str()))
        .map(|(room, refs)| {
            let to = refs
                .keys()
                .map(String::as_str)
                .filter(|r| *r != room.as_str() && ROOMS.contains(r))
                .collect();
            (room.as_str(), to)
        })
        .collect();
    for (room, refs) in &map {
        for user in ["cli", "main"] {
            assert!(
                !refs.contains_key(user) || room == user,
                "{room} names {user}: {:?}",
                refs[user]
            );
        }
    }
    assert_acyclic(&edges);
}

fn assert_acyclic(edges: &BTreeMap<&str, Vec<&str>>) {
    fn visit<'a>(
        node: &'a str,
        edges: &BTreeMap<&'a str, Vec<&'a str>>,
        path: &mut Vec<&'a str>,
        done: &mut BTreeSet<&'a str>,
    ) {
        if done.contains(node) {
            return;
        }
        if let Some(at) = path.iter().position(|n| *n == node) {
            panic!("import cycle: {} -> {node}", path[at..].join(" -> "));
        }
        path.push(node);
        for next in edges.get(node).into_iter().flatten() {
            visit(next, edges, path, done);
        }
        path.pop();
        done.insert(node);
    }
    let mut done = BTreeSet::new();
    for node in edges.keys() {
        visit(node, edges, &mut Vec::new(), &mut done);
    }
}

/// Within cli/, the files that name each other (`super::x`, `crate::cli::x`) form no cycle.
#[test]
fn cli_has_no_import_cycle() {
    let dir = Path::new(SRC).join("cli");
    let mut names: Vec<String> = Vec::new();
    let mut codes: Vec<String> = Vec::new();
    for file in rust_files(&dir) {
        let stem = file
            .file_stem()
            .expect("stem")
            .to_string_lossy()
            .to_string();
        names.push(stem);
        codes.push(code_only(&std::fs::read_to_string(&file).expect("read")));
    }
    let mut edges: BTreeMap<&str, Vec<&str>> = BTreeMap::new();
    for (name, code) in names.iter().zip(&codes) {
        let targets = names
            .iter()
            .filter(|other| *other != name && other.as_str() != "mod")
            .filter(|other| {
                code.contains(&format!("super::{other}::"))
                    || code.contains(&format!("super::{other}::{{"))
                    || code.contains(&format!("crate::cli::{other}::"))
                    || (name == "mod" && code.contains(&format!("{other}::")))
            })
            .map(String::as_str)
            .collect();
        edges.insert(name.as_str(), targets);
    }
    // mod.rs declares every file; a file naming mod.rs (`super::x` for an item of mod.rs)
    // is the usual parent-child use and not counted.
    assert_acyclic(&edges);
}

/// lib.rs's Layout section names every room, and every module file is named (`` [`name`] ``
/// or `` `name` ``) in lib.rs's Layout or in its parent module's docs.
#[test]
fn the_layout_section_names_every_module() {
    let lib = std::fs::read_to_string(Path::new(SRC).join("lib.rs")).expect("lib.rs");
    let layout: String = lib
        .lines()
        .take_while(|l| l.starts_with("//!"))
        .skip_while(|l| !l.contains("# Layout"))
        .collect::<Vec<_>>()
        .join("\n");
    assert!(!layout.is_empty(), "lib.rs has no `//! # Layout` section");
    for line in lib.lines().filter(|l| l.starts_with("pub mod ")) {
        let name = line.trim_start_matches("pub mod ").trim_end_matches(';');
        assert!(
            layout.contains(&format!("[`{name}`]")),
            "lib.rs's Layout does not name the module {name}"
        );
    }
    let mut missing = Vec::new();
    for file in rust_files(Path::new(SRC)) {
        let rel = file.strip_prefix(SRC).expect("under src");
        let depth = rel.components().count();
        let stem = file
            .file_stem()
            .expect("stem")
            .to_string_lossy()
            .to_string();
        if depth < 2 || stem == "mod" {
            continue;
        }
        let parent = file.parent().expect("parent");
        let parent_doc = std::fs::read_to_string(parent.join("mod.rs"))
            .or_else(|_| std::fs::read_to_string(parent.with_extension("rs")))
            .unwrap_or_default();
        let parent_doc: String = parent_doc
            .lines()
            .filter(|l| l.starts_with("//!"))
            .collect::<Vec<_>>()
            .join("\n");
        let named = |doc: &str| {
            doc.contains(&format!("`{stem}`"))
                || doc.contains(&format!("`{stem}.rs`"))
                || doc.contains(&format!("::{stem}`"))
        };
        if !named(&layout) && !named(&parent_doc) {
            missing.push(rel.display().to_string());
        }
    }
    assert!(
        missing.is_empty(),
        "modules named neither in lib.rs's Layout nor in their parent's docs: {missing:?}"
    );
}
