//! The CPU device end to end: every device scenario (`common/scenarios.rs`,
//! shared with the CUDA device) plus what only the CPU device has (dispatch
//! closures that fail per tile).

use fenceline::{Error, ErrorKind, Semaphore, Tile};

#[cfg(feature = "cuda")]
#[path = "common/cuda.rs"]
mod cuda;
#[path = "common/scenarios.rs"]
mod scenarios;
#[cfg(feature = "vulkan")]
#[path = "common/vulkan.rs"]
mod vulkan;

use scenarios::LONG;

all_scenarios!(Some(scenarios::Rig::cpu()));

fn device(queues: usize) -> fenceline::Device {
    scenarios::Rig::cpu().device(queues)
}

#[test]
fn a_failing_tile_fails_the_signals() {
    let d = device(1);
    let out = Semaphore::new(0);
    let mut cb = d.command_buffer().unwrap();
    cb.dispatch([4, 4, 1], |t: &Tile| {
        if t.workgroup_id == [2, 3, 0] {
            Err(Error::new(ErrorKind::Internal, "tile 2,3"))
        } else {
            Ok(())
        }
    })
    .unwrap();
    cb.end().unwrap();
    d.queue(0)
        .unwrap()
        .execute(&[], &[(&out, 1)], &[&cb])
        .unwrap();
    assert_eq!(out.wait(1, LONG).unwrap_err().message(), "tile 2,3");
    // The device keeps working, and the same command buffer's next run
    // reports the failure again (scopes are reset between submissions).
    let ok = Semaphore::new(0);
    d.queue(0).unwrap().barrier(&[], &[(&ok, 1)]).unwrap();
    ok.wait(1, LONG).unwrap();
}

/// The queue ordering contract, on the CPU device: a queue orders nothing
/// by itself, only semaphores do, and the CPU device does run two actions
/// of one queue at once when both are ready: the first blocks until the
/// second, submitted after it on the same queue, has run. (A CUDA queue
/// runs them in stream order, one allowed schedule of the same contract;
/// ordering through semaphores is checked on both devices in
/// `common/scenarios.rs`.)
#[test]
fn one_queue_runs_two_ready_actions_concurrently_on_the_cpu() {
    let d = device(1);
    let q = d.queue(0).unwrap();
    let (gate, done) = (Semaphore::new(0), Semaphore::new(0));
    let g = gate.clone();
    // Submitted first; waits (inside its host call) for the second.
    q.host_call(&[], &[(&done, 1)], move || g.wait(1, LONG))
        .unwrap();
    let g = gate.clone();
    q.host_call(&[], &[], move || g.signal(1)).unwrap();
    done.wait(1, LONG).unwrap();
    assert_eq!(gate.query().unwrap(), 1);
}

// `execute` returns in the time of a submission: it never runs a tile or a
// host call on the calling thread (which may be a real-time thread), not
// even with one worker busy elsewhere, a 1-tile dispatch (run in place by
// its task, on a worker) or a chain that a signal from this thread
// readies. Mutation checked: `CpuBackend::issue_host_call` calling the
// host function in place (on the issuing thread) fails it.
#[test]
fn execute_never_runs_user_work_on_the_calling_thread() {
    use std::sync::{Arc, Mutex};
    use std::thread::ThreadId;
    let d = device(1);
    let q = d.queue(0).unwrap();
    let me = std::thread::current().id();
    let seen: Arc<Mutex<Vec<ThreadId>>> = Arc::default();
    let (gate, out) = (Semaphore::new(0), Semaphore::new(0));
    for grid in [[1, 1, 1], [64, 1, 1]] {
        let mut cb = d.command_buffer().unwrap();
        let s = seen.clone();
        cb.dispatch(grid, move |_: &Tile| {
            s.lock().unwrap().push(std::thread::current().id());
            Ok(())
        })
        .unwrap();
        cb.end().unwrap();
        let v = out.query().unwrap();
        // Ready at once, and readied later by this thread's own signal.
        q.execute(&[], &[(&out, v + 1)], &[&cb]).unwrap();
        let g = gate.query().unwrap() + 1;
        // (After the first too: a queue orders nothing by itself.)
        q.execute(&[(&gate, g), (&out, v + 1)], &[(&out, v + 2)], &[&cb])
            .unwrap();
        gate.signal(g).unwrap();
        out.wait(v + 2, LONG).unwrap();
        // A host call ready at once.
        let s = seen.clone();
        q.host_call(&[], &[(&out, v + 3)], move || {
            s.lock().unwrap().push(std::thread::current().id());
            Ok(())
        })
        .unwrap();
        out.wait(v + 3, LONG).unwrap();
    }
    let seen = seen.lock().unwrap();
    // Per grid: two executes of its tiles and one host call.
    assert_eq!(seen.len(), (2 + 1) + (2 * 64 + 1));
    assert!(
        seen.iter().all(|t| *t != me),
        "user work ran on the thread that called execute"
    );
}

