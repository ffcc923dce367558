//! The agent processes of a launched job: spawning, the threads that watch
//! them, signals by PID, reaping, and the launcher's own SIGINT/SIGTERM.
//!
//! Owns: every `Child` of the launcher. Each lives in an [`Agent`] whose
//! `Drop` kills and reaps it, so no path out of the launcher (error, early
//! return, panic) leaves a process behind. Must not: signal a process it
//! has reaped. Only the launcher's thread reaps (`try_wait`/`wait` on the
//! `Child`); the watcher thread waits with `WNOWAIT`, which leaves the
//! zombie, and so the PID, in place until then. A PID is signalled only
//! after `try_wait` said the process is still there.
//!
//! Threads per agent, each ending on its own when the agent is gone: a
//! stdout reader (one [`ToLauncher::Line`] per line), a stderr reader (one
//! [`ToLauncher::Stderr`] per line) and an exit watcher ([`ToLauncher::Exited`]). All
//! send into the launcher's one channel, so it waits on a single
//! `recv_timeout`. The launcher's own SIGINT/SIGTERM are `signals`'.

use std::ffi::OsString;
use std::io::{self, BufRead, BufReader, Read, Write};
use std::os::unix::process::ExitStatusExt;
use std::path::PathBuf;
use std::process::{Child, ChildStdin, Command, ExitStatus, Stdio};
use std::sync::mpsc::Sender;
use std::thread;
use std::time::Instant;

use nix::sys::signal::{Signal, kill};
use nix::sys::wait::{Id, WaitPidFlag, waitid};
use nix::unistd::Pid;

use super::timeline::AgentExit;
use ffd::protocol::Rank;

/// Longest line kept from an agent; the rest of a longer line is dropped.
const MAX_LINE: usize = 64 * 1024;

/// What the watcher threads (and an abort) tell the launcher's thread.
#[derive(Debug)]
pub(crate) enum ToLauncher {
    /// A line on an agent's standard output, and when it arrived.
    Line {
        rank: Rank,
        at: Instant,
        text: String,
    },
    /// A line on an agent's standard error.
    Stderr { rank: Rank, text: String },
    /// An agent's standard output reached end of file.
    StdoutClosed { rank: Rank },
    /// An agent's standard error reached end of file.
    StderrClosed { rank: Rank },
    /// An agent's process ended (not yet reaped).
    Exited { rank: Rank, at: Instant },
    /// SIGINT or SIGTERM reached the launcher.
    Interrupted { signal: Signal },
    /// An [`AbortHandle`](super::AbortHandle) was used.
    Abort,
}

/// The program an agent runs: `ffd agent --stdin-control` by default.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct AgentCommand {
    pub program: PathBuf,
    pub args: Vec<OsString>,
}

/// One spawned agent; killed and reaped on drop unless already reaped.
pub(crate) struct Agent {
    pub rank: Rank,
    child: Child,
    stdin: Option<ChildStdin>,
    exit: Option<ExitStatus>,
}

impl Agent {
    /// Spawns rank `rank` with `env` added to the inherited environment,
    /// inside the namespaces of `host` if given (`ffd run --netns`), and
    /// starts its watcher threads.
    pub fn spawn(
        rank: Rank,
        command: &AgentCommand,
        env: &[(String, String)],
        host: Option<&ffd::node::Namespaces>,
        tx: &Sender<ToLauncher>,
    ) -> io::Result<Agent> {
        let mut cmd = Command::new(&command.program);
        if let Some(host) = host {
            host.spawn_inside(&mut cmd);
        }
        let mut child = cmd
            .args(&command.args)
            .envs(env.iter().map(|(k, v)| (k, v)))
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()?;
        let stdin = child.stdin.take();
        let stdout = child.stdout.take();
        let stderr = child.stderr.take();
        // From here on the guard owns the child: a failure below still reaps it.
        let agent = Agent {
            rank,
            child,
            stdin,
            exit: None,
        };
        if let Some(stdout) = stdout {
            let tx = tx.clone();
            spawn_thread(format!("ffd-run-out-{rank}"), move || {
                for_each_line(stdout, |text| {
                    tx.send(ToLauncher::Line {
                        rank,
                        at: Instant::now(),
                        text,
                    })
                    .is_ok()
                });
                let _ = tx.send(ToLauncher::StdoutClosed { rank });
            })?;
        }
        if let Some(stderr) = stderr {
            let tx = tx.clone();
            spawn_thread(format!("ffd-run-err-{rank}"), move || {
                for_each_line(stderr, |text| {
                    tx.send(ToLauncher::Stderr { rank, text }).is_ok()
                });
                let _ = tx.send(ToLauncher::StderrClosed { rank });
            })?;
        }
        let pid = agent.pid();
        let tx = tx.clone();
        spawn_thread(format!("ffd-run-wait-{rank}"), move || {
            // WNOWAIT: learn of the exit without reaping, so the PID stays
            // ours until the launcher's thread reaps it.
            let flags = WaitPidFlag::WEXITED | WaitPidFlag::WNOWAIT;
            // Ends when it exited, or was already reaped by the launcher (ECHILD).
            while let Err(nix::errno::Errno::EINTR) = waitid(Id::Pid(pid), flags) {}
            let _ = tx.send(ToLauncher::Exited {
                rank,
                at: Instant::now(),
            });
        })?;
        Ok(agent)
    }

    pub fn pid(&self) -> Pid {
        Pid::from_raw(i32::try_from(self.child.id()).unwrap_or(i32::MAX))
    }

