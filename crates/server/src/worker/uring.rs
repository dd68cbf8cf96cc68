//! A worker's socket I/O on its io_uring (`[dataplane] socket_io = "uring"`): the wait, the
//! completions of receives and sends, arming them, and taking a connection off the ring.
//!
//! # What it implements
//! The worker loop of `worker.rs` with [`crate::sockring::SockRing`] in place of epoll for
//! plain-TCP connections: each step's wait is one `io_uring_enter` that submits the sends and
//! receives the last step queued and waits for completions ([`Worker::ring_wait`]); a receive's
//! completion is the epoll path's `read` (its bytes join the input buffer, the connection is
//! decoded), a send's completion its `writev` result ([`Worker::ring_process`]). Where the
//! epoll path changes a connection's interest, this one arms a receive if the interest has
//! EPOLLIN and none is in the kernel ([`Worker::ring_interest`]); where it writes, this one
//! queues a send unless one is in the kernel ([`Worker::ring_flush`]). With `file_io =
//! "socket-ring"` the file volumes join the ring when it is set up
//! ([`Worker::ring_start`]): their SQEs go in with the step's enter, their completions are
//! handed to them by the storage step's reap (`worker/storage.rs`), and their own rings leave
//! the epoll set. epoll stays for what the ring does not read: the wake-up eventfd, TLS
//! connections and the rings of file volumes that keep their own, reported through a POLL on
//! the epoll descriptor.
//!
//! # Design
//! *The wait.* With `ring_wait = "batch"` the step's blocking enter asks the kernel for the
//! step's sends plus a receive of each active connection, bounded ([`crate::ringwait`]'s
//! `BatchWait`; with `ring_wait = "min-wait"` the bound is the kernel's minimum wait, and
//! the same enter goes on for one completion past it, [`SockRing::enter_batch`]); with
//! `ring_spin = "sized"` it first spins on the ring, its sends submitted,
//! for as long as the measured wake cost while the recent idle gaps say that pays
//! (`SpinSizer`), and the worker's loop does not poll for `idle_spin_ns`.
//!
//! A connection leaves the ring — to close, to start TLS, at shutdown — through
//! [`Worker::ring_detach`]: its operations are cancelled and their completions awaited before
//! anything it lent the kernel is touched; completions of other connections seen meanwhile
//! wait for the next step. A completion that never comes (a kernel that does not cancel within
//! [`DETACH_WAIT_NS`]) leaks what was lent rather than free memory the kernel may write.
//!
//! # What it leaves out
//! See [`crate::sockring`].

use std::io;
use std::os::fd::AsRawFd;

use super::Worker;
use crate::clock::now_ns;
use crate::config::SocketRecv;
use crate::conn::{Closing, ConnRef};
use crate::sockring::{Done, OpKind, RingConn, SockRing};
use crate::sys::EpollEvent;

/// How long taking a connection off the ring waits for its cancelled operations.
pub const DETACH_WAIT_NS: u64 = 1_000_000_000;

