//! The module-order check: inside every crate of the workspace (each `crates/*/src`, `xtask/src`
//! and `tests/src`), no module reaches,
//! through `use` items and `crate::`, `super::`, `self::` or child-module paths, a module that
//! reaches it back, so a reader can start at the bottom of a crate and read upwards.
//!
//! The check reads source text, not the compiler's name resolution: comments and literals are
//! skipped, `use` trees are expanded, and a path is followed through child modules and through
//! the imports (`pub use` re-exports included) of the modules it passes, to the module that
//! defines the item. Inline modules (`mod tests { .. }`) are modules of their own; generated code
//! (a `generated/` folder) is left out.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

use anyhow::Context;

pub(crate) mod tokens;

use tokens::{Token, ident_at, token_is, tokens};

/// The source folders the check reads, relative to the workspace root: every crate's `src`.
pub(crate) fn source_roots(root: &Path) -> anyhow::Result<Vec<PathBuf>> {
    let mut roots = Vec::new();
    let crates = root.join("crates");
    for entry in
        std::fs::read_dir(&crates).with_context(|| format!("reading {}", crates.display()))?
    {
        let src = entry?.path().join("src");
        if src.is_dir() {
            roots.push(src.strip_prefix(root).unwrap_or(&src).to_path_buf());
        }
    }
    roots.sort();
    for other in ["xtask/src", "tests/src"] {
        if root.join(other).is_dir() {
            roots.push(PathBuf::from(other));
        }
    }
    Ok(roots)
}

/// A source file of a crate: its path under `src/` (`lib.rs`, `histogram/avx2.rs`) and its text.
#[derive(Debug, Clone)]
pub(crate) struct SourceFile {
    pub(crate) path: PathBuf,
    pub(crate) text: String,
}

/// Every module cycle of the workspace's crates, one line each, and how many crates were read.
pub(crate) fn check_workspace(root: &Path) -> anyhow::Result<(Vec<String>, usize)> {
    let roots = source_roots(root)?;
    let mut cycles = Vec::new();
    for src in &roots {
        let files = read_sources(&root.join(src))?;
        let krate = src.parent().unwrap_or(src).display().to_string();
        cycles.extend(
            find_cycles(&files)
                .into_iter()
                .map(|cycle| format!("{krate}: {cycle}")),
        );
    }
    Ok((cycles, roots.len()))
}

/// The `.rs` files under `src`, generated code aside, paths relative to `src`.
pub(crate) fn read_sources(src: &Path) -> anyhow::Result<Vec<SourceFile>> {
    let mut files = Vec::new();
    let mut folders = vec![src.to_path_buf()];
    while let Some(folder) = folders.pop() {
        let entries =
            std::fs::read_dir(&folder).with_context(|| format!("reading {}", folder.display()))?;
        for entry in entries {
            let path = entry?.path();
            if path.is_dir() {
                if path.file_name().is_some_and(|n| n != "generated") {
                    folders.push(path);
                }
            } else if path.extension().is_some_and(|e| e == "rs") {
                let text = std::fs::read_to_string(&path)
                    .with_context(|| format!("reading {}", path.display()))?;
                let relative = path.strip_prefix(src).unwrap_or(&path).to_path_buf();
                files.push(SourceFile {
                    path: relative,
                    text,
                });
            }
        }
    }
    files.sort_by(|a, b| a.path.cmp(&b.path));
    Ok(files)
}

/// A module's path from the crate root: `[]` is the root, `["histogram", "avx2"]` a submodule.
type ModPath = Vec<String>;

/// One path written in a module, and where.
#[derive(Debug, Clone)]
struct Mention {
    from: ModPath,
    segments: Vec<String>,
    file: PathBuf,
    line: usize,
}

/// What the scan of every file finds: the modules, each module's imports (name to path), and
/// every path that may name another module of the crate.
#[derive(Debug, Default)]
struct Crate {
    modules: BTreeSet<ModPath>,
    /// `(module, name)` to the path the name was imported from, as written in that module.
    imports: BTreeMap<(ModPath, String), Vec<String>>,
    mentions: Vec<Mention>,
}

