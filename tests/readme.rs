//! The documents say what the code offers: the README starts with the two
//! commands and names every subcommand; `docs/configuration.md` holds the
//! settings table as the code has it, so every `FFD_*` variable is
//! documented; no document names an `FFD_*` variable or constant the code
//! does not have; every design-section citation resolves.

use ffd::config::VARIABLES;

const ROOT: &str = env!("CARGO_MANIFEST_DIR");

fn read(path: &str) -> String {
    std::fs::read_to_string(format!("{ROOT}/{path}")).unwrap_or_else(|e| panic!("{path}: {e}"))
}

fn readme() -> String {
    read("README.md")
}

/// The repository's tracked files matching `patterns`.
fn tracked(patterns: &[&str]) -> Vec<String> {
    let out = std::process::Command::new("git")
        .arg("ls-files")
        .arg("--")
        .args(patterns)
        .current_dir(ROOT)
        .output()
        .expect("git ls-files");
    String::from_utf8_lossy(&out.stdout)
        .lines()
        .map(str::to_owned)
        .collect()
}

/// The `FFD_*` names in `text` (`FFD_` and at least one more capital,
/// digit or underscore; trailing underscores dropped).
fn ffd_names(text: &str) -> std::collections::BTreeSet<String> {
    let mut names = std::collections::BTreeSet::new();
    for (at, _) in text.match_indices("FFD_") {
        if text[..at]
            .chars()
            .next_back()
            .is_some_and(|c| c.is_ascii_alphanumeric() || c == '_')
        {
            continue;
        }
        let tail: String = text[at + 4..]
            .chars()
            .take_while(|c| c.is_ascii_uppercase() || c.is_ascii_digit() || *c == '_')
            .collect();
        let tail = tail.trim_end_matches('_');
        if !tail.is_empty() {
            names.insert(format!("FFD_{tail}"));
        }
    }
    names
}

/// Every setting's variable is documented where the settings live:
/// `docs/configuration.md` (its generated table, kept equal to the code by
/// `docs_configuration_is_the_settings_table`), and the README points there.
#[test]
fn every_ffd_variable_is_documented() {
    let text = read("docs/configuration.md");
    let missing: Vec<&str> = VARIABLES
        .iter()
        .map(|v| v.name)
        .filter(|name| !text.contains(&format!("`{name}`")))
        .collect();
    assert!(
        missing.is_empty(),
        "docs/configuration.md does not document {missing:?}"
    );
    assert!(
        readme().contains("(docs/configuration.md)"),
        "README.md does not link docs/configuration.md"
    );
}

/// No document names an `FFD_*` variable or constant the code does not
/// have (a setting renamed or removed, a C constant gone): every name the
/// README and `docs/*.md` mention occurs in the code (the settings table,
/// `include/ffd.h`, the variables the tests, scripts and build read).
#[test]
fn every_ffd_name_in_the_docs_exists_in_the_code() {
    let mut known: std::collections::BTreeSet<String> =
        VARIABLES.iter().map(|v| v.name.to_owned()).collect();
    for file in tracked(&["*.rs", "*.h", "*.c", "*.py", "ci/*"]) {
        if let Ok(text) = std::fs::read_to_string(format!("{ROOT}/{file}")) {
            known.extend(ffd_names(&text));
        }
    }
    let mut unknown = Vec::new();
    for doc in tracked(&["README.md", "docs/*.md"]) {
        for name in ffd_names(&read(&doc)) {
            if !known.contains(&name) {
                unknown.push(format!("{doc}: {name}"));
            }
        }
    }
    assert!(
        unknown.is_empty(),
        "documents name what the code does not have: {unknown:?}"
    );
}

#[test]
fn the_readme_starts_with_the_demo_and_test_commands() {
    let text = readme();
    let block: Vec<&str> = text
        .split("```sh\n")
        .nth(1)
        .expect("a first shell block")
        .split("```")
        .next()
        .unwrap()
        .lines()
        .collect();
    assert_eq!(block.len(), 2, "{block:?}");
    assert!(block[0].starts_with("ci/demo"));
    assert!(block[1].starts_with("ci/test"));
}

#[test]
fn every_subcommand_is_documented() {
    let text = readme();
    for sub in [
        "ffd run",
        "ffd agent",
        "ffd rendezvous",
        "ffd info",
        "ffd sim",
    ] {
        assert!(
            text.contains(&format!("`{sub}")),
            "README.md does not mention `{sub}`"
        );
    }
}