impl Worker {
    /// Sets up the socket ring when the config asks for it (on the worker's thread: the ring
    /// is single-issuer); falls back to epoll, saying so, when io_uring refuses.
    pub(super) fn ring_start(&mut self) {
        if self.shared.config.dataplane.socket_io != crate::config::SocketIo::Uring {
            return;
        }
        let d = &self.shared.config.dataplane;
        match SockRing::with_sqpoll(d.socket_recv, d.ring_sqpoll_idle_ms) {
            Ok(mut ring) => {
                ring.configure_wait(d.ring_wait, d.ring_spin, d.coalesce_ns);
                if let Some(min_bytes) = d
                    .send_zc
                    .min_bytes(crate::sockring::zc::SEND_ZC_LARGE_BYTES)
                {
                    if let Err(e) = ring.enable_send_zc(crate::sockring::SendZc { min_bytes }) {
                        tracing::warn!(
                            worker = self.index,
                            error = %e,
                            "dataplane.send_zc refused by the kernel: sends copy"
                        );
                    }
                }
                tracing::info!(
                    worker = self.index,
                    socket_io = "uring",
                    ring = ring.mode,
                    recv = ring.recv.name(),
                    wait = d.ring_wait.name(),
                    spin = d.ring_spin.name(),
                    spin_max_ns = ring.spin.as_ref().map_or(0, |s| s.max_spin_ns()),
                    min_wait = ring.min_wait,
                    sqpoll = ring.is_sqpoll(),
                    send_zc_min_bytes = ring.send_zc().map_or(0, |z| z.min_bytes),
                    "worker sockets on io_uring"
                );
                self.ring = Some(ring);
                self.host_file_volumes();
            }
            Err(e) => tracing::warn!(
                worker = self.index,
                error = %e,
                "dataplane.socket_io = \"uring\" refused by the kernel: this worker uses epoll"
            ),
        }
    }

    /// `file_io = "socket-ring"`: moves the file volumes' operations into the socket ring
    /// (each volume's own ring closed and no longer watched by epoll), so one enter per step
    /// submits and waits for the sockets and the files.
    ///
    /// Also after a reload attached new volumes (`worker/generation.rs`): those already
    /// hosted stay so.
    pub(super) fn host_file_volumes(&mut self) {
        if self.shared.config.dataplane.file_io != crate::config::FileIo::SocketRing {
            return;
        }
        let Some(ring) = self.ring.as_mut() else {
            return;
        };
        let mut hosted = 0;
        for (v, b) in self.backends.iter_mut().enumerate() {
            if v >= crate::sockring::MAX_GUEST_VOLUMES {
                break;
            }
            let fd = b.wake_fd();
            let Some(guest) = b.ring_guest() else {
                continue;
            };
            // Out of the epoll set before the join closes it.
            if let Some(fd) = fd {
                let _ = self.epoll.delete(fd);
            }
            if guest.join(&mut ring.host(v)) {
                hosted += 1;
            } else if let Some(fd) = fd {
                if let Err(e) = self
                    .epoll
                    .add(fd, super::TOKEN_BACKEND, libc::EPOLLIN as u32)
                {
                    tracing::error!(worker = self.index, error = %e, "a file ring left unwatched");
                }
            }
        }
        if hosted > 0 {
            tracing::info!(
                worker = self.index,
                file_volumes = hosted,
                file_io = "socket-ring",
                "file volumes' I/O in the worker's socket ring"
            );
        }
    }

    /// Whether the ring does the idle spin itself (`ring_spin = "sized"`): the worker's loop
    /// then does not poll for `idle_spin_ns`.
    pub(super) fn ring_spins(&self) -> bool {
        self.ring.as_ref().is_some_and(|r| r.spin.is_some())
    }

