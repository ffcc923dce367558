//! The README documents what the code offers: every `FFD_*` variable and
//! every subcommand appears in it, and it starts with the two commands.

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