/// The sections of `docs/design.md`: number -> heading (after the number).
fn design_sections() -> std::collections::BTreeMap<String, String> {
    let design = read("docs/design.md");
    let mut sections = std::collections::BTreeMap::new();
    let mut twice = Vec::new();
    for line in design.lines().filter(|l| l.starts_with('#')) {
        let title = line.trim_start_matches('#').trim();
        if let Some((number, heading)) = title.split_once(' ') {
            let number = number.trim_end_matches('.');
            if number.chars().next().is_some_and(|c| c.is_ascii_digit())
                && sections
                    .insert(number.to_owned(), heading.trim().to_owned())
                    .is_some()
            {
                twice.push(number.to_owned());
            }
        }
    }
    assert!(
        twice.is_empty(),
        "docs/design.md numbers two sections alike: {twice:?}"
    );
    sections
}

/// A heading's short title, as citations give it: up to its first colon,
/// comma or parenthesis ("4.12 Hosts: same-host watching ..." -> "Hosts").
fn short_title(heading: &str) -> &str {
    heading
        .split([':', ',', '('])
        .next()
        .unwrap_or(heading)
        .trim()
}

/// GitHub's anchor of a heading: lower case, punctuation but `-` dropped,
/// spaces as `-`.
fn anchor(heading_line: &str) -> String {
    heading_line
        .to_lowercase()
        .chars()
        .filter(|c| c.is_alphanumeric() || *c == ' ' || *c == '-')
        .map(|c| if c == ' ' { '-' } else { c })
        .collect()
}

/// What is wrong with the design-section citation at `at` (the `§`) of
/// `line`, if anything. A citation names its section's short title after
/// the number, in quotes (`§4.12 "Hosts"`; `\"` inside a Rust string), or
/// is a link to the section's anchor (`[§4.12](design.md#412-hosts-...)`),
/// so a renumbering that moves a section shows at each citation; a range
/// (`§4.1–4.5`) names its first section only by number. Citations of other
/// documents say so before the sign (`DESIGN §6`, the shared reference
/// design; `paper 000 §4.6`) and are left out.
fn citation_fault(
    line: &str,
    at: usize,
    sections: &std::collections::BTreeMap<String, String>,
    titled: bool,
) -> Option<String> {
    let before = &line[..at];
    if before.ends_with("DESIGN ") || before.contains("paper ") {
        return None;
    }
    let rest = &line[at + '§'.len_utf8()..];
    let number: String = rest
        .chars()
        .take_while(|c| c.is_ascii_digit() || *c == '.')
        .collect();
    let number = number.trim_end_matches('.');
    if number.is_empty() {
        return None;
    }
    let Some(heading) = sections.get(number) else {
        return Some(format!("§{number}: no such section"));
    };
    let after = &rest[number.len()..];
    if let Some(link) = after.strip_prefix("](") {
        let want = anchor(&format!("{number} {heading}"));
        let target = link.split(')').next().unwrap_or("");
        return (!target.ends_with(&format!("#{want}")))
            .then(|| format!("§{number} links to {target}, not #{want}"));
    }
    if !titled || after.starts_with('–') {
        return None;
    }
    let title = short_title(heading);
    let given = after
        .strip_prefix(" \"")
        .and_then(|a| a.split_once('"'))
        .or_else(|| {
            after
                .strip_prefix(" \\\"")
                .and_then(|a| a.split_once("\\\""))
        })
        .map(|(t, _)| t);
    match given {
        Some(t) if t == title => None,
        Some(t) => Some(format!("§{number} \"{t}\": the section is \"{title}\"")),
        None => Some(format!(
            "§{number} without its title: write §{number} \"{title}\""
        )),
    }
}

/// Every `§N` or `§N.M` that the repository's code and documents cite
/// names one section of `docs/design.md` and gives that section's title
/// (see [`citation_fault`]), and each number there heads one section: a
/// number with two meanings, or none, or a title that is not the
/// section's, sends the reader astray. The Engine's files that its split
/// (issue 36) rewrites on another branch, and the changelog's history,
/// are checked for the number only.
#[test]
fn every_design_section_citation_resolves() {
    const NUMBER_ONLY: &[&str] = &[
        "CHANGELOG.md",
        "protocol/src/engine/local.rs",
        "protocol/src/engine/mod.rs",
        "protocol/src/engine/payloads.rs",
        "protocol/src/engine/quorum.rs",
    ];
    let sections = design_sections();
    let mut faults = Vec::new();
    for file in tracked(&[
        "*.rs", "*.md", "*.c", "*.h", "*.py", "*.sh", "*.toml", "ci/*",
    ]) {
        let Ok(text) = std::fs::read_to_string(format!("{ROOT}/{file}")) else {
            continue;
        };
        // This file's own examples are test data.
        if file == "tests/readme.rs" {
            continue;
        }
        let titled = !NUMBER_ONLY.contains(&file.as_str());
        for (i, line) in text.lines().enumerate() {
            for (at, _) in line.match_indices('§') {
                if let Some(fault) = citation_fault(line, at, &sections, titled) {
                    faults.push(format!("{file}:{}: {fault}", i + 1));
                }
            }
        }
    }
    assert!(
        faults.is_empty(),
        "citations of docs/design.md that do not name their section:\n{}",
        faults.join("\n")
    );
}

