//! A server's presence in the registry: `servers/<id>` under a lease kept alive by a thread.
//!
//! The thread grants a lease of `ttl_s` seconds, writes the server's record under it, and
//! refreshes it every `ttl_s / 3` (so two refreshes can be lost before it expires). If a
//! refresh finds the lease gone (etcd restarted, or the process was paused past the TTL) it
//! grants a new one and writes the record again. On [`Announcement::stop`] (graceful shutdown)
//! it revokes the lease, so the server leaves the fleet at once; a server killed with `kill -9`
//! leaves when the TTL runs out. Placement never trusts a server whose record has expired.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{mpsc, Arc};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use crate::etcd::{Etcd, FleetError};
use crate::model::ServerRecord;
use crate::server_key;

/// A running announcement.
pub struct Announcement {
    stop: Arc<AtomicBool>,
    thread: Option<JoinHandle<()>>,
    /// The lease id, in hex as `etcdctl` prints it.
    pub lease: String,
}

impl Announcement {
    /// Revokes the lease (the server leaves the fleet now) and stops the thread.
    pub fn stop(mut self) {
        self.stop.store(true, Ordering::Release);
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

impl Drop for Announcement {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Release);
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

fn register(etcd: &mut Etcd, record: &ServerRecord, ttl_s: i64) -> Result<i64, FleetError> {
    let lease = etcd.grant_lease(ttl_s)?;
    let value = serde_json::to_vec(record).expect("a server record serialises");
    etcd.put_with_lease(&server_key(&record.id), value, lease)?;
    Ok(lease)
}

/// Announces `record` in the registry at `url` under a lease of `ttl_s` seconds (≥ 1). Returns
/// once the record is written (so a caller can print that the server joined), or the error.
pub fn announce(url: &str, record: ServerRecord, ttl_s: i64) -> Result<Announcement, FleetError> {
    if ttl_s < 1 {
        return Err(FleetError::Refused(format!(
            "registry lease TTL {ttl_s} s: expected at least 1"
        )));
    }
    let stop = Arc::new(AtomicBool::new(false));
    let (tx, rx) = mpsc::channel::<Result<i64, FleetError>>();
    let url = url.to_string();
    let stop_t = stop.clone();
    let thread = std::thread::Builder::new()
        .name("registry".into())
        .spawn(move || {
            let mut etcd = match Etcd::connect(&url) {
                Ok(e) => e,
                Err(e) => {
                    let _ = tx.send(Err(e));
                    return;
                }
            };
            let mut lease = match register(&mut etcd, &record, ttl_s) {
                Ok(l) => l,
                Err(e) => {
                    let _ = tx.send(Err(e));
                    return;
                }
            };
            let _ = tx.send(Ok(lease));
            let period = Duration::from_millis((ttl_s as u64 * 1000 / 3).max(100));
            let mut next = Instant::now() + period;
            while !stop_t.load(Ordering::Acquire) {
                std::thread::sleep(
                    Duration::from_millis(20).min(next.saturating_duration_since(Instant::now())),
                );
                if Instant::now() < next {
                    continue;
                }
                next = Instant::now() + period;
                match etcd.keep_alive_once(lease) {
                    Ok(ttl) if ttl > 0 => {}
                    Ok(_) | Err(_) => {
                        // Expired or unreachable: try to come back under a new lease.
                        if let Ok(l) = register(&mut etcd, &record, ttl_s) {
                            lease = l;
                        }
                    }
                }
            }
            let _ = etcd.revoke(lease);
        })
        .map_err(|e| FleetError::Refused(format!("starting the registry thread: {e}")))?;
    match rx.recv() {
        Ok(Ok(lease)) => Ok(Announcement {
            stop,
            thread: Some(thread),
            lease: format!("{lease:x}"),
        }),
        Ok(Err(e)) => {
            let _ = thread.join();
            Err(e)
        }
        Err(_) => {
            let _ = thread.join();
            Err(FleetError::Refused(
                "the registry thread stopped before announcing".into(),
            ))
        }
    }
}
