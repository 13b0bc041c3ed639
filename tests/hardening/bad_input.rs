//! Bad input: a clear error, nothing changed.

use super::*;

// Mutation caught: the tile count computed with a wrapping product (a
// `[u32::MAX; 3]` grid then runs the wrong number of tiles in release).
#[test]
fn a_grid_whose_tile_count_overflows_is_rejected_at_record_time() {
    let device = cpu(1, 1);
    let mut cb = device.command_buffer().unwrap();
    let e = cb.dispatch([u32::MAX; 3], |_: &Tile| Ok(())).unwrap_err();
    assert_eq!(e.kind(), ErrorKind::InvalidArgument, "{e}");
    // Nothing was recorded: the buffer ends empty and runs nothing.
    cb.dispatch([u32::MAX, u32::MAX, 1], |_: &Tile| Ok(()))
        .expect("2^64 - 2^33 + 1 tiles still count in u64");
    let exec = Executor::new(ExecutorConfig {
        workers: 1,
        ..Default::default()
    })
    .unwrap();
    let scope = Scope::new();
    let mut g = exec.graph(&scope);
    let e = g.dispatch([u32::MAX; 3], |_: &Tile| Ok(())).unwrap_err();
    assert_eq!(e.kind(), ErrorKind::InvalidArgument, "{e}");
    assert!(
        format!("{g:?}").contains("tasks: 0"),
        "no task added: {g:?}"
    );
}

// Mutation caught: submitting `u64::MAX` (the failure value) as a wait or
// signal value (the wait can never be met; the signal fails the semaphore
// at completion).
#[test]
fn the_reserved_value_is_rejected_at_submit_and_nothing_changes() {
    let device = cpu(1, 1);
    let q = device.queue(0).unwrap();
    let (s, t) = (Semaphore::new(0), Semaphore::new(0));
    let e = q.barrier(&[], &[(&s, u64::MAX)]).unwrap_err();
    assert_eq!(e.kind(), ErrorKind::InvalidArgument, "{e}");
    let e = q
        .host_call(&[(&s, u64::MAX)], &[(&t, 1)], || Ok(()))
        .unwrap_err();
    assert_eq!(e.kind(), ErrorKind::InvalidArgument, "{e}");
    let mut cb = device.command_buffer().unwrap();
    cb.end().unwrap();
    let e = q
        .execute(&[], &[(&t, 1), (&s, u64::MAX)], &[&cb])
        .unwrap_err();
    assert_eq!(e.kind(), ErrorKind::InvalidArgument, "{e}");
    // Every semaphore untouched, and the queue still works.
    q.barrier(&[], &[(&s, 1), (&t, 1)]).unwrap();
    s.wait(1, LIMIT).unwrap();
    t.wait(1, LIMIT).unwrap();
    assert_eq!(
        s.wait(2, Timeout::Immediate).unwrap_err().kind(),
        ErrorKind::DeadlineExceeded
    );
}