/// The check finds a wrong title, a missing one, a stale anchor and a
/// number with no section, and passes the right forms.
#[test]
fn a_citation_with_the_wrong_title_is_found() {
    let sections: std::collections::BTreeMap<String, String> = [
        ("4.1", "Observation ring"),
        ("4.10", "Agreement and views"),
        (
            "4.12",
            "Hosts: same-host watching and a fabric ring of leaders",
        ),
    ]
    .into_iter()
    .map(|(n, h)| (n.to_owned(), h.to_owned()))
    .collect();
    let check = |line: &str| {
        let at = line.find('§').unwrap();
        citation_fault(line, at, &sections, true)
    };
    assert_eq!(
        check("views (`docs/design.md` §4.10 \"Agreement and views\")."),
        None
    );
    assert_eq!(check("\"update §4.12 \\\"Hosts\\\" and this test\""), None);
    assert_eq!(
        check("[§4.12](design.md#412-hosts-same-host-watching-and-a-fabric-ring-of-leaders)"),
        None
    );
    assert_eq!(check("DESIGN §6, the reference"), None);
    assert_eq!(check("of §4.1–4.5 exactly"), None);
    let wrong = check("views (`docs/design.md` §4.12 \"Agreement and views\").").unwrap();
    assert!(wrong.contains("the section is \"Hosts\""), "{wrong}");
    let bare = check("views (`docs/design.md` §4.10).").unwrap();
    assert!(bare.contains("without its title"), "{bare}");
    let stale = check("[§4.12](design.md#412-hosts-local-watching)").unwrap();
    assert!(stale.contains("not #412-hosts-same-host"), "{stale}");
    assert!(
        check("§4.13 \"Hosts\"")
            .unwrap()
            .contains("no such section")
    );
}

const CONFIG_BEGIN: &str = "<!-- The settings table, generated from src/config/table.rs by tests/readme.rs: \
                            FFD_BLESS=1 cargo test --test readme rewrites it. -->";
const CONFIG_END: &str = "<!-- End of the generated settings table. -->";

/// The table of `docs/configuration.md`: every `FFD_*` variable of the
/// settings table, in its order, with its accepted form, default, whether
/// it is job-wide (`Setting::job_wide`) and help.
fn settings_markdown() -> String {
    let cell = |s: &str| {
        s.replace('|', "\\|")
            .replace('<', "&lt;")
            .replace('>', "&gt;")
    };
    let mut out = String::from(
        "| variable | accepted | default | job-wide | meaning |\n|---|---|---|---|---|\n",
    );
    for v in VARIABLES {
        out += &format!(
            "| `{}` | {} | `{}` | {} | {} |\n",
            v.name,
            cell(v.accepted),
            cell(&v.default_text()),
            if v.job_wide { "yes" } else { "" },
            cell(v.meaning)
        );
    }
    out
}

/// `docs/configuration.md` holds the settings table as the code has it,
/// between its two markers: a setting added, renamed or given another
/// default changes the page, or this test fails (`FFD_BLESS=1` rewrites the
/// block; the prose around it is the maintainers').
#[test]
fn docs_configuration_is_the_settings_table() {
    let path = &format!("{ROOT}/docs/configuration.md");
    let text = std::fs::read_to_string(path).expect("docs/configuration.md");
    let (head, rest) = text
        .split_once(CONFIG_BEGIN)
        .expect("docs/configuration.md has the table's first marker");
    let (block, tail) = rest
        .split_once(CONFIG_END)
        .expect("docs/configuration.md has the table's end marker");
    let want = format!("\n\n{}\n", settings_markdown());
    if block != want {
        if std::env::var_os("FFD_BLESS").is_some() {
            std::fs::write(
                path,
                format!("{head}{CONFIG_BEGIN}{want}{CONFIG_END}{tail}"),
            )
            .expect("write docs/configuration.md");
            return;
        }
        panic!(
            "docs/configuration.md's settings table is not the code's: run \
             FFD_BLESS=1 cargo test --test readme docs_configuration"
        );
    }
}
