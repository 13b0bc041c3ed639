//! A randomized soak of the CPU device through the public API only.
//!
//! Each round draws a plan from a seeded xorshift generator: a CPU device
//! (1 or 2 workers, 1 to 3 queues), a few gate semaphores that the test
//! signals or fails (during submission, or only at the end), and 2 or 3
//! submitting threads, each submitting random actions over the queues:
//! `execute` of freshly recorded command buffers (fill / update / copy /
//! dispatch, with barriers; a stage of dispatches only reads the action's
//! buffers through bindings) and of one command buffer shared by every
//! thread (a bound dispatch reading one buffer from every thread at once),
//! `barrier`, and `host_call`. Beside those, submitters run transient
//! frames: `alloca`, a dispatch writing the memory and one reading it into
//! another buffer (one recording of each, shared by every thread, bound per
//! submission through binding tables), `dealloca`, then an action that
//! uses the memory after its dealloca (it must fail with
//! `FailedPrecondition`, never touch the memory). Every action signals semaphores of
//! its own (1 or 2, at one value of 1 to 3) and waits on gates and on
//! earlier actions' semaphores, so the graph is a DAG and no value is ever
//! signalled twice. Injected into it: tile and host-call errors
//! (`Aborted`), panics (they must become `Internal`), captures whose `Drop`
//! panics, host calls that submit another action through a captured
//! `Queue`, gates the test fails (their kind must reach the dependents),
//! timed waits, and devices dropped with work pending (pending actions must
//! fail with `Cancelled`, issued ones complete), either from the test
//! thread or by a host call holding the last handles.
//!
//! After every action settled, the test checks each one against its plan:
//! its semaphores are either signalled (and then its body ran exactly once:
//! every tile once, its buffers hold exactly what the plan wrote) or failed
//! with a kind it may carry (its own injected fault, one of its failed
//! waits' kinds, or `Cancelled` in a round that dropped the device), and
//! then it ran nothing. Every timed wait's answer must agree with the
//! final states. Every captured value is dropped by the end of the round,
//! the workers exit, and the process's live heap bytes after the last round
//! are within 64 KiB of those after the first.
//!
//! Size: short by default (a few seconds in a debug build), tiny under
//! Miri, and `FENCELINE_SOAK=long` runs rounds for `FENCELINE_SOAK_SECS`
//! seconds (default 120). `FENCELINE_SOAK_SEED=<u64>` picks the seed (it is
//! printed on failure). One test, alone in its binary: the thread and heap
//! counts are the process's.
//!
//! The parts, one module each: `alloc` counts the live heap bytes (the
//! global allocator), `rng` holds the limits, the seeded generator and the
//! soak's size, `faults` the injected errors and panics, the quiet panic
//! hook and the captures that count themselves, `plan` what a round draws
//! (gates, actions, bodies, command buffers, dependencies), `world` the
//! round's live state and its setting up (device, queues, semaphores,
//! buffers, the shared command buffer), `submit` the recording and
//! submitting of actions (host calls, nested submissions, the submitting
//! threads), `frames` the transient alloca frames and their checks,
//! `probes` the timed waits and their checks, `settle` the settling of a
//! round (with its device kept or dropped mid-flight) and the waits for its
//! captures and worker threads, and `checks` the checks of the settled
//! actions against their plan. This file holds the round driver and the
//! test.

mod alloc;
mod checks;
mod faults;
mod frames;
mod plan;
mod probes;
mod rng;
mod settle;
mod submit;
mod world;

use std::panic::resume_unwind;
use std::sync::atomic::Ordering;
use std::sync::{mpsc, Mutex};
use std::time::{Duration, Instant};

use crate::alloc::{live_bytes, LEAK_TOLERANCE};
use crate::checks::{check, Stats};
use crate::faults::{install_quiet_hook, UNEXPECTED_PANICS};
use crate::frames::settle_frames;
use crate::plan::RoundKind;
use crate::rng::{seed, size, splitmix, Rng, Rounds, Size, ROUND_LIMIT};
use crate::settle::{drop_then_settle, settle_then_drop, wait_for_captures_and_workers};
use crate::submit::submit_all;
use crate::world::{set_up, Setup};

/// What the running round is doing, and its plan (reported if it hangs).
static PHASE: Mutex<&str> = Mutex::new("");
static PLAN: Mutex<String> = Mutex::new(String::new());

fn phase(what: &'static str) {
    *PHASE.lock().unwrap_or_else(|p| p.into_inner()) = what;
}

// ---------------------------------------------------------------------------
// A round, phase by phase
// ---------------------------------------------------------------------------

