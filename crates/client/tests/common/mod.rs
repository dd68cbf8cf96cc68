//! A small fake `ullstack serve` built only from `proto`: one in-memory volume, tenants with
//! secrets, a toy admission rule, and replies deliberately sent out of order (each batch of
//! requests read together is answered in reverse).

#![allow(dead_code)]

use std::collections::HashMap;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicU32, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

use proto::wire::{self, *};
use proto::{Decode, Disposition};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};

pub const VOLUME: &str = "vol";
pub const VOLUME_BYTES: u64 = 4 << 20;
pub const MAX_PAYLOAD: u32 = 1 << 20;
/// LC registrations asking for more than this many IOPS in total are refused.
pub const CAPACITY_IOPS: u64 = 100_000;

/// How the fake misbehaves, for failure tests.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub enum Mode {
    Normal,
    /// Close the connection on the first READ instead of answering.
    CloseOnRead,
    /// Answer the first READ with bytes that are not a reply.
    GarbageOnRead,
    /// Once, after this many requests, hold all replies for 200 ms (a server hiccup).
    StallOnceAfter(u64),
}

pub struct Fake {
    pub addr: SocketAddr,
    pub requests: Arc<AtomicU64>,
    pub max_batch: Arc<AtomicU64>,
}

struct State {
    data: Mutex<Vec<u8>>,
    reserved_iops: AtomicU64,
    next_handle: AtomicU32,
    requests: Arc<AtomicU64>,
    max_batch: Arc<AtomicU64>,
    mode: Mode,
    stalled: std::sync::atomic::AtomicBool,
}

pub async fn start(mode: Mode) -> Fake {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let requests = Arc::new(AtomicU64::new(0));
    let max_batch = Arc::new(AtomicU64::new(0));
    let state = Arc::new(State {
        data: Mutex::new(vec![0u8; VOLUME_BYTES as usize]),
        reserved_iops: AtomicU64::new(0),
        next_handle: AtomicU32::new(1),
        requests: requests.clone(),
        max_batch: max_batch.clone(),
        mode,
        stalled: std::sync::atomic::AtomicBool::new(false),
    });
    tokio::spawn(async move {
        while let Ok((sock, _)) = listener.accept().await {
            let state = state.clone();
            tokio::spawn(async move {
                let _ = serve(sock, state).await;
            });
        }
    });
    Fake {
        addr,
        requests,
        max_batch,
    }
}

fn reply(out: &mut Vec<u8>, opcode: Opcode, status: Status, cookie: u64, payload: &[u8]) {
    out.extend_from_slice(&ReplyHeader::new(opcode, status, cookie, payload.len() as u32).encode());
    out.extend_from_slice(payload);
}

fn error(opcode: Opcode, status: Status, cookie: u64, code: u32, msg: &str) -> Vec<u8> {
    let mut body = Vec::new();
    ErrorBody { code, message: msg }.encode_into(&mut body);
    let mut out = Vec::new();
    reply(&mut out, opcode, status, cookie, &body);
    out
}

async fn serve(mut sock: TcpStream, state: Arc<State>) -> std::io::Result<()> {
    sock.set_nodelay(true)?;
    let mut buf = Vec::new();
    let mut chunk = vec![0u8; 256 * 1024];
    let mut authed = false;
    let mut handles: HashMap<u32, u64> = HashMap::new();
    loop {
        let n = sock.read(&mut chunk).await?;
        if n == 0 {
            for iops in handles.values() {
                state.reserved_iops.fetch_sub(*iops, Ordering::SeqCst);
            }
            return Ok(());
        }
        buf.extend_from_slice(&chunk[..n]);
        let mut answers: Vec<Vec<u8>> = Vec::new();
        let mut consumed = 0;
        loop {
            match wire::decode_request(&buf[consumed..], MAX_PAYLOAD) {
                Ok(Decode::NeedMore { .. }) => break,
                Ok(Decode::Done {
                    frame,
                    consumed_bytes,
                }) => {
                    consumed += consumed_bytes;
                    state.requests.fetch_add(1, Ordering::Relaxed);
                    let op = frame.command.opcode();
                    if matches!(frame.command, Command::Read { .. }) {
                        match state.mode {
                            Mode::CloseOnRead => return Ok(()),
                            Mode::GarbageOnRead => {
                                sock.write_all(b"this is not a reply at all....").await?;
                                // Stay connected: the client must close on the garbage alone.
                                while sock.read(&mut chunk).await? > 0 {}
                                return Ok(());
                            }
                            Mode::Normal | Mode::StallOnceAfter(_) => {}
                        }
                    }
                    let answer = if !authed && op != Opcode::Hello {
                        error(op, Status::NotAuthenticated, frame.cookie, 0, "HELLO first")
                    } else {
                        handle(&state, &mut authed, &mut handles, frame)
                    };
                    answers.push(answer);
                }
                Err(e) => {
                    let cookie = match e.disposition() {
                        Disposition::Close => return Ok(()),
                        Disposition::ReplyThenClose { cookie } => cookie,
                        Disposition::ReplyAndContinue { cookie, .. } => cookie,
                    };
                    let op = e.opcode().unwrap_or(Opcode::Hello);
                    sock.write_all(&error(op, e.status(), cookie, 0, &e.to_string()))
                        .await?;
                    return Ok(());
                }
            }
        }
        buf.drain(..consumed);
        state
            .max_batch
            .fetch_max(answers.len() as u64, Ordering::Relaxed);
        if let Mode::StallOnceAfter(n) = state.mode {
            let seen = state.requests.load(Ordering::Relaxed);
            if seen >= n && !state.stalled.swap(true, Ordering::SeqCst) {
                tokio::time::sleep(std::time::Duration::from_millis(200)).await;
            }
        }
        // Out of order on purpose.
        let mut out = Vec::new();
        for a in answers.iter().rev() {
            out.extend_from_slice(a);
        }
        sock.write_all(&out).await?;
    }
}

