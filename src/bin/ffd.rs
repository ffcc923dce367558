//! The `ffd` command: `ffd run`, `ffd sim`, `ffd info`, `ffd agent`, `ffd rendezvous`.

fn main() {
    eprintln!("ffd: no subcommands yet");
    std::process::exit(2);
}
