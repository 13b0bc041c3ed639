//! A program over a CPU device, decoded from the input, run through the
//! public API and checked against a sequential model of its outcome.
//!
//! The program submits actions over the device's queues (`execute` of
//! bound dispatches that increment a buffer's bytes or read them, directly
//! or through a binding table; a dispatch whose tile fails; `barrier`;
//! `host_call`s that succeed or fail; `alloca`, increments of the transient
//! memory through a binding table, `dealloca`), each signalling its own
//! semaphore and waiting on earlier actions' semaphores or on gates that
//! the host signals or fails; it also waits on semaphores with short
//! timeouts and drops the queue and device handles in any order. At the
//! end the gates are resolved, every action must settle within a bound (a
//! hang is a crash), and each outcome must be one the model allows:
//!
//! - an action whose waits were all reached, that touches no buffer that
//!   an action unordered with it writes (or uses a transient buffer
//!   outside its alloca..dealloca), and that does not fail on its own,
//!   signals; one that fails carries the kind of a failed wait, its own
//!   fault (`Aborted`), `FailedPrecondition` where a hazard was possible,
//!   or `Cancelled` once every handle was dropped;
//! - a use ordered after a dealloca that ran, or of memory whose alloca
//!   failed, fails; a second dealloca ordered after one that ran fails;
//! - every buffer ends with each byte equal to the number of increments
//!   that signalled; a host call ran once if it signalled, and not at all
//!   if it failed for another reason than its own;
//! - a timed wait's answer agrees with the final state;
//! - once every handle is dropped, every closure's capture is dropped.
//!
//! Run: `cd fuzz && cargo fuzz run -s none api corpus/api seeds/api`
//! (`seeds/api` is the committed corpus; new inputs go to `corpus/api`).
//!
//! Checked against a mutation: with `dealloca` not closing its buffer
//! (`device::work::dealloca_ran` returning `Ok` without `close`), the run
//! from the seeds crashes within seconds ("a second dealloca ordered
//! after one that ran signalled, but it must fail").
#![no_main]

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use fenceline::{
    Binding, Buffer, CommandBuffer, CpuConfig, Device, Error, ErrorKind, Queue, Semaphore, Tile,
    TileIo,
};
use libfuzzer_sys::fuzz_target;

/// Ops decoded at most (each action is one bit of a `u64` order set).
const MAX_OPS: usize = 48;
const BUFFERS: usize = 3;
/// Bytes of every buffer: `TILES` chunks of `CHUNK`.
const BUF_LEN: usize = 64;
const TILES: u32 = 4;
const CHUNK: usize = 16;
const GATES: usize = 2;
/// Actions wait on gate values up to this; the end signals every gate
/// that did not fail to it.
const GATE_TOP: u64 = 4;
/// Transient buffers an input may take.
const MAX_TRANSIENTS: usize = 4;
/// A settled program takes far less: past this, it hangs.
const SETTLE: Duration = Duration::from_secs(20);
const GATE_KINDS: [ErrorKind; 2] = [ErrorKind::Unavailable, ErrorKind::OutOfRange];

struct Bytes<'a> {
    data: &'a [u8],
    at: usize,
}

impl Bytes<'_> {
    fn next(&mut self) -> u8 {
        let b = self.data.get(self.at).copied().unwrap_or(0);
        self.at += 1;
        b
    }

    fn below(&mut self, n: usize) -> usize {
        usize::from(self.next()) % n
    }

    fn done(&self) -> bool {
        self.at >= self.data.len()
    }
}

/// What an action's buffer use is about: a device buffer, or a transient
/// one (its index in `Program::transients`).
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
enum Target {
    Buffer(usize),
    Transient(usize),
}

#[derive(Clone, Copy, PartialEq, Eq, Debug)]
enum Use {
    Read,
    Write,
    Alloca,
    Dealloca,
}

#[derive(Debug)]
enum Body {
    Inc { target: Target, table: bool },
    Read { buffer: usize },
    HostCall { fail: bool },
    Barrier,
    FailingDispatch,
    Alloca { transient: usize },
    Dealloca { transient: usize },
}

