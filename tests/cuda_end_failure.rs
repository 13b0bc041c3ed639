//! A CUDA command buffer whose `end` fails (the graph cannot be built)
//! stays recording exactly as it was: a pending barrier is kept, and an
//! empty buffer can still record. Simulator only (it injects a sticky
//! fault, which lasts for the process: hence its own binary).
#![cfg(feature = "cuda")]

use cudarc::driver::sys::CUresult;
use fenceline::{CudaConfig, ErrorKind};

#[path = "common/cuda.rs"]
mod cuda;

// Fails if `end` changes the recording before the graph is built
// (mutation checked: marking it ended first makes the `fill` after the
// failed `end` a `FailedPrecondition`), or if the failed `end` loses the
// pending barrier (the `fill` after it would join the first stage:
// "stages: 1").
#[test]
fn a_failed_end_leaves_the_recording_as_it_was() {
    if !cuda::is_sim() {
        println!("skipped: needs the simulated driver to inject a fault");
        return;
    }
    let d = cuda::device_with(CudaConfig::default()).unwrap();
    let buf = d.buffer(64).unwrap();
    let mut trailing = d.command_buffer().unwrap();
    trailing.fill(&buf, 0, 64, &[1]).unwrap();
    trailing.barrier().unwrap();
    assert!(
        format!("{trailing:?}").contains("stages: 1"),
        "{trailing:?}"
    );
    let mut empty = d.command_buffer().unwrap();

    assert!(cuda::inject_fault(CUresult::CUDA_ERROR_LAUNCH_FAILED));
    let e = trailing.end().unwrap_err();
    assert_ne!(e.kind(), ErrorKind::FailedPrecondition, "{e}");
    assert!(
        format!("{trailing:?}").contains("stages: 1"),
        "{trailing:?}"
    );
    assert!(
        format!("{trailing:?}").contains("ended: false"),
        "{trailing:?}"
    );
    assert!(empty.end().is_err());

    // Both still record where they were: after the barrier, a new stage.
    trailing.fill(&buf, 0, 64, &[2]).unwrap();
    assert!(
        format!("{trailing:?}").contains("stages: 2"),
        "{trailing:?}"
    );
    empty.fill(&buf, 0, 64, &[3]).unwrap();
    assert!(format!("{empty:?}").contains("stages: 1"), "{empty:?}");
}
