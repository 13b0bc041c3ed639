//! Settling a round: with its device kept until its work is done, or
//! dropped with work pending (by the test thread or by a host call holding
//! the last handles); then waiting until every capture is dropped and every
//! worker thread exited, counted through the threads of the process.

use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

use fenceline::{CommandBuffer, Device, ErrorKind, Queue};

use crate::frames::{settle_frames, Frame, FrameCbs};
use crate::phase;
use crate::plan::RoundKind;
use crate::rng::{pause, Rng, Size, WAIT_LIMIT};
use crate::submit::submit;
use crate::world::{resolve_gate, World};

/// The gates resolved only after the submission.
fn late_gates(world: &World) -> Vec<usize> {
    (0..world.plan.gates.len())
        .filter(|&g| world.plan.gates[g].late)
        .collect()
}

/// A round that keeps its device until its work is done: resolves the
/// late gates, waits until every submitted action and frame signalled or
/// failed, then drops the idle device. On return nothing is pending and
/// the device is gone.
pub(crate) fn settle_then_drop(
    ctx: &str,
    world: &World,
    frames: &[Frame],
    device: Device,
    queues: Vec<Queue>,
) {
    let late = late_gates(world);
    phase("resolving the late gates");
    for &g in &late {
        resolve_gate(world, g);
    }
    phase("settling");
    settle_actions(ctx, world);
    settle_frames(ctx, frames);
    phase("dropping the device");
    drop(queues);
    drop(device);
}

/// A round that drops its device with work pending: the test thread drops
/// its handles, or (`DropInside`) submits the dropper, whose host call takes
/// the last ones, and drops its queues. The late gates resolve after the
/// drop or racing it. On return the test holds no handle of the device and
/// every submitted action signalled or failed (pending ones may fail with
/// `Cancelled`).
pub(crate) fn drop_then_settle(
    ctx: &str,
    rng: &mut Rng,
    size: &Size,
    world: &World,
    shared: &CommandBuffer,
    device: Device,
    queues: Vec<Queue>,
) {
    let max_sleep = size.max_sleep_us;
    let late = late_gates(world);
    // The late gates resolved after the drop, or racing it.
    let racing = rng.percent(50);
    let mut lrng = rng.fork();
    std::thread::scope(|s| {
        if racing {
            let late = &late;
            s.spawn(move || {
                for &g in late {
                    pause(&mut lrng, max_sleep);
                    resolve_gate(world, g);
                }
            });
        }
        if world.plan.kind == RoundKind::DropInside {
            let id = world.plan.dropper.expect("a dropper");
            let q = queues[world.plan.actions[id].queue].clone();
            let handles = Some((device, q));
            submit(world, None, &queues, id, shared, handles, rng);
            pause(rng, max_sleep);
            phase("dropping the queue handles (a host call holds the last)");
            drop(queues);
        } else {
            pause(rng, max_sleep);
            phase("dropping the device with work pending");
            drop(queues);
            drop(device);
        }
        phase("resolving the late gates");
    });
    if !racing {
        for &g in &late {
            resolve_gate(world, g);
        }
    }
    phase("settling");
    settle_actions(ctx, world);
}

/// Waits until every submitted action's semaphores signalled or failed (a
/// hang fails the test).
fn settle_actions(ctx: &str, world: &World) {
    for (a, st) in world.plan.actions.iter().zip(&world.actions) {
        // A parent signals after its call returned (and submitted).
        if !st.submitted.load(Ordering::SeqCst) {
            continue;
        }
        for (k, s) in st.sems.iter().enumerate() {
            let r = s.wait(a.value, WAIT_LIMIT);
            if let Err(e) = r {
                assert_ne!(
                    e.kind(),
                    ErrorKind::DeadlineExceeded,
                    "{ctx}: action {} signal {k} neither signalled nor failed after \
                     {WAIT_LIMIT:?} (hang)\n{:?}",
                    a.id,
                    world.plan
                );
            }
        }
    }
}

/// Drops the round's recordings (the shared one's dispatch holds a
/// capture), then waits until fenceline dropped every capture and every
/// worker thread exited (where threads can be counted): nothing of the
/// round runs any more, so what the checks read is final.
pub(crate) fn wait_for_captures_and_workers(
    ctx: &str,
    world: &World,
    shared: CommandBuffer,
    frame_cbs: FrameCbs,
) {
    drop(shared);
    drop(frame_cbs);
    wait_until(ctx, "every captured value dropped", || {
        world.live.load(Ordering::SeqCst) == 0
    });
    if worker_threads().is_some() {
        wait_until(ctx, "every worker thread exited", || {
            worker_threads() == Some(0)
        });
    }
}

// ---------------------------------------------------------------------------
// Threads of the process
// ---------------------------------------------------------------------------

/// Worker threads of every fenceline executor alive in the process (their
/// names, `fenceline-worker-N`, are cut to 15 bytes by Linux).
#[cfg(all(target_os = "linux", not(miri)))]
fn worker_threads() -> Option<usize> {
    let tasks = std::fs::read_dir("/proc/self/task").ok()?;
    Some(
        tasks
            .flatten()
            .filter(|t| {
                std::fs::read_to_string(t.path().join("comm"))
                    .is_ok_and(|c| c.starts_with("fenceline-work"))
            })
            .count(),
    )
}

#[cfg(not(all(target_os = "linux", not(miri))))]
fn worker_threads() -> Option<usize> {
    None
}

fn wait_until(ctx: &str, what: &str, mut f: impl FnMut() -> bool) {
    let start = Instant::now();
    while !f() {
        assert!(
            start.elapsed() < WAIT_LIMIT,
            "{ctx}: {what}: not after {WAIT_LIMIT:?}"
        );
        std::thread::sleep(Duration::from_millis(1));
    }
}
