//! A sticky CUDA error (a faulting kernel) while work is on the GPU: no
//! action is stranded. With `HostFunction` completion the driver runs no
//! more callbacks, and the completion thread's stream check fails the
//! outstanding actions; with `EventThread` the event wait reports the
//! error. Later submissions fail at once, and dropping the devices does not
//! hang. Simulator only (it injects the fault), in its own binary: the
//! fault lasts for the process.
#![cfg(feature = "cuda")]

use std::ffi::c_void;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use cudarc::driver::sys::CUresult;
use fenceline::{CompletionMode, CudaConfig, Semaphore};

#[path = "common/cuda.rs"]
mod cuda;

static GATE: AtomicBool = AtomicBool::new(false);

extern "C" fn gate_kernel(_: *const u32, _: *const u32, _: *const *const c_void) {
    let start = Instant::now();
    while !GATE.load(Ordering::SeqCst) && start.elapsed() < Duration::from_secs(10) {
        std::thread::sleep(Duration::from_micros(100));
    }
}

const GATE_PTX: &str = "
.version 7.0
.target sm_50
.address_size 64
.visible .entry fenceline_gate() { ret; }
";

#[test]
fn a_sticky_error_fails_outstanding_and_later_work() {
    if !cuda::is_sim() {
        println!("skipped: needs the simulated driver to inject a fault");
        return;
    }
    let modes = [CompletionMode::HostFunction, CompletionMode::EventThread];
    let devices: Vec<_> = modes
        .iter()
        .map(|&completion| {
            cuda::device_with(CudaConfig {
                completion,
                ..Default::default()
            })
            .unwrap()
        })
        .collect();
    assert!(cuda::register_kernel("fenceline_gate", &[], gate_kernel));
    let sems: Vec<_> = devices
        .iter()
        .map(|d| {
            let k = d.load_kernel(GATE_PTX, "fenceline_gate").unwrap();
            let mut cb = d.command_buffer().unwrap();
            cb.launch(&k, [1, 1, 1], [1, 1, 1], 0, &[]).unwrap();
            cb.end().unwrap();
            let (a, b) = (Semaphore::new(0), Semaphore::new(0));
            let q = d.queue(0).unwrap();
            // `a` is blocked on the GPU behind the gate; `b` is queued
            // behind it on the same stream.
            q.execute(&[], &[(&a, 1)], &[&cb]).unwrap();
            q.execute(&[], &[(&b, 1)], &[&cb]).unwrap();
            (a, b, q)
        })
        .collect();
    std::thread::sleep(Duration::from_millis(20));
    assert!(cuda::inject_fault(CUresult::CUDA_ERROR_ILLEGAL_ADDRESS));
    GATE.store(true, Ordering::SeqCst);
    let checks = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| check(&modes, &sems)));
    if let Err(panic) = checks {
        // Stranded work would make dropping the devices wait forever:
        // report the failure instead of hanging.
        std::mem::forget(sems);
        std::mem::forget(devices);
        std::panic::resume_unwind(panic);
    }
    drop(sems);
    drop(devices); // must not hang
}

fn check(modes: &[CompletionMode], sems: &[(Semaphore, Semaphore, fenceline::Queue)]) {
    for (mode, (a, b, q)) in modes.iter().zip(sems) {
        for s in [a, b] {
            let e = s.wait(1, Duration::from_secs(10)).unwrap_err();
            assert!(
                e.message().contains("CUDA_ERROR_ILLEGAL_ADDRESS"),
                "{mode:?}: {e}"
            );
        }
        // Later work fails at once (issuing it fails).
        let c = Semaphore::new(0);
        q.barrier(&[], &[(&c, 1)]).unwrap();
        let e = c.wait(1, Duration::from_secs(10)).unwrap_err();
        assert!(
            e.message().contains("CUDA_ERROR_ILLEGAL_ADDRESS"),
            "{mode:?}: {e}"
        );
    }
}
