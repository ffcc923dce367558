//! The README documents what the code offers: every `FFD_*` variable and
//! every subcommand appears in it, its configuration table says what the
//! settings table says, and it starts with the two commands.

use ffd::config::VARIABLES;

fn readme() -> String {
    std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/README.md")).expect("README.md")
}

#[test]
fn every_ffd_variable_is_documented() {
    let text = readme();
    let missing: Vec<&str> = VARIABLES
        .iter()
        .map(|v| v.name)
        .filter(|name| {
            !text.contains(&format!("`{name}`")) && !text.contains(&format!("`{name}`,"))
        })
        .collect();
    assert!(
        missing.is_empty(),
        "README.md does not document {missing:?}"
    );
}

/// The cells of a Markdown table row as they read: `\|` is a `|`, `&lt;`
/// a `<`, `&gt;` a `>`.
fn cells(row: &str) -> Vec<String> {
    let inner = row.trim().trim_start_matches('|').trim_end_matches('|');
    let mut cells = vec![String::new()];
    let mut chars = inner.chars().peekable();
    while let Some(c) = chars.next() {
        match c {
            '\\' if chars.peek() == Some(&'|') => {
                cells.last_mut().unwrap().push('|');
                chars.next();
            }
            '|' => cells.push(String::new()),
            c => cells.last_mut().unwrap().push(c),
        }
    }
    // `<` and `>` are written as entities (else Markdown takes `<cpu index>`
    // for an HTML tag).
    cells
        .iter()
        .map(|c| c.trim().replace("&lt;", "<").replace("&gt;", ">"))
        .collect()
}

/// The rows of the table in the README's "## Configuration" section:
/// variable, accepted form, default (without its code quotes), meaning.
fn configuration_rows() -> Vec<[String; 4]> {
    let text = readme();
    let section = text
        .split("\n## Configuration\n")
        .nth(1)
        .expect("README.md has a `## Configuration` section");
    let section = section.split("\n## ").next().unwrap_or_default();
    let unquote = |c: &str| {
        c.strip_prefix('`')
            .and_then(|c| c.strip_suffix('`'))
            .filter(|inner| !inner.contains('`'))
            .unwrap_or(c)
            .to_owned()
    };
    section
        .lines()
        .filter(|l| l.starts_with("| `"))
        .map(|l| {
            let c = cells(l);
            assert_eq!(c.len(), 4, "a row of 4 cells: {l}");
            [unquote(&c[0]), c[1].clone(), unquote(&c[2]), c[3].clone()]
        })
        .collect()
}

#[test]
fn the_configuration_table_says_what_the_settings_table_says() {
    let rows = configuration_rows();
    let mut problems = Vec::new();
    for row in &rows {
        let [name, accepted, default, _] = row;
        match ffd::config::variable(name) {
            None => problems.push(format!("{name} is in the README but not in the code")),
            Some(v) => {
                if *accepted != v.accepted {
                    problems.push(format!(
                        "{name}: the README accepts `{accepted}`, the code `{}`",
                        v.accepted
                    ));
                }
                if *default != v.default_text() {
                    problems.push(format!(
                        "{name}: the README's default is `{default}`, the code's `{}`",
                        v.default_text()
                    ));
                }
            }
        }
    }
    for v in VARIABLES.iter() {
        if !rows.iter().any(|[name, ..]| name == v.name) {
            problems.push(format!(
                "{} has no row: | `{}` | {} | `{}` | {} |",
                v.name,
                v.name,
                v.accepted.replace('|', "\\|"),
                v.default_text(),
                v.meaning
            ));
        }
    }
    assert!(
        problems.is_empty(),
        "README.md, ## Configuration:\n{}",
        problems.join("\n")
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

/// Every `§N` or `§N.M` that the repository's code and documents cite
/// names one section of `docs/design.md`, and each number there heads one
/// section: a number with two meanings, or none, sends the reader astray.
/// Citations of other documents say so before the sign (`DESIGN §6`, the
/// shared reference design; `paper 000 §4.6`) and are left out.
#[test]
fn every_design_section_citation_resolves() {
    let root = env!("CARGO_MANIFEST_DIR");
    let design = std::fs::read_to_string(format!("{root}/docs/design.md")).expect("docs/design.md");
    let mut numbers = std::collections::BTreeMap::<String, usize>::new();
    for line in design.lines().filter(|l| l.starts_with('#')) {
        let title = line.trim_start_matches('#').trim();
        if let Some(number) = title.split_whitespace().next() {
            let number = number.trim_end_matches('.');
            if number.chars().next().is_some_and(|c| c.is_ascii_digit()) {
                *numbers.entry(number.to_owned()).or_default() += 1;
            }
        }
    }
    let twice: Vec<_> = numbers.iter().filter(|&(_, &k)| k > 1).collect();
    assert!(
        twice.is_empty(),
        "docs/design.md numbers two sections alike: {twice:?}"
    );
    let files = std::process::Command::new("git")
        .args([
            "ls-files", "--", "*.rs", "*.md", "*.c", "*.h", "*.py", "*.sh", "*.toml", "ci/*",
        ])
        .current_dir(root)
        .output()
        .expect("git ls-files");
    let mut dangling = Vec::new();
    for file in String::from_utf8_lossy(&files.stdout).lines() {
        let Ok(text) = std::fs::read_to_string(format!("{root}/{file}")) else {
            continue;
        };
        for (i, line) in text.lines().enumerate() {
            for (at, _) in line.match_indices('§') {
                let before = &line[..at];
                if before.ends_with("DESIGN ") || before.contains("paper ") {
                    continue;
                }
                let number: String = line[at + '§'.len_utf8()..]
                    .chars()
                    .take_while(|c| c.is_ascii_digit() || *c == '.')
                    .collect();
                let number = number.trim_end_matches('.');
                if !number.is_empty() && !numbers.contains_key(number) {
                    dangling.push(format!("{file}:{}: §{number}", i + 1));
                }
            }
        }
    }
    assert!(
        dangling.is_empty(),
        "citations of docs/design.md sections it does not have: {dangling:?}"
    );
}

const CONFIG_BEGIN: &str = "<!-- The settings table, generated from src/config/table.rs by tests/readme.rs: \
                            FFD_BLESS=1 cargo test --test readme rewrites it. -->";
const CONFIG_END: &str = "<!-- End of the generated settings table. -->";

/// The table of `docs/configuration.md`: every `FFD_*` variable of the
/// settings table, in its order, with its accepted form, default and help.
fn settings_markdown() -> String {
    let cell = |s: &str| {
        s.replace('|', "\\|")
            .replace('<', "&lt;")
            .replace('>', "&gt;")
    };
    let mut out = String::from("| variable | accepted | default | meaning |\n|---|---|---|---|\n");
    for v in VARIABLES {
        out += &format!(
            "| `{}` | {} | `{}` | {} |\n",
            v.name,
            cell(v.accepted),
            cell(&v.default_text()),
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
    let path = concat!(env!("CARGO_MANIFEST_DIR"), "/docs/configuration.md");
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