impl Body {
    fn touches(&self) -> Option<(Target, Use)> {
        match *self {
            Body::Inc { target, .. } => Some((target, Use::Write)),
            Body::Read { buffer } => Some((Target::Buffer(buffer), Use::Read)),
            Body::Alloca { transient } => Some((Target::Transient(transient), Use::Alloca)),
            Body::Dealloca { transient } => Some((Target::Transient(transient), Use::Dealloca)),
            _ => None,
        }
    }

    /// Fails on its own once its waits are met.
    fn fails(&self) -> bool {
        matches!(self, Body::HostCall { fail: true } | Body::FailingDispatch)
    }
}

#[derive(Clone, Copy, Debug)]
enum Src {
    Action(usize),
    Gate(usize),
}

struct Action {
    body: Body,
    waits: Vec<(Src, u64)>,
    sem: Semaphore,
    /// `sem` reaches it when the action succeeded.
    value: u64,
    /// The actions ordered before this one (bit `j`: action `j`), through
    /// its waits.
    before: u64,
    runs: Arc<AtomicUsize>,
}

/// A timed wait of the host and its answer.
struct TimedWait {
    src: Src,
    result: Result<(), ErrorKind>,
}

/// Everything the closures of one program capture: dropped with the last
/// of them.
struct Live;

struct Cbs {
    inc: Vec<CommandBuffer>,
    inc_slot: CommandBuffer,
    read: Vec<CommandBuffer>,
    failing: CommandBuffer,
}

fn record(device: &Device, buffers: &[Buffer], live: &Arc<Live>) -> Result<Cbs, Error> {
    let inc = |cb: &mut CommandBuffer, binding: Binding<'_>| {
        let keep = live.clone();
        cb.dispatch_with(
            [TILES, 1, 1],
            &[binding],
            move |_: &Tile, io: &TileIo<'_>| {
                let _ = &keep;
                for b in io.chunk::<u8>(0)? {
                    *b = b.wrapping_add(1);
                }
                Ok(())
            },
        )?;
        cb.end()
    };
    let mut incs = Vec::new();
    for b in buffers {
        let mut cb = device.command_buffer()?;
        inc(&mut cb, Binding::write_chunks(b, CHUNK))?;
        incs.push(cb);
    }
    let mut inc_slot = device.command_buffer()?;
    inc(&mut inc_slot, Binding::slot_write_chunks(0, CHUNK))?;
    let mut reads = Vec::new();
    for b in buffers {
        let mut cb = device.command_buffer()?;
        let keep = live.clone();
        cb.dispatch_with(
            [TILES, 1, 1],
            &[Binding::read(b)],
            move |_: &Tile, io: &TileIo<'_>| {
                let _ = &keep;
                let bytes: &[u8] = io.read(0)?;
                assert_eq!(bytes.len(), BUF_LEN);
                Ok(())
            },
        )?;
        cb.end()?;
        reads.push(cb);
    }
    let mut failing = device.command_buffer()?;
    let keep = live.clone();
    failing.dispatch([2, 1, 1], move |t: &Tile| {
        let _ = &keep;
        if t.workgroup_id[0] == 0 {
            return Err(Error::new(ErrorKind::Aborted, "a failing tile"));
        }
        Ok(())
    })?;
    failing.end()?;
    Ok(Cbs {
        inc: incs,
        inc_slot,
        read: reads,
        failing,
    })
}

struct Transient {
    buffer: Buffer,
}

/// Final state of a semaphore: its value, or its failure's kind.
fn state(s: &Semaphore) -> Result<u64, ErrorKind> {
    s.query().map_err(|e| e.kind())
}

