//! Ctrl-C during a study: say what is kept and how to resume, then stop.
//!
//! A study killed by SIGINT used to vanish with the shell's `^C` and nothing else, leaving the
//! user to guess whether an hour of runs was lost. What is kept follows from `exec`'s rule: a
//! run's folder appears under `runs/<id>` only once whole, so every run finished before the
//! signal is kept and reused by the next invocation, and the runs in flight (`runs/.tmp-<id>`)
//! are lost, their folders deleted by the next invocation. On the first SIGINT the process
//! prints that, with counts, and the command that resumes (the same command line: rerunning
//! resumes), e.g.
//!
//! ```text
//! interrupted: 37 of 92 runs are complete and kept in results/ull/runs; the 2 in flight are discarded
//! resume with: ullstack study ull --out results/ull
//!   (it reuses the 37 kept runs and simulates the other 55)
//! ```
//!
//! then deletes the folder locks it holds (as their guards would) and exits with status 130
//! (128 + SIGINT, what a shell reports for a process killed by it). It does not wait for the
//! runs in flight: a full-size run can take minutes, and the user asked to stop.
//!
//! ## How
//! A signal handler may only call async-signal-safe functions, and printing, reading the run
//! folders and exiting are not. So the handler writes one byte to a pipe (the self-pipe trick);
//! a watcher thread blocked reading the pipe does the work. A second SIGINT while the watcher
//! works restores the default action and re-raises: the process dies at once, as it would have
//! without the handler, so a stuck watcher can never make Ctrl-C do nothing. The handler is
//! installed only by the commands that run studies in this process (`ullstack study NAME`), not
//! by the cluster submissions, whose `sbatch` children keep the default.

use std::io::Read;
use std::path::Path;
use std::sync::atomic::{AtomicBool, AtomicI32, Ordering};

use crate::exec::is_done;
use crate::spec::RunSpec;

/// Exit status after the first SIGINT: 128 + the signal's number, as shells report it.
pub const EXIT_STATUS: i32 = 128 + libc::SIGINT;

/// The pipe's write end, for the handler (-1 until installed).
static PIPE_WRITE: AtomicI32 = AtomicI32::new(-1);
/// Set by the first SIGINT; a second one takes the default action.
static SIGNALLED: AtomicBool = AtomicBool::new(false);
static INSTALLED: AtomicBool = AtomicBool::new(false);

extern "C" fn handler(_signal: libc::c_int) {
    if SIGNALLED.swap(true, Ordering::SeqCst) {
        crate::sys::die_of_sigint();
        return;
    }
    // The pipe's write end, which is never closed.
    crate::sys::write_byte(PIPE_WRITE.load(Ordering::SeqCst), 1);
}

/// Installs the SIGINT handler: on the first SIGINT, prints `message()` to stderr, deletes the
/// folder locks this process holds ([`crate::lock::release_held_for_exit`]) and exits with
/// [`EXIT_STATUS`]. Once per process.
pub fn on_sigint(message: impl FnOnce() -> String + Send + 'static) -> Result<(), String> {
    if INSTALLED.swap(true, Ordering::SeqCst) {
        return Err("the SIGINT handler is already installed".into());
    }
    let (mut read_end, write_end) =
        crate::sys::pipe_cloexec().map_err(|e| format!("creating the SIGINT pipe: {e}"))?;
    PIPE_WRITE.store(write_end, Ordering::SeqCst);
    std::thread::Builder::new()
        .name("sigint".into())
        .spawn(move || {
            let mut byte = [0u8; 1];
            if read_end.read_exact(&mut byte).is_ok() {
                // A fresh line: a progress bar may be drawn on the current one.
                eprintln!("\n{}", message());
                crate::lock::release_held_for_exit();
                std::process::exit(EXIT_STATUS);
            }
        })
        .map_err(|e| format!("starting the SIGINT watcher: {e}"))?;
    crate::sys::set_sigint_handler(handler)
        .map_err(|e| format!("installing the SIGINT handler: {e}"))?;
    Ok(())
}

/// What an interrupted study leaves in its folder.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Kept {
    /// Runs of this invocation's scope complete on disk (kept, reused on resume).
    pub complete: usize,
    /// Runs in this invocation's scope.
    pub total: usize,
    /// Runs being written (`runs/.tmp-*`): lost.
    pub in_flight: usize,
}

/// Counts what `out` holds of `scope` now.
pub fn kept(out: &Path, scope: &[RunSpec]) -> Kept {
    let in_flight = std::fs::read_dir(out.join("runs")).map_or(0, |d| {
        d.flatten()
            .filter(|e| e.file_name().to_string_lossy().starts_with(".tmp-"))
            .count()
    });
    Kept {
        complete: scope.iter().filter(|s| is_done(out, s)).count(),
        total: scope.len(),
        in_flight,
    }
}

/// The message for an interrupted study: what `out` keeps and the command that resumes.
pub fn message(k: Kept, out: &Path, resume: &str) -> String {
    let runs = out.join("runs");
    let lost = match k.in_flight {
        0 => String::new(),
        1 => "; the 1 in flight is discarded".to_string(),
        n => format!("; the {n} in flight are discarded"),
    };
    let left = k.total - k.complete.min(k.total);
    let kept = if k.complete == 0 {
        format!("no run of {} was complete yet", k.total)
    } else {
        format!(
            "{} of {} runs are complete and kept in {}",
            k.complete,
            k.total,
            runs.display()
        )
    };
    format!(
        "interrupted: {kept}{lost}\nresume with: {resume}\n  (it reuses the {} kept runs and simulates the other {left})",
        k.complete
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_message_counts_what_is_kept_and_gives_the_resuming_command() {
        let m = message(
            Kept {
                complete: 37,
                total: 92,
                in_flight: 2,
            },
            Path::new("results/ull"),
            "ullstack study ull --out results/ull",
        );
        assert_eq!(
            m,
            "interrupted: 37 of 92 runs are complete and kept in results/ull/runs; the 2 in flight are discarded\n\
             resume with: ullstack study ull --out results/ull\n  \
             (it reuses the 37 kept runs and simulates the other 55)"
        );
        let none = message(
            Kept {
                complete: 0,
                total: 4,
                in_flight: 1,
            },
            Path::new("o"),
            "x",
        );
        assert!(
            none.starts_with(
                "interrupted: no run of 4 was complete yet; the 1 in flight is discarded"
            ),
            "{none}"
        );
    }

    #[test]
    fn kept_counts_whole_runs_and_temporaries() {
        let dir = tempfile::tempdir().unwrap();
        let spec = |id: &str| RunSpec {
            device_keys: String::new(),
            id: id.into(),
            device: "zssd".into(),
            host: "x86-4".into(),
            job_fio: "[j]\nrw=randread\nnumber_ios=10\n".into(),
            seed: 1,
            system: None,
        };
        let (a, b) = (spec("a"), spec("b"));
        let done = crate::exec::run_dir(dir.path(), "a");
        std::fs::create_dir_all(&done).unwrap();
        a.write_files(&done).unwrap();
        std::fs::write(done.join("summary.json"), "{}").unwrap();
        std::fs::create_dir_all(dir.path().join("runs/.tmp-b")).unwrap();
        assert_eq!(
            kept(dir.path(), &[a, b]),
            Kept {
                complete: 1,
                total: 2,
                in_flight: 1
            }
        );
    }
}