/// The module a file defines: `lib.rs` the root, `a.rs` and `a/mod.rs` module `a`.
fn file_module(path: &Path) -> ModPath {
    let mut parts: Vec<String> = path
        .iter()
        .map(|p| p.to_string_lossy().into_owned())
        .collect();
    let last = parts.pop().unwrap_or_default();
    let stem = last.trim_end_matches(".rs");
    if !(parts.is_empty() && (stem == "lib" || stem == "main")) && stem != "mod" {
        parts.push(stem.to_string());
    }
    parts
}

/// The cycles among the modules of one crate, each as `a -> b -> a` with the lines that make
/// its edges.
pub(crate) fn find_cycles(files: &[SourceFile]) -> Vec<String> {
    let mut krate = Crate::default();
    for file in files {
        let module = file_module(&file.path);
        krate.modules.insert(module.clone());
        scan(&tokens(&file.text), &file.path, module, &mut krate);
    }
    // module -> module -> the first mention that makes the edge
    let mut edges: BTreeMap<ModPath, BTreeMap<ModPath, String>> = BTreeMap::new();
    for mention in &krate.mentions {
        let Some(target) = resolve(&krate, &mention.from, &mention.segments, 0) else {
            continue;
        };
        if target == mention.from {
            continue;
        }
        edges
            .entry(mention.from.clone())
            .or_default()
            .entry(target)
            .or_insert_with(|| {
                format!(
                    "{}:{} `{}`",
                    mention.file.display(),
                    mention.line,
                    mention.segments.join("::")
                )
            });
    }
    cycles_of(&krate.modules, &edges)
}

/// The module `segments` (written in `from`) names, following child modules and imports; `None`
/// for a path outside the crate.
fn resolve(krate: &Crate, from: &ModPath, segments: &[String], depth: usize) -> Option<ModPath> {
    if depth > 8 {
        return None;
    }
    let imported = |module: &ModPath, name: &str, rest: &[String]| {
        let path = krate.imports.get(&(module.clone(), name.to_string()))?;
        let full: Vec<String> = path.iter().chain(rest).cloned().collect();
        resolve(krate, module, &full, depth + 1)
    };
    let (mut at, rest) = match segments.first().map(String::as_str) {
        Some("crate") => (Vec::new(), &segments[1..]),
        Some("self") => (from.clone(), &segments[1..]),
        Some("super") => {
            let mut at = from.clone();
            let mut rest = segments;
            while rest.first().is_some_and(|s| s == "super") {
                at.pop()?;
                rest = &rest[1..];
            }
            (at, rest)
        }
        Some(first) => {
            let mut child = from.clone();
            child.push(first.to_string());
            if krate.modules.contains(&child) {
                (child, &segments[1..])
            } else {
                return imported(from, first, &segments[1..]);
            }
        }
        None => return None,
    };
    for (i, segment) in rest.iter().enumerate() {
        let mut child = at.clone();
        child.push(segment.clone());
        if krate.modules.contains(&child) {
            at = child;
        } else if let Some(path) = krate.imports.get(&(at.clone(), segment.clone())) {
            // A name another crate defines (`pub use other_crate as name;`) is no edge at all.
            if !names_this_crate(krate, &at, path) {
                return None;
            }
            return imported(&at, segment, &rest[i + 1..]).or(Some(at));
        } else {
            break;
        }
    }
    Some(at)
}

/// Whether an import path written in `module` starts inside this crate: `crate`, `self`,
/// `super`, or a child module of `module`.
fn names_this_crate(krate: &Crate, module: &ModPath, path: &[String]) -> bool {
    match path.first().map(String::as_str) {
        Some("crate" | "self" | "super") => true,
        Some(first) => {
            let mut child = module.clone();
            child.push(first.to_string());
            krate.modules.contains(&child)
        }
        None => false,
    }
}

/// Each strongly connected set of two or more modules, as one cycle through it.
fn cycles_of(
    modules: &BTreeSet<ModPath>,
    edges: &BTreeMap<ModPath, BTreeMap<ModPath, String>>,
) -> Vec<String> {
    let reaches = |from: &ModPath| {
        let mut seen = BTreeSet::new();
        let mut stack = vec![from.clone()];
        while let Some(m) = stack.pop() {
            for next in edges.get(&m).into_iter().flat_map(|e| e.keys()) {
                if seen.insert(next.clone()) {
                    stack.push(next.clone());
                }
            }
        }
        seen
    };
    let reach: BTreeMap<&ModPath, BTreeSet<ModPath>> =
        modules.iter().map(|m| (m, reaches(m))).collect();
    let mut reported = BTreeSet::new();
    let mut cycles = Vec::new();
    for module in modules {
        if reported.contains(module) || !reach[module].contains(module) {
            continue;
        }
        let members: BTreeSet<ModPath> = modules
            .iter()
            .filter(|m| reach[module].contains(*m) && reach[*m].contains(module))
            .cloned()
            .collect();
        let path = shortest_cycle(module, &members, edges);
        cycles.push(describe_cycle(&path, members.len(), edges));
        reported.extend(members);
    }
    cycles
}