fn run(data: &[u8]) {
    let mut bytes = Bytes { data, at: 0 };
    let config = bytes.next();
    let queue_count = 1 + usize::from(config & 1);
    let mut device = Some(
        Device::cpu_with(CpuConfig {
            workers: 1 + usize::from(config >> 1 & 1),
            queues: queue_count,
            spin: config & 4 != 0,
        })
        .expect("a CPU device"),
    );
    let dev = device.as_ref().unwrap();
    let mut queues: Vec<Queue> = (0..queue_count)
        .map(|i| dev.queue(i).expect("a queue"))
        .collect();
    let buffers: Vec<Buffer> = (0..BUFFERS)
        .map(|_| dev.buffer(BUF_LEN).expect("a buffer"))
        .collect();
    let live = Arc::new(Live);
    let cbs = record(dev, &buffers, &live).expect("recordings");
    let gates: Vec<Semaphore> = (0..GATES).map(|_| Semaphore::new(0)).collect();
    let mut gate_failed = [false; GATES];
    let mut actions: Vec<Action> = Vec::new();
    let mut transients: Vec<Transient> = Vec::new();
    let mut waits_seen: Vec<TimedWait> = Vec::new();
    let mut dropped_all = false;

    for _ in 0..MAX_OPS {
        if bytes.done() {
            break;
        }
        let op = bytes.next() % 16;
        match op {
            // Host ops.
            9 => {
                let g = bytes.below(GATES);
                let v = state(&gates[g]);
                if let Ok(v) = v {
                    if v < GATE_TOP {
                        gates[g].signal(v + 1).expect("a gate's next value");
                    }
                }
                continue;
            }
            10 => {
                let g = bytes.below(GATES);
                let kind = GATE_KINDS[g];
                gates[g].fail(Error::new(kind, "a gate failed by the program"));
                gate_failed[g] = true;
                continue;
            }
            11 | 12 => {
                let timeout = Duration::from_micros(u64::from(bytes.next()) * 4);
                let (src, sem, value) = if op == 11 && !actions.is_empty() {
                    let j = bytes.below(actions.len());
                    (Src::Action(j), &actions[j].sem, actions[j].value)
                } else {
                    let g = bytes.below(GATES);
                    (
                        Src::Gate(g),
                        &gates[g],
                        1 + bytes.below(GATE_TOP as usize) as u64,
                    )
                };
                let result = sem.wait(value, timeout).map_err(|e| e.kind());
                waits_seen.push(TimedWait { src, result });
                continue;
            }
            13 => {
                if !queues.is_empty() {
                    let i = bytes.below(queues.len());
                    drop(queues.swap_remove(i));
                }
                dropped_all = queues.is_empty() && device.is_none();
                continue;
            }
            14 => {
                device = None;
                dropped_all = queues.is_empty();
                continue;
            }
            _ => {}
        }
        if dropped_all {
            continue;
        }
        if queues.is_empty() {
            // The device handle is alive: take a queue again.
            let d = device.as_ref().expect("a handle is alive");
            queues.push(d.queue(0).expect("a queue"));
        }
        let q = &queues[bytes.below(queues.len())];
        let body = match op {
            0 | 1 => Body::Inc {
                target: Target::Buffer(bytes.below(BUFFERS)),
                table: op == 1,
            },
            2 => Body::Read {
                buffer: bytes.below(BUFFERS),
            },
            3 => Body::HostCall {
                fail: bytes.next() & 3 == 0,
            },
            4 => Body::Barrier,
            5 => Body::FailingDispatch,
            6 if transients.len() < MAX_TRANSIENTS => Body::Alloca {
                transient: transients.len(),
            },
            7 | 8 | 15 if !transients.is_empty() => {
                // The newest two transients.
                let t = transients.len() - 1 - bytes.below(transients.len().min(2));
                if op == 8 {
                    Body::Dealloca { transient: t }
                } else {
                    Body::Inc {
                        target: Target::Transient(t),
                        table: true,
                    }
                }
            }
            _ => continue,
        };
        // Waits: up to two, on earlier actions' values or on gates.
        let mut waits = Vec::new();
        let mut before = 0u64;
        for _ in 0..bytes.below(3) {
            let w = bytes.next();
            if w & 1 == 0 && !actions.is_empty() {
                let j = usize::from(w >> 1) % actions.len();
                let value = 1 + bytes.below(actions[j].value as usize) as u64;
                waits.push((Src::Action(j), value));
                before |= 1 << j | actions[j].before;
            } else {
                let g = usize::from(w >> 1) % GATES;
                waits.push((Src::Gate(g), 1 + bytes.below(GATE_TOP as usize) as u64));
            }
        }
        let value = 1 + bytes.below(3) as u64;
        let sem = Semaphore::new(0);
        let runs = Arc::new(AtomicUsize::new(0));
        {
            let w: Vec<(&Semaphore, u64)> = waits
                .iter()
                .map(|&(src, v)| match src {
                    Src::Action(j) => (&actions[j].sem, v),
                    Src::Gate(g) => (&gates[g], v),
                })
                .collect();
            let s = [(&sem, value)];
            let submitted = match body {
                Body::Inc {
                    target: Target::Buffer(b),
                    table: false,
                } => q.execute(&w, &s, &[&cbs.inc[b]]),
                Body::Inc {
                    target: Target::Buffer(b),
                    table: true,
                } => q.execute_with(&w, &s, &[&cbs.inc_slot], &[&buffers[b]]),
                Body::Inc {
                    target: Target::Transient(t),
                    ..
                } => q.execute_with(&w, &s, &[&cbs.inc_slot], &[&transients[t].buffer]),
                Body::Read { buffer } => q.execute(&w, &s, &[&cbs.read[buffer]]),
                Body::HostCall { fail } => {
                    let (runs, keep) = (runs.clone(), live.clone());
                    q.host_call(&w, &s, move || {
                        let _ = &keep;
                        runs.fetch_add(1, Ordering::SeqCst);
                        if fail {
                            return Err(Error::new(ErrorKind::Aborted, "a failing host call"));
                        }
                        Ok(())
                    })
                }
                Body::Barrier => q.barrier(&w, &s),
                Body::FailingDispatch => q.execute(&w, &s, &[&cbs.failing]),
                Body::Alloca { .. } => q.alloca(&w, &s, BUF_LEN).map(|buffer| {
                    transients.push(Transient { buffer });
                }),
                Body::Dealloca { transient } => q.dealloca(&w, &s, &transients[transient].buffer),
            };
            let submitted = match (submitted, &body) {
                // Refused at the call: the transient's dealloca ran already
                // (`execute` checks at the call). The action fails as it
                // would have at its issue: the model reads that through
                // its semaphore.
                (
                    Err(e),
                    &Body::Inc {
                        target: Target::Transient(_),
                        ..
                    },
                ) if e.kind() == ErrorKind::FailedPrecondition => {
                    sem.fail(e);
                    Ok(())
                }
                (r, _) => r,
            };
            submitted.expect("a valid submission is accepted");
        }
        actions.push(Action {
            body,
            waits,
            sem,
            value,
            before,
            runs,
        });
    }

    // The end: every gate resolved, every action settled.
    for (g, gate) in gates.iter().enumerate() {
        if !gate_failed[g] {
            if let Ok(v) = state(gate) {
                if v < GATE_TOP {
                    gate.signal(GATE_TOP).expect("a gate's last value");
                }
            }
        }
    }
    let started = Instant::now();
    for (i, a) in actions.iter().enumerate() {
        let left = SETTLE.saturating_sub(started.elapsed());
        if let Err(e) = a.sem.wait(a.value, left) {
            assert_ne!(
                e.kind(),
                ErrorKind::DeadlineExceeded,
                "action {i} ({:?}) neither signalled nor failed after {SETTLE:?}",
                a.body
            );
        }
    }
    let outcomes: Vec<Result<u64, ErrorKind>> = actions.iter().map(|a| state(&a.sem)).collect();
    let gate_states: Vec<Result<u64, ErrorKind>> = gates.iter().map(state).collect();
    for (i, a) in actions.iter().enumerate() {
        check_action(i, a, &actions, &outcomes, &gate_states, dropped_all);
    }
    for w in &waits_seen {
        let last = match w.src {
            Src::Action(j) => outcomes[j],
            Src::Gate(g) => gate_states[g],
        };
        match w.result {
            // A gate may fail after the value was reached; an action's
            // semaphore is signalled or failed, once.
            Ok(()) => assert!(
                last.is_ok() || matches!(w.src, Src::Gate(_)),
                "a wait on {:?} returned, but it failed",
                w.src
            ),
            Err(ErrorKind::DeadlineExceeded) => {}
            Err(k) => assert_eq!(last, Err(k), "a wait on {:?} failed with {k:?}", w.src),
        }
    }
    for (b, buffer) in buffers.iter().enumerate() {
        let incs = actions
            .iter()
            .zip(&outcomes)
            .filter(|(a, o)| {
                o.is_ok() && matches!(a.body, Body::Inc { target: Target::Buffer(x), .. } if x == b)
            })
            .count();
        let mut out = [0u8; BUF_LEN];
        buffer.read(0, &mut out).expect("a settled buffer reads");
        assert!(
            out.iter().all(|&x| x == incs as u8),
            "buffer {b}: {incs} increments signalled, its bytes are {out:?}"
        );
    }

    // Every handle gone: every capture dropped.
    drop((device, queues, cbs, transients));
    let deadline = Instant::now() + SETTLE;
    while Arc::strong_count(&live) > 1 {
        assert!(
            Instant::now() < deadline,
            "{} captures still alive after every handle was dropped",
            Arc::strong_count(&live) - 1
        );
        std::thread::sleep(Duration::from_millis(1));
    }
}

