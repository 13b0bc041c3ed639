//! Driver calls per execute on the CUDA device (simulated driver only: it
//! counts the calls each thread makes). On the default completion path an
//! execute of one recorded command buffer costs exactly two calls on the
//! issuing thread (`cuGraphLaunch`, `cuEventRecord`) once the device's
//! context is current there; a thread with another context current gets a
//! push and a pop around the issue and keeps its own context.
#![cfg(feature = "cuda")]

use std::time::Duration;

use cudarc::driver::sys;
use fenceline::{CompletionMode, CudaConfig, Device, Semaphore};

#[path = "common/cuda.rs"]
mod cuda;

const T: Duration = Duration::from_secs(10);

/// A device whose one queue runs a recorded kernel launch, and that
/// command buffer (`None`: not on the simulated driver).
fn rig(completion: CompletionMode) -> Option<(Device, fenceline::CommandBuffer)> {
    // Two simulated devices, so that a thread can have a context of its
    // own that is not the device's (read by the simulated `cuInit`, which
    // runs when the first device opens in this process).
    std::env::set_var("FENCELINE_SIM_DEVICES", "2");
    let device = cuda::device_with(CudaConfig {
        completion,
        ..CudaConfig::default()
    })?;
    cuda::thread_driver_calls()?;
    let (_counter, cb) = cuda::counting_launch(&device, [1, 1, 1]);
    Some((device, cb))
}

/// Driver calls this thread makes for `frames` executes (each waiting on
/// the frame before, already reached, and signalling its own), the most
/// any one of them made.
fn calls_per_execute(device: &Device, cb: &fenceline::CommandBuffer, frames: u64) -> u64 {
    let queue = device.queue(0).unwrap();
    let done = Semaphore::new(0);
    let mut most = 0;
    for frame in 1..=frames {
        let before = cuda::thread_driver_calls().unwrap();
        queue
            .execute(&[(&done, frame - 1)], &[(&done, frame)], &[cb])
            .unwrap();
        most = most.max(cuda::thread_driver_calls().unwrap() - before);
        done.wait(frame, T).unwrap();
    }
    most
}

/// Makes the second simulated device's primary context current on this
/// thread for good (a context of the thread's own, not the device's).
fn make_other_context_current() -> sys::CUcontext {
    // SAFETY: driver calls in API order with out-pointers to locals.
    unsafe {
        let mut dev = 0;
        assert_eq!(sys::cuDeviceGet(&mut dev, 1), sys::CUresult::CUDA_SUCCESS);
        let mut ctx = std::ptr::null_mut();
        assert_eq!(
            sys::cuDevicePrimaryCtxRetain(&mut ctx, dev),
            sys::CUresult::CUDA_SUCCESS
        );
        assert_eq!(sys::cuCtxSetCurrent(ctx), sys::CUresult::CUDA_SUCCESS);
        ctx
    }
}

// Mutation checked: `Context::enter` never trusting the thread's current
// context (asking, pushing and popping around every issue): 5 calls.
#[test]
fn an_execute_costs_two_driver_calls_on_the_default_path() {
    assert_eq!(
        CudaConfig::default().completion,
        CompletionMode::EventThread
    );
    let Some((device, cb)) = rig(CompletionMode::default()) else {
        return;
    };
    // Warm up: the first issue on this thread finds out its context.
    calls_per_execute(&device, &cb, 2);
    assert_eq!(calls_per_execute(&device, &cb, 100), 2);
    // Host functions: `cuGraphLaunch`, `cuEventRecord` (the event other
    // queues' device waits use; the default path's one event serves both)
    // and `cuLaunchHostFunc`.
    let (device, cb) = rig(CompletionMode::HostFunction).unwrap();
    calls_per_execute(&device, &cb, 2);
    assert_eq!(calls_per_execute(&device, &cb, 100), 3);
    assert_eq!(cuda::misuse_count(), 0, "{}", cuda::last_misuse());
}

