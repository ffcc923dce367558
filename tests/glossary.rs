//! One meaning per word (`docs/design.md`, Glossary): the code, its
//! comments and the documents no longer use the second meanings the
//! glossary replaced: "host" for the embedder, "local" for this rank's own
//! health, "local emitter" for a same-host one.

const ROOT: &str = env!("CARGO_MANIFEST_DIR");

/// Phrases of an old meaning (matched case-insensitively), with the word
/// that replaced them.
const OLD_MEANINGS: &[(&str, &str)] = &[
    ("host thread", "the embedder's thread"),
    ("host's thread", "the embedder's thread"),
    ("host's callback", "the embedder's callback"),
    ("host callback", "embedder callback"),
    ("host's event callback", "the embedder's event callback"),
    (
        "for the host",
        "for the embedder (or: for the whole host, a machine)",
    ),
    ("the host hears", "the embedder hears"),
    ("the host reads", "the embedder reads"),
    ("host commands", "the embedder's commands"),
    ("the host's queue", "the embedder's event queue"),
    ("the host's api", "the embedder's API"),
    ("host's promise", "the embedder's promise"),
    ("embedding host", "embedder"),
    ("local_health", "own_health"),
    ("local health", "own health"),
    ("local emitter", "same-host emitter"),
    ("local observer", "same-host observer"),
    ("node-local", "same-host"),
    ("host-local", "same-host"),
];

/// Where an old meaning is still allowed: the changelog (history), this
/// file, and the Engine's files that its split (issue 36) rewrites on
/// another branch; their prose is renamed when it lands (then remove them).
const EXEMPT: &[&str] = &["CHANGELOG.md", "tests/glossary.rs"];
const BEING_SPLIT: &[&str] = &[
    "protocol/src/engine/health.rs",
    "protocol/src/engine/local.rs",
    "protocol/src/engine/membership.rs",
    "protocol/src/engine/model.rs",
    "protocol/src/engine/mod.rs",
    "protocol/src/engine/observation.rs",
    "protocol/src/engine/quorum.rs",
    "protocol/src/engine/stats.rs",
    "protocol/src/engine/timer.rs",
];

/// Lifeguard's own name for the idea, cited once as such.
const CITED_TITLE: &str = "Local Health Awareness";

fn tracked() -> Vec<String> {
    let out = std::process::Command::new("git")
        .args([
            "ls-files",
            "--cached",
            "--others",
            "--exclude-standard",
            "--",
        ])
        .args([
            "*.rs", "*.md", "*.c", "*.h", "*.py", "*.sh", "*.toml", "ci/*",
        ])
        .current_dir(ROOT)
        .output()
        .expect("git ls-files");
    assert!(out.status.success(), "git ls-files failed");
    String::from_utf8_lossy(&out.stdout)
        .lines()
        .map(str::to_owned)
        .collect()
}

/// A line as prose: lower case, without its comment marker and the cited
/// title.
fn prose(line: &str) -> String {
    let line = line.replace(CITED_TITLE, "").to_lowercase();
    let line = line.trim_start();
    let line = ["//!", "///", "//", "* ", "#"]
        .iter()
        .find_map(|m| line.strip_prefix(m))
        .unwrap_or(line);
    line.trim().to_owned()
}

/// The old meanings in `text`: (line, phrase, replacement); a phrase
/// wrapped over two lines counts on the first.
fn old_meanings(text: &str) -> Vec<(usize, &'static str, &'static str)> {
    let lines: Vec<String> = text.lines().map(prose).collect();
    let mut found = Vec::new();
    for (i, line) in lines.iter().enumerate() {
        let next = lines.get(i + 1).map_or("", String::as_str);
        let joined = format!("{line} {next}");
        for &(old, new) in OLD_MEANINGS {
            let wrapped = joined.contains(old) && !next.contains(old);
            if line.contains(old) || wrapped {
                found.push((i + 1, old, new));
            }
        }
    }
    found
}

#[test]
fn no_word_keeps_an_old_meaning() {
    let files = tracked();
    assert!(files.len() > 100, "found only {} files", files.len());
    let mut found = Vec::new();
    for file in &files {
        if EXEMPT.contains(&file.as_str()) || BEING_SPLIT.contains(&file.as_str()) {
            continue;
        }
        let Ok(text) = std::fs::read_to_string(format!("{ROOT}/{file}")) else {
            continue;
        };
        for (line, old, new) in old_meanings(&text) {
            found.push(format!("{file}:{line}: \"{old}\" (now: {new})"));
        }
    }
    assert!(
        found.is_empty(),
        "old meanings (docs/design.md, Glossary):\n{}",
        found.join("\n")
    );
}

/// The scan finds each old meaning, whatever its case, and lets the cited
/// title and the new words pass.
#[test]
fn the_scan_finds_old_meanings() {
    let text = "the progress thread never waits on a host thread\n\
                Events for the Host.\n\
                engine.local_health()\n\
                Lifeguard's *Local Health Awareness*; own health; the embedder's thread\n\
                its Local emitter\n\
                /// each turn takes host\n\
                /// commands";
    let lines: Vec<usize> = old_meanings(text).iter().map(|f| f.0).collect();
    assert_eq!(lines, [1, 2, 3, 5, 6]);
}

/// The glossary is there, and names every word it gives one meaning.
#[test]
fn the_glossary_names_its_words() {
    let design = std::fs::read_to_string(format!("{ROOT}/docs/design.md")).unwrap();
    let (_, glossary) = design
        .split_once("## Glossary\n")
        .expect("docs/design.md has a Glossary");
    let glossary = glossary.split("\n## ").next().unwrap();
    for word in [
        "embedder",
        "host",
        "same-host",
        "own health",
        "emitter",
        "observer",
        "notice",
        "epoch",
        "view",
    ] {
        assert!(
            glossary.contains(&format!("**{word}**")),
            "the glossary does not define {word}"
        );
    }
}
