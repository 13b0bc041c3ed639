//! The CPU device end to end: every device scenario (`common/scenarios.rs`,
//! shared with the CUDA device) plus what only the CPU device has (dispatch
//! closures that fail per tile).

use std::time::Duration;

use fenceline::{Error, ErrorKind, Semaphore, Tile};

#[cfg(feature = "cuda")]
#[path = "common/cuda.rs"]
mod cuda;
#[path = "common/scenarios.rs"]
mod scenarios;

const LONG: Duration = Duration::from_secs(10);

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