/// The shortest way from `module` back to itself through `members`, breadth first: the path,
/// `module` at both ends.
fn shortest_cycle(
    module: &ModPath,
    members: &BTreeSet<ModPath>,
    edges: &BTreeMap<ModPath, BTreeMap<ModPath, String>>,
) -> Vec<ModPath> {
    let mut previous: BTreeMap<ModPath, ModPath> = BTreeMap::new();
    let mut queue = std::collections::VecDeque::from([module.clone()]);
    'search: while let Some(m) = queue.pop_front() {
        for next in edges.get(&m).into_iter().flat_map(|e| e.keys()) {
            if !members.contains(next) || previous.contains_key(next) {
                continue;
            }
            previous.insert(next.clone(), m.clone());
            if next == module {
                break 'search;
            }
            queue.push_back(next.clone());
        }
    }
    let mut back = Vec::new();
    let mut at = previous[module].clone();
    while &at != module {
        back.push(at.clone());
        at = previous[&at].clone();
    }
    std::iter::once(module.clone())
        .chain(back.into_iter().rev())
        .chain(std::iter::once(module.clone()))
        .collect()
}

/// A cycle's line: its modules, why each reaches the next, and how many more modules of a
/// circle of `members` it does not pass.
fn describe_cycle(
    path: &[ModPath],
    members: usize,
    edges: &BTreeMap<ModPath, BTreeMap<ModPath, String>>,
) -> String {
    let names: Vec<String> = path.iter().map(mod_name).collect();
    let because: Vec<String> = path
        .windows(2)
        .map(|w| {
            format!(
                "{} -> {}: {}",
                mod_name(&w[0]),
                mod_name(&w[1]),
                edges[&w[0]][&w[1]]
            )
        })
        .collect();
    let others = members + 1 - path.len();
    let more = if others > 0 {
        format!(" (and {others} more module(s) in the same circle)")
    } else {
        String::new()
    };
    format!(
        "module cycle {}{more}; {}",
        names.join(" -> "),
        because.join("; ")
    )
}

/// A module's name in a report: `crate` for the root.
fn mod_name(m: &ModPath) -> String {
    if m.is_empty() {
        "crate".to_string()
    } else {
        m.join("::")
    }
}

/// Records the modules, imports and path mentions of one file whose module is `module`.
fn scan(tokens: &[(Token, usize)], file: &Path, module: ModPath, krate: &mut Crate) {
    let ident = |i: usize| ident_at(tokens, i);
    let is = |i: usize, t: &Token| token_is(tokens, i, t);
    // The module at each open inline `mod`, with the brace depth it opened at.
    let mut scopes: Vec<(ModPath, usize)> = vec![(module, 0)];
    let mut depth = 0;
    let mut i = 0;
    while i < tokens.len() {
        let current = scopes.last().map(|s| s.0.clone()).unwrap_or_default();
        match &tokens[i].0 {
            Token::Punct('{') => depth += 1,
            Token::Punct('}') => {
                if scopes.len() > 1 && scopes.last().is_some_and(|s| s.1 == depth) {
                    scopes.pop();
                }
                depth -= 1;
            }
            Token::Ident(word) if word == "mod" && ident(i + 1).is_some() => {
                let mut child = current.clone();
                child.push(ident(i + 1).unwrap_or_default().to_string());
                krate.modules.insert(child.clone());
                if is(i + 2, &Token::Punct('{')) {
                    depth += 1;
                    scopes.push((child, depth));
                    i += 3;
                    continue;
                }
            }
            Token::Ident(word)
                if word == "use"
                    && !is(i + 1, &Token::Punct('<'))
                    && !(i > 0 && is(i - 1, &Token::PathSep)) =>
            {
                i = scan_use(tokens, i, &current, file, krate);
                continue;
            }
            Token::Ident(_)
                if is(i + 1, &Token::PathSep) && !(i > 0 && is(i - 1, &Token::PathSep)) =>
            {
                i = scan_path(tokens, i, &current, file, krate);
                continue;
            }
            _ => {}
        }
        i += 1;
    }
}