    /// The step's wait on the ring: submits what the last step queued, waits up to
    /// `timeout_ns` for a completion, collects the completions; when epoll has something
    /// ready, fills `events` as `epoll_wait` would and returns how many.
    ///
    /// Sends are handled here: a send the socket takes completes within the enter that
    /// submits it, and would end the wait at once. When sends are all the wait brought, and
    /// they leave nothing to do, it waits again for the rest of the time.
    ///
    /// A blocking wait first spins on the ring when the sized spin says it pays (its sends
    /// submitted first, so their completions do not end the spin), and asks the kernel for
    /// the batch the batch wait expects ([`crate::ringwait`]).
    pub(super) fn ring_wait(&mut self, events: &mut [EpollEvent], timeout_ns: u64) -> usize {
        let epoll_fd = self.epoll.raw();
        let deadline = now_ns().saturating_add(timeout_ns);
        // Completions set aside by a detach are handled now, without waiting.
        let mut timeout = if self.ring_done.is_empty() {
            timeout_ns
        } else {
            0
        };
        let mut polled = false;
        // The sized spin and the batch wait apply once, to the first blocking pass.
        let mut spin_due = timeout > 0;
        let mut batch_due = timeout > 0;
        loop {
            // Before every enter: a send completed in the last pass may have freed room for a
            // connection's input, and its receive must be in the kernel before this one sleeps.
            self.arm_wanted_receives();
            let Some(ring) = self.ring.as_mut() else {
                return 0;
            };
            if !self.poll_armed {
                self.poll_armed = ring.arm_poll(epoll_fd);
            }
            let mut pass_timeout = timeout;
            if spin_due && ring.spin.is_some() {
                if ring.queued() > 0 {
                    // Sends first: the spin waits for what they do not bring.
                    pass_timeout = 0;
                } else {
                    spin_due = false;
                    let spin_ns = ring.spin.as_mut().map_or(0, |s| s.next_spin_ns());
                    if spin_ns > 0 {
                        let gap = ring.spin(spin_ns.min(timeout));
                        if let Some(s) = ring.spin.as_mut() {
                            s.observe(gap);
                        }
                        if gap.is_some() {
                            pass_timeout = 0;
                        }
                    }
                }
            }
            let (sends, recvs) = (ring.sends_queued(), ring.recvs_armed());
            let (want, bound) = match ring.batch.as_mut() {
                Some(b) if batch_due && pass_timeout > 0 => {
                    batch_due = false;
                    b.want(now_ns(), sends, recvs, pass_timeout)
                }
                _ => (1, pass_timeout),
            };
            ring.enter_batch(want, bound, pass_timeout);
            let before = self.ring_done.len();
            ring.reap(&mut self.ring_done);
            if ring.send_zc().is_some() {
                // Orphans leave in the reap that brings their last notification.
                self.metrics.zerocopy_orphans.set(ring.orphans() as i64);
            }
            // A file volume's completion ends the wait as a socket's does.
            let guest_done = ring.has_guest_done();
            // In order (`remove`, not `swap_remove`): a multishot receive's completions are
            // its bytes in the order they arrived.
            let mut k = before;
            while k < self.ring_done.len() {
                match self.ring_done[k].kind {
                    OpKind::Send => {
                        let d = self.ring_done.remove(k);
                        self.send_done(d);
                    }
                    OpKind::Poll => {
                        self.ring_done.remove(k);
                        self.poll_armed = false;
                        polled = true;
                    }
                    _ => k += 1,
                }
            }
            let now = now_ns();
            if timeout == 0
                || polled
                || guest_done
                || !self.ring_done.is_empty()
                || !self.pending.is_empty()
                || now >= deadline
            {
                break;
            }
            timeout = deadline - now;
        }
        if polled {
            return self.epoll.wait(events, 0);
        }
        0
    }

    /// Handles the completions the wait collected: receives feed their connection's input
    /// (the connection joins `readable`), sends advance its output. Returns whether there
    /// were any.
    pub(super) fn ring_process(&mut self, now: u64, readable: &mut Vec<usize>) -> bool {
        let mut done = std::mem::take(&mut self.ring_done);
        let any = !done.is_empty();
        for d in done.drain(..) {
            match d.kind {
                OpKind::Recv => {
                    let i = d.conn.index as usize;
                    // A multishot receive may complete several times in a row.
                    if self.recv_done(d, now) && readable.last() != Some(&i) {
                        readable.push(i);
                    }
                }
                OpKind::Send => self.send_done(d),
                // A poll left over (several in one reap) or a cancellation: nothing to do.
                OpKind::Poll => self.poll_armed = false,
                OpKind::Cancel => {}
            }
        }
        // Keep the vector's capacity; a detach may have queued more meanwhile.
        done.append(&mut self.ring_done);
        self.ring_done = done;
        any
    }