    /// The exit status, once reaped.
    pub fn exit(&self) -> Option<ExitStatus> {
        self.exit
    }

    /// Reaps the process if it has ended; its status if so.
    pub fn try_reap(&mut self) -> Option<ExitStatus> {
        if self.exit.is_none() {
            if let Ok(Some(status)) = self.child.try_wait() {
                self.exit = Some(status);
            }
        }
        self.exit
    }

    /// Sends `signal`, unless the process has ended (then its status). The
    /// check reaps an ended process, so the PID cannot have been reused.
    pub fn signal(&mut self, signal: Signal) -> Result<(), ExitStatus> {
        if let Some(status) = self.try_reap() {
            return Err(status);
        }
        // Not reaped, so the PID is still this process (or its zombie).
        let _ = kill(self.pid(), signal);
        Ok(())
    }

    /// Writes `line` and a newline to the agent's standard input (an
    /// `--stdin-control` command such as `agree`); false if it is closed.
    pub fn send_line(&mut self, line: &str) -> bool {
        match self.stdin.as_mut() {
            // A dead agent's pipe fails with EPIPE.
            Some(stdin) => stdin
                .write_all(format!("{line}\n").as_bytes())
                .and_then(|()| stdin.flush())
                .is_ok(),
            None => false,
        }
    }

    /// Asks the agent to leave: writes `shutdown` and closes its stdin.
    pub fn request_shutdown(&mut self) {
        if let Some(mut stdin) = self.stdin.take() {
            // A dead agent's pipe fails with EPIPE; nothing to do then.
            let _ = stdin.write_all(b"shutdown\n");
        }
    }

    /// SIGKILL if still there, then a blocking reap (SIGKILL cannot be
    /// ignored, so the wait is short).
    pub fn kill_and_reap(&mut self) -> Option<ExitStatus> {
        if self.signal(Signal::SIGKILL).is_ok() {
            if let Ok(status) = self.child.wait() {
                self.exit = Some(status);
            }
        }
        self.exit
    }
}

impl Drop for Agent {
    fn drop(&mut self) {
        self.stdin.take();
        self.kill_and_reap();
    }
}

/// How a reaped agent ended, for the timeline.
pub(crate) fn agent_exit(status: ExitStatus, forced: bool) -> AgentExit {
    AgentExit {
        code: status.code(),
        signal: status.signal(),
        forced,
    }
}

/// Stack of the watcher threads: they hold a line buffer and little else,
/// and a job has three per rank.
pub(crate) const WATCHER_STACK: usize = 256 * 1024;

pub(crate) fn spawn_thread(name: String, f: impl FnOnce() + Send + 'static) -> io::Result<()> {
    thread::Builder::new()
        .name(name)
        .stack_size(WATCHER_STACK)
        .spawn(f)
        .map(drop)
}

/// Calls `each` with every line of `input` (without its newline, invalid
/// UTF-8 replaced, cut at [`MAX_LINE`]) until end of file, an error, or
/// `each` returns false.
fn for_each_line(input: impl Read, mut each: impl FnMut(String) -> bool) {
    let mut reader = BufReader::new(input);
    let mut buf = Vec::new();
    loop {
        buf.clear();
        match (&mut reader)
            .take(MAX_LINE as u64)
            .read_until(b'\n', &mut buf)
        {
            Ok(0) | Err(_) => return,
            Ok(_) => {}
        }
        let complete = buf.last() == Some(&b'\n');
        if !complete && buf.len() >= MAX_LINE {
            // Drop the rest of an overlong line, a bounded piece at a time.
            let mut rest = Vec::new();
            loop {
                rest.clear();
                match (&mut reader)
                    .take(MAX_LINE as u64)
                    .read_until(b'\n', &mut rest)
                {
                    Ok(0) | Err(_) => break,
                    Ok(_) if rest.last() == Some(&b'\n') => break,
                    Ok(_) => {}
                }
            }
        }
        while matches!(buf.last(), Some(b'\n' | b'\r')) {
            buf.pop();
        }
        if !each(String::from_utf8_lossy(&buf).into_owned()) {
            return;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn lines_are_split_trimmed_and_bounded() {
        let mut long = vec![b'x'; MAX_LINE + 10];
        long.extend_from_slice(b"\nafter\r\nlast");
        let mut lines = Vec::new();
        for_each_line(&long[..], |l| {
            lines.push(l);
            true
        });
        assert_eq!(lines.len(), 3);
        assert_eq!(lines[0].len(), MAX_LINE);
        assert_eq!(lines[1], "after");
        assert_eq!(lines[2], "last");
    }

    #[test]
    fn invalid_utf8_is_replaced_not_fatal() {
        let mut lines = Vec::new();
        for_each_line(&b"a\xffb\nok\n"[..], |l| {
            lines.push(l);
            true
        });
        assert_eq!(lines, ["a\u{fffd}b", "ok"]);
    }

    #[test]
    fn exits_describe_code_signal_and_force() {
        assert_eq!(
            agent_exit(ExitStatus::from_raw(3 << 8), false).to_string(),
            "code 3"
        );
        assert_eq!(
            agent_exit(ExitStatus::from_raw(9), false).to_string(),
            "killed by SIGKILL"
        );
        assert_eq!(
            agent_exit(ExitStatus::from_raw(9), true).to_string(),
            "killed by ffd run after the shutdown bound"
        );
    }
}