/// Records the imports and mentions of the `use` item whose keyword is at `i`, written in
/// `module`; the index after its `;`.
fn scan_use(
    tokens: &[(Token, usize)],
    i: usize,
    module: &ModPath,
    file: &Path,
    krate: &mut Crate,
) -> usize {
    let end = (i..tokens.len())
        .find(|&j| token_is(tokens, j, &Token::Punct(';')))
        .unwrap_or(tokens.len());
    let line = tokens[i].1;
    for (path, name) in use_tree(&tokens[i + 1..end]) {
        if let Some(name) = name {
            krate.imports.insert((module.clone(), name), path.clone());
        }
        krate.mentions.push(Mention {
            from: module.clone(),
            segments: path,
            file: file.to_path_buf(),
            line,
        });
    }
    end + 1
}

/// Records the path (`a::b::c`) that starts at `i`, written in `module`; the index after it.
fn scan_path(
    tokens: &[(Token, usize)],
    i: usize,
    module: &ModPath,
    file: &Path,
    krate: &mut Crate,
) -> usize {
    let line = tokens[i].1;
    let mut segments = Vec::new();
    let mut j = i;
    while let Some(s) = ident_at(tokens, j) {
        segments.push(s.to_string());
        if !token_is(tokens, j + 1, &Token::PathSep) {
            break;
        }
        j += 2;
    }
    krate.mentions.push(Mention {
        from: module.clone(),
        segments,
        file: file.to_path_buf(),
        line,
    });
    j + 1
}