    /// Copies what provided buffers are still held (their connections were not decoded this
    /// step: the budget ran out) into their connections' inputs and gives them back, so that
    /// every buffer is the kernel's again before the next enter.
    pub(super) fn release_held(&mut self) {
        let Some(ring) = self.ring.as_mut() else {
            return;
        };
        for me in self.held_conns.drain(..) {
            let Some(conn) = live_conn(&mut self.conns, me) else {
                continue;
            };
            if let Some(rc) = conn.ring.as_mut() {
                for buf in rc.held.drain(..) {
                    conn.input.extend_from_slice(ring.provided(&buf));
                    ring.recycle(buf);
                }
            }
        }
        // Only completions a detach set aside for the next step may still hold one.
        debug_assert_eq!(
            ring.provided_held(),
            self.ring_done.iter().filter(|d| d.buf.is_some()).count(),
            "a provided buffer outlived its step"
        );
    }

    /// The live connection `r` names, with its ring state.
    fn ring_conn(&mut self, r: ConnRef) -> Option<&mut super::Conn> {
        if !self.conns.is_current(r) {
            return None;
        }
        self.conns
            .get_mut(r.index as usize)
            .filter(|c| c.ring.is_some())
    }

    /// A receive completed; returns whether the connection should be decoded. A multishot
    /// receive's buffer is held for the step's decode, which reads it in place and gives it
    /// back to the kernel ([`Worker::release_held`] for those the budget did not reach); one
    /// that ended (no `more`: out of buffers, cancelled, end of stream) is
    /// armed again by the interest update that decoding ends with, if the connection still
    /// wants input.
    fn recv_done(&mut self, d: Done, now: u64) -> bool {
        let live = self.ring_conn(d.conn).is_some();
        let Some(ring) = self.ring.as_mut() else {
            return false;
        };
        let conn = match self.conns.get_mut(d.conn.index as usize) {
            Some(conn) if live => conn,
            _ => {
                if let Some(buf) = d.buf {
                    ring.recycle(buf);
                }
                return false;
            }
        };
        if let Some(rc) = conn.ring.as_mut() {
            if !d.more {
                rc.recv = false;
                rc.recv_cancelled = false;
            }
        }
        let received = usize::try_from(d.result).unwrap_or(0);
        let multishot = !conn.input.is_lent();
        match d.buf {
            // Held for this step's decode, which reads it in place and recycles it
            // (`decode_conn`; what the budget leaves, `release_held`).
            Some(buf) => match conn.ring.as_mut() {
                Some(rc) => {
                    if rc.held.is_empty() {
                        self.held_conns.push(d.conn);
                    }
                    rc.held.push(buf);
                }
                None => ring.recycle(buf),
            },
            None if conn.input.is_lent() => conn.input.end_recv(received),
            None => {}
        }
        let again = [libc::EAGAIN, libc::EINTR, libc::ECANCELED, libc::ENOBUFS];
        // A multishot receive reports the end of the stream in the same reap as the bytes
        // before it: a whole frame among them (NBD's disconnect) is decoded first, and the
        // receive armed again after the decode reports the end anew. Bytes held in provided
        // buffers may hold one.
        let holds = conn.ring.as_ref().is_some_and(|rc| !rc.held.is_empty());
        let whole_frame_waits = holds
            || (conn.input.pending_bytes() > 0
                && conn.input.pending_bytes() >= conn.input.want_bytes);
        match d.result {
            0 if multishot && whole_frame_waits => {}
            0 => conn.core.finish("client_closed"),
            n if n > 0 => {
                conn.core.last_active_ns = now;
                if let (Some(b), Some(rc)) = (ring.batch.as_mut(), conn.ring.as_mut()) {
                    b.note_recv(now, &mut rc.recv_epoch);
                }
            }
            e if again.contains(&-e) => {}
            e if e == -libc::EINVAL && ring.recv == SocketRecv::Multishot => {
                // A kernel with provided-buffer rings but no multishot RECV (before 6.0).
                tracing::warn!(
                    worker = self.index,
                    "multishot RECV refused by the kernel: single-shot RECV from now on"
                );
                ring.fall_back_to_single();
            }
            _ => conn.core.finish("read_error"),
        }
        self.metrics.socket_ring_ops.inc();
        self.metrics.input_read_bytes.inc_by(received as u64);
        let i = d.conn.index as usize;
        self.note_partial(i, now);
        true
    }