/// An execute of one command that runs whole on one worker (a dispatch of
/// at most one tile, a fill, an update, a copy) is one task that runs the
/// command and then completes (`CpuBackend::issue_execute`, `alone`). It
/// reports as the command's own task would: the tile's error, a panic as
/// `Internal`, no call for an empty grid; and a one-command execute of
/// more tiles, or of two commands, still runs all of them. Mutations
/// checked: the one task completing with the scope's result instead of
/// the command's fails the error case; `run_alone` not running the
/// dispatch's tile fails the one-tile case.
#[test]
fn a_one_command_execute_reports_as_its_task_would() {
    use std::sync::atomic::{AtomicU32, Ordering};
    use std::sync::Arc;
    let d = device(1);
    let q = d.queue(0).unwrap();
    let run = |cb: &fenceline::CommandBuffer| {
        let s = Semaphore::new(0);
        q.execute(&[], &[(&s, 1)], &[cb]).unwrap();
        s.wait(1, LONG)
    };
    let dispatch = |grid: [u32; 3], f: fn(&Tile) -> Result<(), Error>| {
        let calls = Arc::new(AtomicU32::new(0));
        let c = calls.clone();
        let mut cb = d.command_buffer().unwrap();
        cb.dispatch(grid, move |t: &Tile| {
            c.fetch_add(1, Ordering::Relaxed);
            assert_eq!(t.workgroup_count, grid);
            f(t)
        })
        .unwrap();
        cb.end().unwrap();
        (
            run(&cb).map_err(|e| (e.kind(), e.message().to_string())),
            calls.load(Ordering::Relaxed),
        )
    };
    // One tile: tile [0, 0, 0] of its grid, once.
    let (r, calls) = dispatch([1, 1, 1], |t| {
        assert_eq!(t.workgroup_id, [0, 0, 0]);
        Ok(())
    });
    assert_eq!((r, calls), (Ok(()), 1));
    // Its error fails the signal.
    let (r, calls) = dispatch([1, 1, 1], |_| {
        Err(Error::new(ErrorKind::OutOfRange, "the one tile"))
    });
    assert_eq!(
        (r, calls),
        (Err((ErrorKind::OutOfRange, "the one tile".to_string())), 1)
    );
    // A panic becomes `Internal`, with its message.
    let (r, calls) = dispatch([1, 1, 1], |_| panic!("the one tile panics"));
    let (kind, message) = r.unwrap_err();
    assert_eq!((kind, calls), (ErrorKind::Internal, 1));
    assert!(message.contains("the one tile panics"), "{message}");
    // No tile: no call, and success.
    assert_eq!(dispatch([0, 1, 1], |_| Ok(())), (Ok(()), 0));
    // Two tiles, one command: both run (split across the workers).
    assert_eq!(dispatch([2, 1, 1], |_| Ok(())), (Ok(()), 2));
    // One fill alone, then an update alone, then a copy alone.
    let (a, b) = (d.buffer(8).unwrap(), d.buffer(8).unwrap());
    let mut cb = d.command_buffer().unwrap();
    cb.fill(&a, 0, 8, &[7]).unwrap();
    cb.end().unwrap();
    run(&cb).unwrap();
    let mut cb = d.command_buffer().unwrap();
    cb.update(&[1, 2], &a, 3).unwrap();
    cb.end().unwrap();
    run(&cb).unwrap();
    let mut cb = d.command_buffer().unwrap();
    cb.copy(&a, 0, &b, 0, 8).unwrap();
    cb.end().unwrap();
    run(&cb).unwrap();
    let mut got = [0u8; 8];
    b.read(0, &mut got).unwrap();
    assert_eq!(got, [7, 7, 7, 1, 2, 7, 7, 7]);
    // Two one-tile commands in one stage: both run.
    let calls = Arc::new(AtomicU32::new(0));
    let mut cb = d.command_buffer().unwrap();
    for _ in 0..2 {
        let c = calls.clone();
        cb.dispatch([1, 1, 1], move |_: &Tile| {
            c.fetch_add(1, Ordering::Relaxed);
            Ok(())
        })
        .unwrap();
    }
    cb.end().unwrap();
    run(&cb).unwrap();
    assert_eq!(calls.load(Ordering::Relaxed), 2);
}