/// One round: its plan drawn from `seed`, run phase by phase, then checked.
/// The phases draw from one generator in this order (each thread from a
/// fork of it), so a seed replays the round's plan and every thread's draws
/// (not how the threads interleave).
fn round(ctx: &str, seed: u64, round_no: usize, size: &Size) -> Stats {
    let mut rng = Rng::new(seed);
    let Setup {
        device,
        queues,
        world,
        shared,
        frame_cbs,
    } = set_up(&mut rng, size, round_no);
    phase("submitting");
    let (probes, frames) = submit_all(
        &mut rng, size, &world, &device, &queues, &shared, &frame_cbs,
    );
    match world.plan.kind {
        RoundKind::Normal => settle_then_drop(ctx, &world, &frames, device, queues),
        _ => drop_then_settle(ctx, &mut rng, size, &world, &shared, device, queues),
    }
    phase("settling the frames");
    settle_frames(ctx, &frames);
    phase("waiting for every capture dropped and every worker exited");
    wait_for_captures_and_workers(ctx, &world, shared, frame_cbs);
    phase("checking");
    let stats = check(ctx, &world, &probes, &frames);
    *PLAN.lock().unwrap_or_else(|p| p.into_inner()) = String::new();
    stats
}

// ---------------------------------------------------------------------------
// The test
// ---------------------------------------------------------------------------

/// Runs `f` on its own thread; a hang past `limit` fails the test.
fn within<T: Send + 'static>(
    what: &str,
    limit: Duration,
    f: impl FnOnce() -> T + Send + 'static,
) -> T {
    let (tx, rx) = mpsc::channel();
    let handle = std::thread::spawn(move || {
        let _ = tx.send(f());
    });
    match rx.recv_timeout(limit) {
        Ok(v) => {
            let _ = handle.join();
            v
        }
        Err(mpsc::RecvTimeoutError::Timeout) => {
            let phase = *PHASE.lock().unwrap_or_else(|p| p.into_inner());
            let plan = PLAN.lock().unwrap_or_else(|p| p.into_inner()).clone();
            panic!("{what}: still running after {limit:?} (hang) while {phase}; plan:\n{plan}")
        }
        Err(mpsc::RecvTimeoutError::Disconnected) => match handle.join() {
            Err(panic) => {
                eprintln!("{what}: failed");
                resume_unwind(panic)
            }
            Ok(()) => panic!("{what}: ended without a result"),
        },
    }
}

#[test]
fn soak() {
    install_quiet_hook();
    let size = size();
    let seed = seed();
    let started = Instant::now();
    let mut baseline: Option<isize> = None;
    let mut round_no = 0;
    let mut stats = Stats::default();
    loop {
        let more = match size.rounds {
            Rounds::Count(n) => round_no < n,
            Rounds::For(d) => round_no < 2 || started.elapsed() < d,
        };
        if !more {
            break;
        }
        let round_seed = splitmix(seed ^ splitmix(round_no as u64));
        let ctx = format!(
            "soak round {round_no} (FENCELINE_SOAK_SEED={seed}, round seed {round_seed:#x})"
        );
        let c = ctx.clone();
        let seen = within(&ctx, ROUND_LIMIT, move || {
            round(&c, round_seed, round_no, &size)
        });
        stats.add(&seen);
        assert_eq!(
            UNEXPECTED_PANICS.load(Ordering::SeqCst),
            0,
            "{ctx}: a thread panicked (see above)"
        );
        if round_no == 0 {
            baseline = Some(live_bytes());
        }
        round_no += 1;
    }
    let baseline = baseline.expect("at least one round");
    // Frames that failed (a failed gate, a dropped device) check little:
    // most must have run to their dealloca.
    assert!(
        stats.frames < 10 || stats.frames_done * 2 > stats.frames,
        "soak (FENCELINE_SOAK_SEED={seed}): only {} of {} transient frames ran to their dealloca",
        stats.frames_done,
        stats.frames
    );
    // A device dropped inside its own work frees its last memory when its
    // detached workers exit; where their exit cannot be observed (Miri has
    // no /proc), give them the round limit to do so.
    let deadline = Instant::now() + ROUND_LIMIT;
    let mut after = live_bytes();
    while after - baseline > LEAK_TOLERANCE && Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(10));
        after = live_bytes();
    }
    assert!(
        after - baseline <= LEAK_TOLERANCE,
        "soak (FENCELINE_SOAK_SEED={seed}): live heap grew from {baseline} bytes after the \
         first round to {after} after round {round_no}"
    );
    if matches!(size.rounds, Rounds::For(_)) || std::env::var_os("FENCELINE_SOAK_VERBOSE").is_some()
    {
        eprintln!(
            "soak: seed {seed}: {round_no} rounds in {:?}; live heap {baseline} -> {after} bytes\n\
             {stats:?}",
            started.elapsed()
        );
    }
}