    /// A send completed: its bytes leave the output queue; a failed one means the peer is gone.
    fn send_done(&mut self, d: Done) {
        let pool = &mut self.pool;
        let i = d.conn.index as usize;
        let Some(conn) = self
            .conns
            .get_mut(i)
            .filter(|c| c.core.me == d.conn && c.ring.is_some())
        else {
            return;
        };
        let Some(rc) = conn.ring.as_mut() else {
            return;
        };
        if let Some(notif) = d.notif {
            // The pages of a zero-copy send are free: nothing moved on the wire, but the
            // connection holds less, which may let it (and its tenant) be read again.
            rc.zc.notified(notif.tag, &mut conn.core, pool);
            if notif.copied {
                self.metrics.zerocopy_copied.inc();
            }
            self.settle(i);
            if self.may_decode(i) {
                self.mark_pending(i);
            }
            self.update_interest(i);
            return;
        }
        let zero_copy = rc.zc.is_armed();
        rc.send = false;
        conn.core.out_lent = false;
        match d.result {
            n if n >= 0 => rc.zc.sent(&mut conn.core, n as usize, d.more, pool),
            e if e == -libc::EAGAIN || e == -libc::EINTR || e == -libc::ECANCELED => {
                rc.zc.sent(&mut conn.core, 0, d.more, pool)
            }
            e if zero_copy && (e == -libc::EINVAL || e == -libc::EOPNOTSUPP) => {
                // A kernel or socket without zero-copy sends: the output goes again, copied.
                rc.zc.sent(&mut conn.core, 0, d.more, pool);
                if let Some(ring) = self.ring.as_mut() {
                    ring.disable_send_zc();
                }
                tracing::warn!(
                    worker = self.index,
                    errno = -e,
                    "a zero-copy socket send was refused: sends copy from now on"
                );
            }
            _ => {
                rc.zc.sent(&mut conn.core, 0, d.more, pool);
                rc.zc.discard(&mut conn.core, pool);
                conn.core.finish("peer_gone");
            }
        }
        if zero_copy && d.result > 0 {
            self.metrics.zerocopy_sends.inc();
        }
        self.metrics.socket_ring_ops.inc();
        // More to send, or a close to finish: the send phase sees to it.
        let again = self
            .conns
            .get(i)
            .is_some_and(|c| c.has_output() || c.core.closing != Closing::Open);
        if again {
            self.mark_pending(i);
        }
        self.settle(i);
        if self.may_decode(i) {
            self.mark_pending(i);
        }
        self.update_interest(i);
    }

    /// Queues a send of connection `i`'s output unless one is in the kernel.
    pub(super) fn ring_flush(&mut self, i: usize) {
        let Some(ring) = self.ring.as_mut() else {
            return;
        };
        let Some(conn) = self.conns.get_mut(i) else {
            return;
        };
        let fd = conn.core.stream.as_raw_fd();
        let me = conn.core.me;
        let mut retry = false;
        if let Some(rc) = conn.ring.as_mut() {
            if !rc.send {
                // Not queued (the kernel's queue full): the next step tries again.
                retry = !ring.arm_send(fd, me, rc, &mut conn.core) && !conn.core.out.is_empty();
            }
        }
        if retry {
            self.mark_pending(i);
        }
    }