/// Two threads stream chained executes into one queue while workers
/// complete them: a thread holding the queue's issuer turn that keeps
/// finding requests (the other thread's submissions, the workers'
/// wake-ups) hands the turn to a worker instead of serving them on
/// (`Backend::hand_off_turn`), and nothing is lost: every execute runs
/// once, in order per thread. Mutation checked: `CpuBackend::wants_turn`
/// answering `false` (the default) leaves `issuer_hand_offs` at 0.
#[test]
fn submitters_hand_the_issuer_turn_to_a_worker_and_lose_nothing() {
    use std::sync::atomic::{AtomicU64, Ordering};
    use std::sync::Arc;
    const N: u64 = 20_000;
    let d = device(1);
    let q = d.queue(0).unwrap();
    let mut handed_off = 0;
    for round in 0..20 {
        let ran: Arc<[AtomicU64; 2]> = Arc::new([AtomicU64::new(0), AtomicU64::new(0)]);
        let sems = [Semaphore::new(0), Semaphore::new(0)];
        std::thread::scope(|sc| {
            for t in 0..2 {
                let (q, d, s, ran) = (&q, &d, &sems[t], ran.clone());
                sc.spawn(move || {
                    let mut cb = d.command_buffer().unwrap();
                    let mine = s.clone();
                    cb.dispatch([1, 1, 1], move |_: &Tile| {
                        // In order: execute `i` runs once `i - 1` signalled,
                        // before its own signal.
                        let before = ran[t].fetch_add(1, Ordering::Relaxed);
                        assert_eq!(mine.query().unwrap(), before);
                        Ok(())
                    })
                    .unwrap();
                    cb.end().unwrap();
                    for i in 1..=N {
                        q.execute(&[(s, i - 1)], &[(s, i)], &[&cb]).unwrap();
                    }
                    s.wait(N, LONG).unwrap();
                });
            }
        });
        for (t, s) in sems.iter().enumerate() {
            assert_eq!(s.query().unwrap(), N);
            assert_eq!(ran[t].load(Ordering::Relaxed), N);
        }
        let stats = d.stats();
        assert_eq!(stats.completed, 2 * N * (round + 1));
        assert_eq!(stats.in_flight, 0);
        handed_off = stats.issuer_hand_offs;
        if handed_off > 0 {
            break;
        }
    }
    assert!(
        handed_off > 0,
        "no turn was handed to a worker in 20 rounds"
    );
}