/// Checks action `i`'s outcome against the model (see the module's doc).
fn check_action(
    i: usize,
    a: &Action,
    actions: &[Action],
    outcomes: &[Result<u64, ErrorKind>],
    gates: &[Result<u64, ErrorKind>],
    dropped_all: bool,
) {
    let seen = outcomes[i];
    let here = || format!("action {i} ({:?}, waits {:?}): {seen:?}", a.body, a.waits);
    let mut allowed: Vec<ErrorKind> = Vec::new();
    for &(src, _) in &a.waits {
        let failed = match src {
            Src::Action(j) => outcomes[j].err(),
            Src::Gate(g) => gates[g].err(),
        };
        if let Some(k) = failed {
            allowed.push(k);
        } else if let (Src::Action(j), Ok(_)) = (src, seen) {
            assert!(
                outcomes[j].is_ok(),
                "{}: signalled after a failed wait",
                here()
            );
        }
    }
    if a.body.fails() {
        allowed.push(ErrorKind::Aborted);
    }
    if dropped_all {
        allowed.push(ErrorKind::Cancelled);
    }
    let ordered = |x: usize, y: usize| actions[y].before & (1 << x) != 0;
    let mut must_fail = a.body.fails();
    if let Some((target, use_)) = a.body.touches() {
        for (j, b) in actions.iter().enumerate() {
            let Some((t, u)) = b.body.touches() else {
                continue;
            };
            if j == i || t != target {
                continue;
            }
            let (before, after) = (ordered(j, i), ordered(i, j));
            let hazard = match (use_, u) {
                (Use::Read, Use::Read) | (Use::Read | Use::Write, Use::Alloca) => {
                    // A use before its alloca ran is refused.
                    u == Use::Alloca && !before
                }
                (Use::Alloca, Use::Read | Use::Write) => false,
                (Use::Alloca, Use::Dealloca) => !after,
                (Use::Dealloca, Use::Alloca) => !before,
                (Use::Read | Use::Write, Use::Dealloca) => {
                    must_fail |= before && outcomes[j].is_ok();
                    !after
                }
                (Use::Dealloca, Use::Dealloca) => {
                    must_fail |= before && outcomes[j].is_ok();
                    true
                }
                _ => !before && !after,
            };
            if hazard {
                allowed.push(ErrorKind::FailedPrecondition);
            }
            if u == Use::Alloca && outcomes[j].is_err() && matches!(use_, Use::Read | Use::Write) {
                // Memory whose alloca failed never becomes usable.
                must_fail = true;
            }
        }
    }
    match seen {
        Ok(v) => {
            assert_eq!(v, a.value, "{}: signalled another value", here());
            assert!(!must_fail, "{}: signalled, but it must fail", here());
        }
        Err(k) => assert!(
            allowed.contains(&k),
            "{}: failed with {k:?}, but may only fail with {allowed:?}",
            here()
        ),
    }
    if let Body::HostCall { fail } = a.body {
        let runs = a.runs.load(Ordering::SeqCst);
        let expect = match seen {
            Ok(_) => 1..=1,
            Err(ErrorKind::Aborted) if fail => 0..=1,
            Err(_) => 0..=0,
        };
        assert!(expect.contains(&runs), "{}: ran {runs} times", here());
    }
}

fuzz_target!(|data: &[u8]| run(data));
