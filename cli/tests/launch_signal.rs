//! SIGTERM to a launcher that catches signals: it shuts the job down
//! cleanly, reaps every agent and ends as interrupted. Alone in its test
//! binary, since the signal goes to the whole test process.

use std::io::{self, Write};
use std::sync::mpsc::{self, Sender};
use std::thread;
use std::time::Duration;

use ffd_cli::launch::fault::Schedule;
use ffd_cli::launch::{AgentCommand, AgentExit, Ending, Launcher, Plan, RunInfo};
use nix::errno::Errno;
use nix::sys::signal::{Signal, kill, raise};
use nix::unistd::Pid;

const BOUND: Duration = Duration::from_secs(30);

/// A fake agent: ready at once, leaves on `shutdown` or end of file on stdin.
const FAKE: &str = r#"
echo "$FFD_SECRET_FILE" > "$SCRATCH/secret-of-$FFD_RANK"
echo "{\"event\":\"ready\",\"me\":$FFD_RANK}"
while read -r line; do [ "$line" = shutdown ] && break; done
echo "{\"event\":\"exit\",\"me\":$FFD_RANK}"
"#;

struct Lines(Sender<String>);

impl Write for Lines {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        let _ = self.0.send(String::from_utf8_lossy(buf).into_owned());
        Ok(buf.len())
    }
    fn flush(&mut self) -> io::Result<()> {
        Ok(())
    }
}

#[test]
fn sigterm_shuts_the_job_down_and_reaps_every_agent() {
    let scratch = std::env::temp_dir().join(format!("ffd-signal-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&scratch);
    std::fs::create_dir_all(&scratch).unwrap();
    let plan = Plan {
        info: RunInfo {
            ranks: 2,
            provider: "tcp".into(),
            period: Duration::from_millis(10),
            timeout: Duration::from_millis(100),
        },
        schedule: Schedule::default(),
        agree: Vec::new(),
        duration: Some(Duration::from_secs(600)),
        env: vec![("SCRATCH".into(), scratch.display().to_string())],
        hosts: None,
        netns: None,
        verbose: false,
        cores: Vec::new(),
    };
    let agent = AgentCommand {
        program: "/bin/sh".into(),
        args: vec!["-c".into(), FAKE.into(), "fake-agent".into()],
    };
    let launcher = Launcher::with_agent_command(plan, agent)
        .ready_timeout(BOUND)
        .shutdown_timeout(BOUND)
        .catch_signals(true);
    let abort = launcher.abort_handle();
    let (text_tx, text) = mpsc::channel();
    let (done_tx, done) = mpsc::channel();
    thread::spawn(move || {
        let _ = done_tx.send(launcher.run(&mut Lines(text_tx), &mut io::sink()));
    });
    // The handlers are installed before the agents start, so once they are
    // ready a SIGTERM is caught rather than fatal.
    let mut seen = String::new();
    while !seen.contains("all 2 ranks ready") {
        match text.recv_timeout(BOUND) {
            Ok(t) => seen.push_str(&t),
            Err(_) => {
                abort.abort();
                panic!("the fakes did not get ready: {seen}");
            }
        }
    }
    raise(Signal::SIGTERM).expect("raise");
    let outcome = done
        .recv_timeout(BOUND)
        .expect("the launcher ends after SIGTERM")
        .expect("the job ran");
    assert_eq!(outcome.ending, Ending::Interrupted(Signal::SIGTERM));
    for a in &outcome.agents {
        assert_eq!(a.exit, AgentExit::code(0), "rank {} left cleanly", a.rank);
        assert_eq!(kill(Pid::from_raw(a.pid as i32), None), Err(Errno::ESRCH));
    }
    while let Ok(t) = text.try_recv() {
        seen.push_str(&t);
    }
    assert!(
        seen.contains("interrupted by SIGTERM: shutting down 2 agents"),
        "{seen}"
    );
    assert_eq!(ffd_cli::launch::cli::exit_status(&outcome), 143);
    // The job's secret is gone with it.
    let secret = std::fs::read_to_string(scratch.join("secret-of-0")).unwrap();
    let secret = std::path::PathBuf::from(secret.trim());
    assert!(secret.is_absolute(), "{}", secret.display());
    assert!(!secret.parent().unwrap().exists(), "{}", secret.display());
    let _ = std::fs::remove_dir_all(&scratch);
}