    /// The interest `want` (epoll flags) for ring connection `i`: when it wants input and no
    /// receive is in the kernel, lists it for one, armed just before the next wait
    /// ([`Worker::arm_wanted_receives`]).
    pub(super) fn ring_interest(&mut self, i: usize, want: u32) {
        let Some(conn) = self.conns.get_mut(i) else {
            return;
        };
        conn.core.epoll_events = want;
        let me = conn.core.me;
        let wants = want & libc::EPOLLIN as u32 != 0 && conn.core.closing == Closing::Open;
        let multishot = !conn.input.is_lent();
        let Some(rc) = conn.ring.as_mut() else {
            return;
        };
        if wants && !rc.recv && !rc.recv_wanted {
            rc.recv_wanted = true;
            self.recv_wanted.push(me);
        }
        // A multishot receive would go on reading past the connection's limits: cancel it
        // (bytes it takes before the cancel lands still join the input). A single-shot one
        // completes into the room it was given.
        if !wants && rc.recv && multishot && !rc.recv_cancelled {
            if let Some(ring) = self.ring.as_mut() {
                rc.recv_cancelled = ring.cancel(me, OpKind::Recv);
            }
        }
    }

    /// Arms the receives listed since the last wait, for connections that still want input.
    /// Not at once: a receive submitted before a coalescing pause would complete with what
    /// is there when the pause starts, and the pause would gather nothing.
    fn arm_wanted_receives(&mut self) {
        let Some(ring) = self.ring.as_mut() else {
            return;
        };
        for me in self.recv_wanted.drain(..) {
            let Some(conn) = live_conn(&mut self.conns, me) else {
                continue;
            };
            let fd = conn.core.stream.as_raw_fd();
            let wants = conn.core.epoll_events & libc::EPOLLIN as u32 != 0
                && conn.core.closing == Closing::Open;
            let Some(rc) = conn.ring.as_mut() else {
                continue;
            };
            rc.recv_wanted = false;
            if wants && !rc.recv && conn.input.has_room() && !conn.input.is_lent() {
                ring.arm_recv(fd, me, rc, &mut conn.input);
            }
        }
    }