/// The paths a `use` tree imports (its tokens after `use`, before `;`), each with the name it
/// binds (`None` for a glob or `_`). `a::{b, c::d as e}` gives `a::b` (`b`) and `a::c::d` (`e`).
fn use_tree(tokens: &[(Token, usize)]) -> Vec<(Vec<String>, Option<String>)> {
    let mut out = Vec::new();
    let mut prefix: Vec<Vec<String>> = vec![Vec::new()];
    let mut current: Vec<String> = Vec::new();
    let finish = |prefix: &[Vec<String>], current: &mut Vec<String>, out: &mut Vec<_>, name| {
        if !current.is_empty() {
            let mut path: Vec<String> = prefix.concat();
            path.append(current);
            out.push((path, name));
        }
    };
    let mut i = 0;
    while i < tokens.len() {
        match &tokens[i].0 {
            Token::Ident(s) if s == "as" => {
                let alias = match tokens.get(i + 1) {
                    Some((Token::Ident(a), _)) if a != "_" => Some(a.clone()),
                    _ => None,
                };
                // `a::{self as b}` imports `a` as `b`.
                if current.last().is_some_and(|s| s == "self") {
                    current.pop();
                    if current.is_empty() {
                        out.push((prefix.concat(), alias));
                        i += 2;
                        continue;
                    }
                }
                finish(&prefix, &mut current, &mut out, alias);
                i += 2;
                continue;
            }
            Token::Ident(s) => current.push(s.clone()),
            Token::PathSep => {}
            Token::Punct('{') => {
                prefix.push(std::mem::take(&mut current));
            }
            Token::Punct(',') => {
                let name = current.last().cloned().filter(|n| n != "self");
                let self_name = prefix.concat().last().cloned();
                if current == ["self"] {
                    current.clear();
                    let path = prefix.concat();
                    out.push((path, self_name));
                } else {
                    finish(&prefix, &mut current, &mut out, name);
                }
            }
            Token::Punct('}') => {
                let name = current.last().cloned();
                if current == ["self"] {
                    current.clear();
                    out.push((prefix.concat(), prefix.concat().last().cloned()));
                } else {
                    finish(&prefix, &mut current, &mut out, name);
                }
                prefix.pop();
            }
            Token::Punct('*') => {
                let mut path = prefix.concat();
                path.append(&mut current);
                out.push((path, None));
            }
            _ => {}
        }
        i += 1;
    }
    let name = current.last().cloned();
    finish(&prefix, &mut current, &mut out, name);
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn files(sources: &[(&str, &str)]) -> Vec<SourceFile> {
        sources
            .iter()
            .map(|(path, text)| SourceFile {
                path: PathBuf::from(path),
                text: text.to_string(),
            })
            .collect()
    }

    #[test]
    fn use_trees_expand_to_paths_and_names() {
        let t = tokens("crate::{a::{self, B}, c::D as E, f::*};");
        let paths: Vec<(String, Option<String>)> = use_tree(&t[..t.len() - 1])
            .into_iter()
            .map(|(p, n)| (p.join("::"), n))
            .collect();
        assert_eq!(
            paths,
            [
                ("crate::a".to_string(), Some("a".to_string())),
                ("crate::a::B".to_string(), Some("B".to_string())),
                ("crate::c::D".to_string(), Some("E".to_string())),
                ("crate::f".to_string(), None),
            ]
        );
    }

    #[test]
    fn comments_strings_and_inline_tests_make_no_edge() {
        let found = find_cycles(&files(&[
            ("lib.rs", "mod a;\nmod b;\n"),
            (
                "a.rs",
                "use crate::b::B;\n/// [`crate::a`]\npub struct A;\n#[cfg(test)]\nmod tests { use super::*; }\n",
            ),
            (
                "b.rs",
                "// use crate::a::A;\npub struct B;\nconst S: &str = \"crate::a::A\";\nconst R: &str = r#\"crate::a\"#;\nfn f<'a>(x: &'a str) -> char { 'c' }\n",
            ),
        ]));
        assert_eq!(found, Vec::<String>::new());
    }

    #[test]
    fn a_planted_cycle_is_reported_by_module_names() {
        let found = find_cycles(&files(&[
            (
                "lib.rs",
                "mod error;\nmod pack;\nmod value;\npub use error::PackError;\n",
            ),
            (
                "error.rs",
                "use crate::value::Value;\npub struct PackError;\n",
            ),
            (
                "value.rs",
                "pub enum Value { A }\nfn f() -> crate::pack::Packer { todo() }\n",
            ),
            ("pack.rs", "use crate::PackError;\npub struct Packer;\n"),
        ]));
        assert_eq!(
            found,
            ["module cycle error -> value -> pack -> error; \
              error -> value: error.rs:1 `crate::value::Value`; \
              value -> pack: value.rs:2 `crate::pack::Packer`; \
              pack -> error: pack.rs:1 `crate::PackError`"]
        );
    }

    #[test]
    fn a_child_reaching_back_into_its_parent_is_a_cycle() {
        let found = find_cycles(&files(&[
            ("lib.rs", "mod histogram;\n"),
            (
                "histogram.rs",
                "mod avx2;\npub(crate) struct Stats;\nfn f() { avx2::detect(); }\n",
            ),
            (
                "histogram/avx2.rs",
                "use super::Stats;\npub(super) fn detect() {}\n",
            ),
        ]));
        assert_eq!(found.len(), 1, "{found:?}");
        assert!(
            found[0].starts_with("module cycle histogram -> histogram::avx2 -> histogram;"),
            "{found:?}"
        );
    }

    #[test]
    fn a_cycle_planted_in_a_copy_of_ember_pack_fails_the_check() {
        let root = crate::workspace_root();
        let mut sources = read_sources(&root.join("crates/ember-pack/src")).expect("sources");
        assert_eq!(find_cycles(&sources), Vec::<String>::new());
        let tag = sources
            .iter_mut()
            .find(|f| f.path == Path::new("tag.rs"))
            .expect("tag.rs");
        // Everything builds on `tag`; a tag that reaches a record closes a circle.
        tag.text
            .push_str("\nfn planted(r: &crate::record::Record) -> i64 { r.step }\n");
        let found = find_cycles(&sources);
        assert_eq!(found.len(), 1, "{found:?}");
        assert!(
            found[0].starts_with("module cycle ") && found[0].contains("tag -> record: tag.rs:"),
            "{found:?}"
        );
    }

    #[test]
    fn this_workspace_has_no_module_cycle() {
        let root = crate::workspace_root();
        let (cycles, crates) = check_workspace(&root).expect("the check runs");
        assert_eq!(cycles, Vec::<String>::new());
        // Every crate under crates/, xtask and the tests' crate.
        assert!(crates >= 9, "{crates} crates read");
    }
}
