//! The CPU device end to end: every device scenario (`common/scenarios.rs`,
//! shared with the CUDA device) plus what only the CPU device has (dispatch
//! closures that fail per tile).

use fenceline::{Error, ErrorKind, Semaphore, Tile};

#[cfg(feature = "cuda")]
#[path = "common/cuda.rs"]
mod cuda;
#[path = "common/scenarios.rs"]
mod scenarios;

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
