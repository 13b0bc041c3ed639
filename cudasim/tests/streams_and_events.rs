//! Streams run their work in order on their own thread; events order work
//! across streams for real.

mod common;

use common::*;
use cudarc::driver::sys::cudaError_enum::*;
use cudarc::driver::sys::{CUcontext, CUdeviceptr, CUstream};
use fenceline_cudasim::*;
use std::sync::{mpsc, Arc, Mutex};
use std::thread::sleep;
use std::time::Duration;

/// Pause that lets a broken simulation run ahead before we check it did not.
const SETTLE: Duration = Duration::from_millis(50);

#[test]
fn host_functions_run_in_submission_order() {
    setup();
    let s = new_stream();
    let log = Arc::new(Mutex::new(Vec::new()));
    for i in 0..50 {
        let log = log.clone();
        ok(host_fn(s, move || log.lock().unwrap().push(i)));
    }
    ok(sync_stream(s));
    assert_eq!(*log.lock().unwrap(), (0..50).collect::<Vec<_>>());
    ok(cuStreamDestroy_v2(s));
}

#[test]
fn queued_memory_work_waits_for_earlier_work_and_runs_in_order() {
    setup();
    let s = new_stream();
    let mut d: CUdeviceptr = 0;
    // SAFETY: valid out-pointer.
    ok(unsafe { cuMemAlloc_v2(&mut d, 16) });
    let open = gate(s);
    let mut out = [0u32; 4];
    ok(cuMemsetD32Async(d, 1, 4, s));
    ok(cuMemsetD32Async(d + 4, 2, 2, s));
    // SAFETY: `out` outlives the copy (we synchronize before reading it).
    ok(unsafe { cuMemcpyDtoHAsync_v2(out.as_mut_ptr().cast(), d, 16, s) });
    sleep(SETTLE);
    assert_eq!(cuStreamQuery(s), CUDA_ERROR_NOT_READY);
    // SAFETY: the copy has not run (the stream is gated), so nobody writes `out`.
    assert_eq!(
        unsafe { std::ptr::read_volatile(&out) },
        [0; 4],
        "copy ran before the gate opened"
    );
    drop(open);
    ok(sync_stream(s));
    ok(cuStreamQuery(s));
    assert_eq!(out, [1, 2, 2, 1]);
    ok(cuMemFree_v2(d));
    ok(cuStreamDestroy_v2(s));
}

#[test]
fn waiting_stream_blocks_until_the_other_streams_record_completes() {
    setup();
    let (a, b) = (new_stream(), new_stream());
    let (ev_a, ev_b) = (new_event(), new_event());
    let log = Arc::new(Mutex::new(Vec::new()));
    let (release, wait) = mpsc::channel::<()>();
    let la = log.clone();
    ok(host_fn(a, move || {
        let _ = wait.recv_timeout(TIMEOUT);
        la.lock().unwrap().push("a");
    }));
    ok(cuEventRecord(ev_a, a));
    ok(cuStreamWaitEvent(b, ev_a, 0));
    let lb = log.clone();
    ok(host_fn(b, move || lb.lock().unwrap().push("b")));
    ok(cuEventRecord(ev_b, b));

    sleep(SETTLE);
    assert_eq!(
        cuEventQuery(ev_b),
        CUDA_ERROR_NOT_READY,
        "b ran past its wait on a"
    );
    assert_eq!(cuEventQuery(ev_a), CUDA_ERROR_NOT_READY);
    assert!(log.lock().unwrap().is_empty());

    release.send(()).unwrap();
    ok(sync_event(ev_b));
    ok(cuEventQuery(ev_a));
    ok(cuEventQuery(ev_b));
    assert_eq!(*log.lock().unwrap(), ["a", "b"]);
    for e in [ev_a, ev_b] {
        ok(cuEventDestroy_v2(e));
    }
    for s in [a, b] {
        ok(cuStreamDestroy_v2(s));
    }
}

#[test]
fn event_query_and_synchronize_follow_the_latest_record() {
    setup();
    let s = new_stream();
    let e = new_event();
    ok(cuEventQuery(e)); // never recorded: complete
    let open = gate(s);
    ok(cuEventRecord(e, s));
    assert_eq!(cuEventQuery(e), CUDA_ERROR_NOT_READY);
    drop(open);
    ok(sync_event(e));
    ok(cuEventQuery(e));

    // A new record makes the event pending again.
    let open = gate(s);
    ok(cuEventRecord(e, s));
    assert_eq!(cuEventQuery(e), CUDA_ERROR_NOT_READY);
    drop(open);
    ok(sync_event(e));
    ok(cuEventQuery(e));
    ok(cuEventDestroy_v2(e));
    ok(cuStreamDestroy_v2(s));
}

#[test]
fn stream_wait_captures_the_record_current_at_call_time() {
    setup();
    let (a, b, c) = (new_stream(), new_stream(), new_stream());
    let e = new_event();
    let open_a = gate(a);
    ok(cuEventRecord(e, a));
    ok(cuStreamWaitEvent(b, e, 0));
    let _closed_c = gate(c); // held shut for the rest of the test
    ok(cuEventRecord(e, c)); // a later record: b must not wait for it
    drop(open_a);
    ok(sync_stream(b));
    assert_eq!(
        cuEventQuery(e),
        CUDA_ERROR_NOT_READY,
        "latest record is on the gated stream"
    );
    ok(cuEventDestroy_v2(e));
    for s in [a, b, c] {
        ok(cuStreamDestroy_v2(s));
    }
}

