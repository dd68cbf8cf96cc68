//! One writer per results folder: `OUT/.ullstack.lock`.
//!
//! Two invocations writing one study folder fight: the second deletes the first's in-flight
//! `runs/.tmp-*` folders as "stale" (`exec`), and both rewrite `study.json`. So a study run
//! (`driver::run`), a merge (`driver::merge`) and a Slurm submission (`slurm::submit`, on
//! `OUT/slurm`) each hold the folder's lock while they write, and a second one refuses at once,
//! naming the holder:
//!
//! ```text
//! results/ull is in use by PID 4242 on host node7 since YYYY-MM-DD HH:MM:SS UTC
//! (ullstack study ull --quick): wait for it to finish, or stop it
//! ```
//!
//! ## How a dead holder is told from a live one
//! The lock is an advisory `flock(2)` on the file, taken without waiting (`LOCK_NB`). The
//! kernel drops it when the holding process exits, however it exits — `kill -9`, a Slurm time
//! limit, a node reboot — so a lock can never outlive its process, and a recycled PID cannot
//! keep it alive (the weakness of a PID written in a file and checked with `kill(pid, 0)`). The
//! PID, host, start time and command in the file only *name* the holder in the refusal. A file
//! left with a holder in it but no `flock` on it is what a killed process leaves behind; the
//! next invocation takes it over and reports whose it was ([`FolderLock::took_over`]), checking
//! that PID when the host is this one. On NFS (a cluster's shared results folder) Linux maps
//! `flock` to NFS byte-range locks, which the server releases when the client's lease lapses,
//! so a lock held by a crashed node frees itself too.
//!
//! ## Lifetime
//! The guard deletes the file while still holding the lock, then closes it. A process that
//! opened the old file just before and wins its `flock` after the delete would hold a lock on a
//! file no longer at the path; so after locking, [`acquire`] checks that the path still names
//! the inode it locked, and starts over if not (bounded by [`ACQUIRE_ATTEMPTS`]).

use std::fs::{File, OpenOptions};
use std::io::{Read, Seek, Write};
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};
use std::sync::Mutex;

/// The lock's file name inside the folder it guards.
pub const LOCK_FILE: &str = ".ullstack.lock";

/// Times `acquire` re-opens the file when it lost it to a releasing holder between opening and
/// locking; each retry needs another process to release in that instant, so 8 is ample.
pub const ACQUIRE_ATTEMPTS: usize = 8;

/// A held folder lock; released (and its file deleted) when dropped.
#[derive(Debug)]
pub struct FolderLock {
    path: PathBuf,
    /// Held open for the lock's lifetime: closing it releases the `flock`.
    _file: File,
    took_over: Option<String>,
}

impl FolderLock {
    /// When the lock was taken over from a holder that died without releasing it: who that
    /// was (e.g. `PID 4242 on host node7 …: ullstack study ull (no longer running)`).
    pub fn took_over(&self) -> Option<&str> {
        self.took_over.as_deref()
    }

    /// The lock file's path.
    pub fn path(&self) -> &Path {
        &self.path
    }
}

impl Drop for FolderLock {
    fn drop(&mut self) {
        // Delete while holding the lock (see the module essay), then close, which unlocks.
        held().retain(|p| p != &self.path);
        let _ = std::fs::remove_file(&self.path);
    }
}

/// The lock files this process holds, for [`release_held_for_exit`].
static HELD: Mutex<Vec<PathBuf>> = Mutex::new(Vec::new());

fn held() -> std::sync::MutexGuard<'static, Vec<PathBuf>> {
    // A panic elsewhere while holding it leaves the list itself intact.
    HELD.lock().unwrap_or_else(|poisoned| poisoned.into_inner())
}

/// Deletes every lock file this process holds, as their guards would: for a process about to
/// exit without unwinding (`interrupt`, on Ctrl-C). Its `flock`s go with the process.
pub fn release_held_for_exit() {
    for path in held().drain(..) {
        let _ = std::fs::remove_file(path);
    }
}

/// Takes `dir`'s lock for `what` (the command, shown to a second invocation), creating `dir`
/// if needed. Refuses, naming the holder, when a live process holds it.
pub fn acquire(dir: &Path, what: &str) -> Result<FolderLock, String> {
    std::fs::create_dir_all(dir).map_err(|e| format!("creating {}: {e}", dir.display()))?;
    let path = dir.join(LOCK_FILE);
    for _ in 0..ACQUIRE_ATTEMPTS {
        let mut file = OpenOptions::new()
            .read(true)
            .write(true)
            .create(true)
            .truncate(false)
            .open(&path)
            .map_err(|e| format!("opening {}: {e}", path.display()))?;
        if !crate::sys::try_flock(&file).map_err(|e| format!("locking {}: {e}", path.display()))? {
            let holder = read_holder(&mut file);
            return Err(format!(
                "{} is in use by {}: wait for it to finish, or stop it",
                dir.display(),
                if holder.is_empty() {
                    "another ullstack process (it has not written its name yet)".to_string()
                } else {
                    holder
                }
            ));
        }
        // Locked; is it still the file at `path`?
        let same = match (std::fs::metadata(&path), file.metadata()) {
            (Ok(at_path), Ok(locked)) => {
                at_path.ino() == locked.ino() && at_path.dev() == locked.dev()
            }
            _ => false,
        };
        if !same {
            continue;
        }
        let previous = read_holder(&mut file);
        let took_over = (!previous.is_empty()).then(|| format!("{previous}{}", gone(&previous)));
        let record = format!(
            "PID {} on host {} since {}: {what}",
            std::process::id(),
            hostname(),
            utc_now()
        );
        file.set_len(0)
            .and_then(|()| file.rewind())
            .and_then(|()| file.write_all(record.as_bytes()))
            .and_then(|()| file.flush())
            .map_err(|e| format!("writing {}: {e}", path.display()))?;
        held().push(path.clone());
        return Ok(FolderLock {
            path,
            _file: file,
            took_over,
        });
    }
    Err(format!(
        "{}: the lock changed hands {ACQUIRE_ATTEMPTS} times while taking it; try again",
        path.display()
    ))
}