#[test]
fn a_thread_with_another_context_current_keeps_it() {
    let Some((device, cb)) = rig(CompletionMode::default()) else {
        return;
    };
    std::thread::spawn(move || {
        let other = make_other_context_current();
        // Ask, push, launch, record, pop: every time (nothing is cached
        // for a thread whose context is not the device's).
        assert_eq!(calls_per_execute(&device, &cb, 20), 5);
        let mut current = std::ptr::null_mut();
        // SAFETY: out-pointer to a local.
        unsafe { sys::cuCtxGetCurrent(&mut current) };
        assert_eq!(current, other, "the thread's own context is restored");
        // The thread switches to no context behind fenceline's back and
        // says so: fenceline asks again and makes the device's current.
        // SAFETY: a null context is valid (clears the current one).
        unsafe { sys::cuCtxSetCurrent(std::ptr::null_mut()) };
        fenceline::forget_current_cuda_context();
        let queue = device.queue(0).unwrap();
        let s = Semaphore::new(0);
        let before = cuda::thread_driver_calls().unwrap();
        queue.execute(&[], &[(&s, 1)], &[&cb]).unwrap();
        // Ask, set, launch, record.
        assert_eq!(cuda::thread_driver_calls().unwrap() - before, 4);
        s.wait(1, T).unwrap();
        assert_eq!(calls_per_execute(&device, &cb, 20), 2);
    })
    .join()
    .unwrap();
    assert_eq!(cuda::misuse_count(), 0, "{}", cuda::last_misuse());
}

/// Holds the stream until [`OPEN`] (a kernel of the simulated driver).
static OPEN: std::sync::atomic::AtomicBool = std::sync::atomic::AtomicBool::new(false);

extern "C" fn hold(_: *const u32, _: *const u32, _: *const *const std::ffi::c_void) {
    while !OPEN.load(std::sync::atomic::Ordering::SeqCst) {
        std::thread::sleep(Duration::from_millis(1));
    }
}

/// An issue that grows the event pool creates the event inside its own
/// push of the device's context (a nested `enter`); the thread keeps its
/// own context afterwards, and every later issue pushes again. Fails
/// (later executes skip the push: 3 calls, under the thread's own context) with
/// `enter`'s `current == self.raw` branch caching the context while a
/// push is in force, and the push not updating or restoring the cache:
/// the mechanism of a flaky "cuEventCreate: context used after destroy".
#[test]
fn a_thread_with_another_context_current_keeps_it_while_the_event_pool_grows() {
    std::env::set_var("FENCELINE_SIM_DEVICES", "2");
    // A device whose pool starts with 64 events and may grow to 128.
    let Some(device) = cuda::device_with(CudaConfig {
        events: 128,
        ..CudaConfig::default()
    }) else {
        return;
    };
    if cuda::thread_driver_calls().is_none() {
        return;
    }
    assert!(cuda::register_kernel("fenceline_hold", &[], hold));
    let held = {
        let k = device
            .load_kernel(
                ".version 7.0\n.target sm_50\n.address_size 64\n.visible .entry fenceline_hold() { ret; }\n",
                "fenceline_hold",
            )
            .unwrap();
        let mut cb = device.command_buffer().unwrap();
        cb.launch(&k, [1, 1, 1], [1, 1, 1], 0, &[]).unwrap();
        cb.end().unwrap();
        cb
    };
    let (_counter, cb) = cuda::counting_launch(&device, [1, 1, 1]);
    OPEN.store(false, std::sync::atomic::Ordering::SeqCst);
    std::thread::spawn(move || {
        let other = make_other_context_current();
        let queue = device.queue(0).unwrap();
        let done = Semaphore::new(0);
        queue.execute(&[], &[(&done, 1)], &[&held]).unwrap();
        // The stream is held: each execute keeps its event, and the 65th
        // onwards create theirs.
        let created = device.stats().events_created;
        let mut fewest = u64::MAX;
        for frame in 2..=80 {
            let before = cuda::thread_driver_calls().unwrap();
            queue.execute(&[], &[(&done, frame)], &[&cb]).unwrap();
            fewest = fewest.min(cuda::thread_driver_calls().unwrap() - before);
        }
        assert!(device.stats().events_created > created, "the pool grew");
        OPEN.store(true, std::sync::atomic::Ordering::SeqCst);
        done.wait(80, T).unwrap();
        // Ask, push, launch, record, pop: every time.
        assert_eq!(fewest, 5);
        let mut current = std::ptr::null_mut();
        // SAFETY: out-pointer to a local.
        unsafe { sys::cuCtxGetCurrent(&mut current) };
        assert_eq!(current, other, "the thread's own context is restored");
    })
    .join()
    .unwrap();
    assert_eq!(cuda::misuse_count(), 0, "{}", cuda::last_misuse());
}
