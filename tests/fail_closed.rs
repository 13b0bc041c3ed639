//! An execute whose finish cannot be joined to its last stage is dropped,
//! never run: its tiles do not run, its holds go back, its signals fail.
//! No input reaches that path (the crate builds the graph itself); a
//! fault the tests inject (`fenceline::testing::fail_next_execute_join`,
//! feature `testing`) takes it. One test in its own binary: the fault is
//! process-wide.
//!
//! Today's behaviour before (fails): the join's error was recorded in the
//! scope and the graph submitted anyway, so the tiles ran while the finish
//! (which does not wait for them) gave the holds and the recording back
//! and signalled.

use fenceline::testing::BufferInternals;
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::Arc;
use std::time::Duration;

use fenceline::{Binding, CpuConfig, Device, ErrorKind, Semaphore, Tile, TileIo};

#[test]
fn an_execute_whose_finish_cannot_join_is_dropped_not_run() {
    let d = Device::cpu_with(CpuConfig {
        workers: 2,
        queues: 1,
        ..Default::default()
    })
    .unwrap();
    let q = d.queue(0).unwrap();
    let buf = d.buffer(256).unwrap();
    let runs = Arc::new(AtomicU32::new(0));
    let mut cb = d.command_buffer().unwrap();
    // Two stages (a barrier between): the finish joins the last one.
    cb.fill(&buf, 0, 256, &[1]).unwrap();
    cb.barrier().unwrap();
    let r = runs.clone();
    cb.dispatch_with(
        [4, 1, 1],
        &[Binding::write_chunks(&buf, 64)],
        move |_: &Tile, io: &TileIo<'_>| {
            r.fetch_add(1, Ordering::SeqCst);
            io.chunk::<u8>(0)?.fill(2);
            Ok(())
        },
    )
    .unwrap();
    cb.end().unwrap();
    let s = Semaphore::new(0);
    fenceline::testing::fail_next_execute_join();
    q.execute(&[], &[(&s, 1)], &[&cb]).unwrap();
    let e = s.wait(1, Duration::from_secs(10)).unwrap_err();
    assert_eq!(e.kind(), ErrorKind::Internal, "{e}");
    // Give any stray task time to show itself.
    std::thread::sleep(Duration::from_millis(50));
    assert_eq!(runs.load(Ordering::SeqCst), 0, "no tile ran");
    assert!(!buf.is_held(), "the holds went back");
    let mut out = [9u8; 256];
    buf.read(0, &mut out).unwrap();
    assert_eq!(out, [0; 256], "nothing ran");
    // The queue goes on: the same command buffer runs next time.
    let t = Semaphore::new(0);
    q.execute(&[], &[(&t, 1)], &[&cb]).unwrap();
    t.wait(1, Duration::from_secs(10)).unwrap();
    assert_eq!(runs.load(Ordering::SeqCst), 4);
}