/// Whether `dir`'s lock is free right now (taken and released at once); the holder's
/// description when it is not.
pub fn probe(dir: &Path, what: &str) -> Result<(), String> {
    acquire(dir, what).map(drop)
}

fn read_holder(file: &mut File) -> String {
    let mut text = String::new();
    let _ = file.rewind().and_then(|()| file.read_to_string(&mut text));
    text.trim().to_string()
}

/// ` (no longer running)` when the record names a process of this host that is gone, ` (its
/// process is gone)` for another host's (the kernel released its lock, so it ended there).
fn gone(record: &str) -> &'static str {
    let mut words = record.split_whitespace();
    let pid = match (words.next(), words.next()) {
        (Some("PID"), Some(p)) => p.parse::<u32>().ok(),
        _ => None,
    };
    let host = record
        .split(" on host ")
        .nth(1)
        .and_then(|r| r.split_whitespace().next());
    match (pid, host) {
        (Some(pid), Some(h)) if h == hostname() => {
            if Path::new("/proc").join(pid.to_string()).exists() {
                // A new process reuses the PID; the lock's holder still ended.
                " (ended; its PID is now another process's)"
            } else {
                " (no longer running)"
            }
        }
        _ => " (its process ended)",
    }
}

fn hostname() -> String {
    std::fs::read_to_string("/proc/sys/kernel/hostname")
        .map(|h| h.trim().to_string())
        .ok()
        .filter(|h| !h.is_empty())
        .unwrap_or_else(|| "unknown".into())
}

fn utc_now() -> String {
    utc(std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_secs()))
}

/// `YYYY-MM-DD HH:MM:SS UTC` of `secs` since the Unix epoch, as `date -u` prints it.
fn utc(secs: u64) -> String {
    let t = crate::provenance::Civil::from_unix(secs);
    format!(
        "{:04}-{:02}-{:02} {:02}:{:02}:{:02} UTC",
        t.year, t.month, t.day, t.hour, t.minute, t.second
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_second_taker_is_refused_by_name_until_the_first_releases() {
        let dir = tempfile::tempdir().unwrap();
        let first = acquire(dir.path(), "ullstack study ull --quick").unwrap();
        assert!(first.took_over().is_none());
        // A second open file description: flock conflicts within one process too.
        let e = acquire(dir.path(), "second").unwrap_err();
        assert!(
            e.contains(&format!("PID {}", std::process::id()))
                && e.contains("ullstack study ull --quick")
                && e.contains("wait for it to finish"),
            "{e}"
        );
        drop(first);
        assert!(!dir.path().join(LOCK_FILE).exists(), "released and deleted");
        let again = acquire(dir.path(), "third").unwrap();
        assert!(again.took_over().is_none());
    }

    #[test]
    fn locks_held_are_deleted_for_an_exit_and_a_released_one_is_forgotten() {
        let (a, b) = (tempfile::tempdir().unwrap(), tempfile::tempdir().unwrap());
        let la = acquire(a.path(), "a").unwrap();
        let lb = acquire(b.path(), "b").unwrap();
        drop(lb);
        assert!(
            !held().contains(&b.path().join(LOCK_FILE)),
            "forgotten once released"
        );
        assert!(a.path().join(LOCK_FILE).exists());
        release_held_for_exit();
        assert!(!a.path().join(LOCK_FILE).exists(), "deleted for the exit");
        drop(la);
    }

    #[test]
    fn a_file_left_by_a_dead_process_is_taken_over_and_named() {
        let dir = tempfile::tempdir().unwrap();
        // What `kill -9` leaves: the record, no flock. PID 0 is never a user process.
        std::fs::write(
            dir.path().join(LOCK_FILE),
            format!(
                "PID 0 on host {} since 2026-01-01 00:00:00 UTC: ullstack study ull",
                hostname()
            ),
        )
        .unwrap();
        let l = acquire(dir.path(), "next").unwrap();
        let t = l.took_over().expect("took over");
        assert!(
            t.contains("PID 0") && t.contains("ullstack study ull"),
            "{t}"
        );
        let other_host = tempfile::tempdir().unwrap();
        std::fs::write(
            other_host.path().join(LOCK_FILE),
            "PID 7 on host some-other-node since 2026-01-01 00:00:00 UTC: x",
        )
        .unwrap();
        let l = acquire(other_host.path(), "next").unwrap();
        assert!(l.took_over().unwrap().ends_with("(its process ended)"));
    }

    #[test]
    fn utc_dates_are_civil() {
        // `date -u -d @SECS '+%F %T'` for each.
        assert_eq!(utc(0), "1970-01-01 00:00:00 UTC");
        assert_eq!(utc(951_782_400), "2000-02-29 00:00:00 UTC");
        assert_eq!(utc(1_700_000_000), "2023-11-14 22:13:20 UTC");
    }
}