/// The only worker blocked in user code until its release, while two
/// threads stream barriers (each completes inside its issue) into a queue:
/// every barrier is issued without the worker. A thread serving the turn
/// keeps it while every worker runs a task (`wants_turn`, and the offer
/// itself, read the workers' `running` flags): handed to a worker that is
/// blocked, the turn, and with it every barrier submitted meanwhile,
/// would wait for the release, and a worker waiting for such a barrier
/// would wait for good. Mutation checked: a worker's `running` flag never
/// set (the barriers stop short of `N` until the release): 20 runs of 20
/// failed with `N` 50,000 (3 of 20 with 5,000: the threads overlapped
/// too little to hand the turn off). The race of an offer with a worker
/// leaving idle is the loom model
/// `an_offered_turn_runs_before_a_task_that_may_block_on_it`'s.
#[test]
fn a_turn_is_not_handed_to_a_worker_blocked_in_user_code() {
    const N: u64 = 50_000;
    let d = fenceline::Device::cpu_with(fenceline::CpuConfig {
        workers: 1,
        queues: 1,
        ..Default::default()
    })
    .unwrap();
    let q = d.queue(0).unwrap();
    let (started, release, done) = (Semaphore::new(0), Semaphore::new(0), Semaphore::new(0));
    let mut cb = d.command_buffer().unwrap();
    let (s, r) = (started.clone(), release.clone());
    cb.dispatch([1, 1, 1], move |_: &Tile| {
        s.signal(1).unwrap();
        r.wait(1, LONG).unwrap();
        Ok(())
    })
    .unwrap();
    cb.end().unwrap();
    q.execute(&[], &[(&done, 1)], &[&cb]).unwrap();
    started.wait(1, LONG).unwrap();
    let sems = [Semaphore::new(0), Semaphore::new(0)];
    std::thread::scope(|sc| {
        for s in &sems {
            let q = &q;
            sc.spawn(move || {
                for i in 1..=N {
                    q.barrier(&[], &[(s, i)]).unwrap();
                }
            });
        }
    });
    // Short of the worker's wait: the release below comes either way.
    let issued = sems
        .iter()
        .all(|s| s.wait(N, std::time::Duration::from_secs(3)).is_ok());
    let reached = [sems[0].query(), sems[1].query()];
    release.signal(1).unwrap();
    done.wait(1, LONG).unwrap();
    assert!(
        issued,
        "barriers issued while the worker was blocked: {reached:?} of {N} each"
    );
    for s in &sems {
        s.wait(N, LONG).unwrap();
    }
}

/// A device dropped just after two threads streamed executes into one of
/// its queues, while a turn handed to a worker may still be queued or
/// draining: the drop waits for that drain (the turn holds the queue), and
/// every execute either ran or was cancelled. Mutation checked: the
/// worker's task forgetting the turn instead of running it (the queue
/// never drains; the drop hangs and the watchdog fails the test).
#[test]
fn dropping_the_device_while_a_turn_is_handed_off_strands_nothing() {
    use std::sync::mpsc;
    const N: u64 = 2_000;
    for _ in 0..30 {
        let d = device(1);
        let sems = [Semaphore::new(0), Semaphore::new(0)];
        std::thread::scope(|sc| {
            for s in &sems {
                let d = &d;
                sc.spawn(move || {
                    let q = d.queue(0).unwrap();
                    let mut cb = d.command_buffer().unwrap();
                    cb.dispatch([1, 1, 1], |_: &Tile| Ok(())).unwrap();
                    cb.end().unwrap();
                    for i in 1..=N {
                        q.execute(&[(s, i - 1)], &[(s, i)], &[&cb]).unwrap();
                    }
                });
            }
        });
        let (tx, rx) = mpsc::channel();
        std::thread::spawn(move || {
            drop(d);
            let _ = tx.send(());
        });
        rx.recv_timeout(LONG)
            .expect("the device's drop hung on a handed-off turn");
        for s in &sems {
            match s.query() {
                Ok(v) => assert_eq!(v, N),
                Err(e) => assert_eq!(e.kind(), ErrorKind::Cancelled),
            }
        }
    }
}