    /// Takes connection `i` off the ring: cancels its receive and send, waits for their
    /// completions (the receive's bytes join its input, the send's leave its output), and
    /// leaves it as an epoll connection not yet watched. Completions of other connections
    /// wait for the next step.
    pub(super) fn ring_detach(&mut self, i: usize) {
        let Some(ring) = self.ring.as_mut() else {
            return;
        };
        let Some(conn) = self.conns.get_mut(i) else {
            return;
        };
        let Some(mut rc) = conn.ring.take() else {
            return;
        };
        let me = conn.core.me;
        // Bytes held from this step's receives come before any the cancel brings.
        for buf in rc.held.drain(..) {
            conn.input.extend_from_slice(ring.provided(&buf));
            ring.recycle(buf);
        }
        let (mut cancel_recv, mut cancel_send) = (rc.recv, rc.send);
        let deadline = now_ns() + DETACH_WAIT_NS;
        // Its completions reaped already (by this step's wait, or by the detach of another
        // connection, which sets aside what is not its own) come first: they will not come
        // again, and waiting for them cost DETACH_WAIT_NS per connection at shutdown.
        let mut seen = Vec::new();
        let mut k = 0;
        while k < self.ring_done.len() {
            let d = &self.ring_done[k];
            if d.conn == me && matches!(d.kind, OpKind::Recv | OpKind::Send) {
                seen.push(self.ring_done.remove(k));
            } else {
                k += 1;
            }
        }
        loop {
            for d in seen.drain(..) {
                let mine = d.conn == me && matches!(d.kind, OpKind::Recv | OpKind::Send);
                if !mine {
                    if d.kind == OpKind::Poll {
                        self.poll_armed = false;
                    } else {
                        self.ring_done.push(d);
                    }
                    continue;
                }
                let n = usize::try_from(d.result).unwrap_or(0);
                if d.kind == OpKind::Recv {
                    if let Some(buf) = d.buf {
                        conn.input.extend_from_slice(ring.provided(&buf));
                        ring.recycle(buf);
                    } else if conn.input.is_lent() {
                        conn.input.end_recv(n);
                    }
                    if !d.more {
                        rc.recv = false;
                        if d.result == 0 {
                            conn.core.finish("client_closed");
                        }
                    }
                } else if let Some(notif) = d.notif {
                    rc.zc.notified(notif.tag, &mut conn.core, &mut self.pool);
                } else {
                    rc.send = false;
                    conn.core.out_lent = false;
                    rc.zc.sent(&mut conn.core, n, d.more, &mut self.pool);
                }
            }
            // A connection that stays (turning to TLS) keeps its output queue: its zero-copy
            // notifications are awaited too; a closing one leaves them to the ring's orphans.
            let lent = conn.core.closing == Closing::Open && rc.zc.outstanding() > 0;
            if (!rc.busy() && !lent) || now_ns() >= deadline {
                break;
            }
            // Queued again if the queue was full (the enter below makes room).
            if cancel_recv && rc.recv {
                cancel_recv = !ring.cancel(me, OpKind::Recv);
            }
            if cancel_send && rc.send {
                cancel_send = !ring.cancel(me, OpKind::Send);
            }
            ring.enter(DETACH_WAIT_NS / 10);
            ring.reap(&mut seen);
        }
        if rc.recv && conn.input.is_lent() {
            // The kernel kept it: the input buffer is its for good.
            tracing::warn!(
                worker = self.index,
                "a cancelled socket receive did not complete; its buffer is leaked"
            );
            std::mem::forget(std::mem::take(&mut conn.input));
        } else if rc.recv {
            // Its buffers are the ring's; what it completes with later names a connection
            // that is off the ring, and goes back unread.
            tracing::warn!(
                worker = self.index,
                "a cancelled multishot socket receive did not end"
            );
        }
        if rc.send {
            tracing::warn!(
                worker = self.index,
                "a cancelled socket send did not complete; its buffers are leaked"
            );
            conn.core.out_lent = false;
            std::mem::forget(std::mem::take(&mut conn.core.out));
            conn.core.out_bytes = 0;
        }
        // Pages zero-copy sends may still read (its loans, and its queue, whose front frame
        // may be partly sent): kept by the ring until their notifications come.
        if let Some(orphan) = rc.zc.surrender(&mut conn.core) {
            ring.adopt_orphan(orphan);
            self.metrics.zerocopy_orphans.set(ring.orphans() as i64);
        }
    }

    /// Takes connection `i` off the ring and has epoll watch it with its current interest
    /// (before it turns to TLS, which reads the socket itself).
    pub(super) fn ring_to_epoll(&mut self, i: usize) -> io::Result<()> {
        let on_ring = self.conns.get(i).is_some_and(|c| c.ring.is_some());
        if !on_ring {
            return Ok(());
        }
        self.ring_detach(i);
        let Some(conn) = self.conns.get_mut(i) else {
            return Ok(());
        };
        let events = conn.core.epoll_events & !(libc::EPOLLOUT as u32);
        conn.core.epoll_events = events;
        self.epoll
            .add(conn.core.stream.as_raw_fd(), conn.core.me.token(), events)
    }

    /// The coalescing pause of `ns` on the ring: the step's sends and receives go to the
    /// kernel and the worker sleeps, in one `io_uring_enter`; false without a ring.
    pub(super) fn ring_hold(&mut self, ns: u64) -> bool {
        let Some(ring) = self.ring.as_mut() else {
            return false;
        };
        ring.enter_hold(ns);
        true
    }

    /// A ring state for a new plain connection.
    pub(super) fn ring_for_new(&self) -> Option<RingConn> {
        self.ring.as_ref().map(|_| RingConn::new())
    }
}

/// The connection `me` names, if it is still the one in its slot (not closed, the slot not
/// reused since `me` was queued).
fn live_conn(conns: &mut super::ConnTable<super::Conn>, me: ConnRef) -> Option<&mut super::Conn> {
    conns.get_mut(me.index as usize).filter(|c| c.core.me == me)
}