fn handle(
    state: &State,
    authed: &mut bool,
    handles: &mut HashMap<u32, u64>,
    req: Request<'_>,
) -> Vec<u8> {
    let op = req.command.opcode();
    let cookie = req.cookie;
    if req.handle != 0 && !handles.contains_key(&req.handle) && op != Opcode::Register {
        return error(op, Status::UnknownHandle, cookie, 0, "no such handle");
    }
    let mut out = Vec::new();
    let in_range = |off: u64, len: u32| off + u64::from(len) <= VOLUME_BYTES;
    match req.command {
        Command::Hello(h) => {
            if h.tenant != "A" || h.secret != b"pw" {
                return error(op, Status::AuthFailed, cookie, 0, "bad tenant or secret");
            }
            if h.volume != VOLUME {
                return error(
                    op,
                    Status::NoSuchVolume,
                    cookie,
                    0,
                    &format!("no volume {:?}", h.volume),
                );
            }
            *authed = true;
            let body = HelloReply {
                session_id: 1,
                volume_size_bytes: VOLUME_BYTES,
                block_size_bytes: 512,
                max_payload_bytes: MAX_PAYLOAD,
                access: Access::ReadWrite,
            }
            .encode();
            reply(&mut out, op, Status::Ok, cookie, &body);
        }
        Command::Register(r) => {
            let iops = match r.class {
                RegisterClass::LatencyCritical(slo) => slo.iops,
                RegisterClass::BestEffort => 0,
            };
            let before = state.reserved_iops.fetch_add(iops, Ordering::SeqCst);
            if before + iops > CAPACITY_IOPS {
                state.reserved_iops.fetch_sub(iops, Ordering::SeqCst);
                return error(
                    op,
                    Status::Refused,
                    cookie,
                    RefusalCode::CapacityExceeded.to_u32(),
                    &format!("needs {iops} IOPS, {} left", CAPACITY_IOPS - before),
                );
            }
            let h = state.next_handle.fetch_add(1, Ordering::SeqCst);
            handles.insert(h, iops);
            reply(
                &mut out,
                op,
                Status::Ok,
                cookie,
                &RegisterReply { handle: h }.encode(),
            );
        }
        Command::Unregister => {
            if let Some(iops) = handles.remove(&req.handle) {
                state.reserved_iops.fetch_sub(iops, Ordering::SeqCst);
            }
            reply(&mut out, op, Status::Ok, cookie, &[]);
        }
        Command::Read {
            offset_bytes,
            length_bytes,
        } => {
            if !in_range(offset_bytes, length_bytes) {
                return error(op, Status::OutOfRange, cookie, 0, "beyond the volume");
            }
            let data = state.data.lock().unwrap();
            let s = offset_bytes as usize;
            reply(
                &mut out,
                op,
                Status::Ok,
                cookie,
                &data[s..s + length_bytes as usize],
            );
        }
        Command::Write {
            offset_bytes, data, ..
        } => {
            if !in_range(offset_bytes, data.len() as u32) {
                return error(op, Status::OutOfRange, cookie, 0, "beyond the volume");
            }
            let s = offset_bytes as usize;
            state.data.lock().unwrap()[s..s + data.len()].copy_from_slice(data);
            reply(&mut out, op, Status::Ok, cookie, &[]);
        }
        Command::Trim {
            offset_bytes,
            length_bytes,
        } => {
            if !in_range(offset_bytes, length_bytes) {
                return error(op, Status::OutOfRange, cookie, 0, "beyond the volume");
            }
            let s = offset_bytes as usize;
            state.data.lock().unwrap()[s..s + length_bytes as usize].fill(0);
            reply(&mut out, op, Status::Ok, cookie, &[]);
        }
        Command::Flush => reply(&mut out, op, Status::Ok, cookie, &[]),
        Command::Stats => {
            let json = format!(
                "{{\"handles\":{},\"reserved_iops\":{}}}",
                handles.len(),
                state.reserved_iops.load(Ordering::SeqCst)
            );
            reply(&mut out, op, Status::Ok, cookie, json.as_bytes());
        }
    }
    out
}