#[test]
fn destroyed_stream_still_finishes_its_queued_work() {
    setup();
    let s = new_stream();
    let open = gate(s);
    let (done_tx, done) = mpsc::channel();
    ok(host_fn(s, move || {
        let _ = done_tx.send(7);
    }));
    ok(cuStreamDestroy_v2(s)); // returns at once although the stream is gated
    drop(open);
    assert_eq!(done.recv_timeout(TIMEOUT), Ok(7));
}

#[test]
fn null_stream_is_an_in_order_stream() {
    setup();
    let null: CUstream = std::ptr::null_mut();
    let log = Arc::new(Mutex::new(Vec::new()));
    for i in 0..5 {
        let log = log.clone();
        ok(host_fn(null, move || log.lock().unwrap().push(i)));
    }
    ok(sync_stream(null));
    assert_eq!(*log.lock().unwrap(), [0, 1, 2, 3, 4]);
}

#[test]
fn creating_work_needs_a_current_context_per_thread() {
    setup();
    let created = within("thread without context", || {
        let mut s: CUstream = std::ptr::null_mut();
        // SAFETY: valid out-pointer.
        unsafe { cuStreamCreate(&mut s, 0) }
    });
    assert_eq!(created, CUDA_ERROR_INVALID_CONTEXT);

    let mut ctx: CUcontext = std::ptr::null_mut();
    // SAFETY: valid out-pointer.
    ok(unsafe { cuCtxGetCurrent(&mut ctx) });
    assert!(!ctx.is_null());
    let ctx_id = ctx as usize;
    let pushed = within("thread with pushed context", move || {
        let mut s: CUstream = std::ptr::null_mut();
        let mut popped: CUcontext = std::ptr::null_mut();
        ok(cuCtxPushCurrent_v2(ctx_id as CUcontext));
        // SAFETY: valid out-pointers.
        let r = unsafe { cuStreamCreate(&mut s, 0) };
        ok(cuStreamDestroy_v2(s));
        // SAFETY: valid out-pointer.
        ok(unsafe { cuCtxPopCurrent_v2(&mut popped) });
        // SAFETY: valid out-pointer.
        let after = unsafe { cuCtxPopCurrent_v2(&mut popped) };
        (r, popped as usize, after)
    });
    assert_eq!(pushed, (CUDA_SUCCESS, ctx_id, CUDA_ERROR_INVALID_CONTEXT));
}

/// The priority a stream reports (`cuStreamGetPriority`).
fn priority_of(s: CUstream) -> i32 {
    let mut p = i32::MIN;
    // SAFETY: valid out-pointer.
    ok(unsafe { cuStreamGetPriority(s, &mut p) });
    p
}

// Fails if a stream's priority is not recorded or not clamped as the real
// driver clamps it (checked: dropping the clamp in
// cuStreamCreateWithPriority reads -100 back as -100).
#[test]
fn stream_priorities_are_clamped_to_the_range_and_read_back() {
    setup();
    let (mut least, mut greatest) = (i32::MIN, i32::MIN);
    // SAFETY: valid out-pointers.
    ok(unsafe { cuCtxGetStreamPriorityRange(&mut least, &mut greatest) });
    assert_eq!((least, greatest), (0, -5));
    // Either pointer may be null, as on the real driver.
    let mut only_greatest = 1;
    // SAFETY: null, and a valid out-pointer.
    ok(unsafe { cuCtxGetStreamPriorityRange(std::ptr::null_mut(), &mut only_greatest) });
    assert_eq!(only_greatest, -5);

    let asked_and_got = [(-5, -5), (0, 0), (-2, -2), (-100, -5), (7, 0)];
    let streams: Vec<CUstream> = asked_and_got
        .iter()
        .map(|&(asked, _)| {
            let mut s: CUstream = std::ptr::null_mut();
            // SAFETY: valid out-pointer.
            ok(unsafe { cuStreamCreateWithPriority(&mut s, 0, asked) });
            s
        })
        .collect();
    let got: Vec<i32> = streams.iter().map(|&s| priority_of(s)).collect();
    let want: Vec<i32> = asked_and_got.iter().map(|&(_, got)| got).collect();
    assert_eq!(got, want);

    // The default priority: a plain stream's and the null stream's.
    let plain = new_stream();
    assert_eq!(priority_of(plain), 0);
    assert_eq!(priority_of(std::ptr::null_mut()), 0);

    // A stream of any priority still runs its work.
    let ran = Arc::new(Mutex::new(false));
    let r = ran.clone();
    ok(host_fn(streams[0], move || *r.lock().unwrap() = true));
    ok(sync_stream(streams[0]));
    assert!(*ran.lock().unwrap());

    for s in streams.into_iter().chain([plain]) {
        ok(cuStreamDestroy_v2(s));
    }
    let mut p = 0;
    // SAFETY: valid out-pointer.
    assert_eq!(
        unsafe { cuStreamGetPriority(plain, &mut p) },
        CUDA_ERROR_INVALID_HANDLE
    );
}

// Fails if the range is answered without a context, as the real driver
// does not (checked: dropping `require_context` there makes it succeed).
#[test]
fn stream_priority_range_needs_a_current_context() {
    setup();
    let r = within("thread without context", || {
        let (mut least, mut greatest) = (0, 0);
        // SAFETY: valid out-pointers.
        unsafe { cuCtxGetStreamPriorityRange(&mut least, &mut greatest) }
    });
    assert_eq!(r, CUDA_ERROR_INVALID_CONTEXT);
}
