//! Queue priorities on the CPU device (`Device::cpu_with_priorities`): ready
//! tasks of a higher priority run first, lower ones are not starved, a
//! dispatch yields between tiles, a waiting action runs at its own queue's
//! priority, and teardown finishes queued work of every level.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::mpsc;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use fenceline::{CpuConfig, Device, ErrorKind, Priority, Semaphore};

const LONG: Duration = Duration::from_secs(20);

/// One worker; queue 0 High, 1 Normal, 2 Low.
fn three_levels(workers: usize) -> Device {
    Device::cpu_with_priorities(
        CpuConfig {
            workers,
            queues: 3,
            ..Default::default()
        },
        &[Priority::High, Priority::Normal, Priority::Low],
    )
    .unwrap()
}

/// A host call on queue 1 (Normal) that holds the device's only worker until the
/// returned sender sends (or is dropped), so work queued meanwhile waits
/// ready, all of it at once.
fn hold_the_worker(device: &Device) -> (mpsc::Sender<()>, Semaphore) {
    let (release, gate) = mpsc::channel::<()>();
    let (started_tx, started) = mpsc::channel::<()>();
    let held = Semaphore::new(0);
    device
        .queue(1)
        .unwrap()
        .host_call(&[], &[(&held, 1)], move || {
            started_tx.send(()).unwrap();
            let _ = gate.recv();
            Ok(())
        })
        .unwrap();
    started
        .recv_timeout(LONG)
        .expect("the holding call started");
    (release, held)
}

#[test]
fn queue_priority_reads_the_config() {
    let device = three_levels(1);
    let got: Vec<Priority> = (0..3)
        .map(|i| device.queue(i).unwrap().priority())
        .collect();
    assert_eq!(got, [Priority::High, Priority::Normal, Priority::Low]);
    let plain = Device::cpu_with(CpuConfig {
        queues: 2,
        ..Default::default()
    })
    .unwrap();
    assert_eq!(plain.queue(1).unwrap().priority(), Priority::Normal);
}

#[test]
fn more_priorities_than_queues_is_an_invalid_argument() {
    let err = Device::cpu_with_priorities(
        CpuConfig {
            queues: 1,
            ..Default::default()
        },
        &[Priority::High, Priority::Low],
    )
    .unwrap_err();
    assert_eq!(err.kind(), ErrorKind::InvalidArgument);
    assert!(err.to_string().contains("priorities"), "{err}");
}

/// Ready host calls of all three levels, queued Low first while the only
/// worker is held, run High, then Normal, then Low. Fewer of them than a
/// fairness period, so no fairness turn reorders them. Fails on an
/// executor without levels (mutation checked: `priority::several`
/// returning `false` runs them in arrival order, Low first).
#[test]
fn ready_work_runs_in_priority_order() {
    let device = three_levels(1);
    let order = Arc::new(Mutex::new(Vec::new()));
    let (release, held) = hold_the_worker(&device);
    let each = (Priority::FAIRNESS_PERIOD as usize - 2) / 3;
    for _ in 0..each {
        for (queue, level) in [
            (2, Priority::Low),
            (1, Priority::Normal),
            (0, Priority::High),
        ] {
            let order = order.clone();
            device
                .queue(queue)
                .unwrap()
                .host_call(&[], &[], move || {
                    order.lock().unwrap().push(level);
                    Ok(())
                })
                .unwrap();
        }
    }
    // Every call is issued (ready) before the worker is let go.
    drop(release);
    held.wait(1, LONG).unwrap();
    let deadline = std::time::Instant::now() + LONG;
    while order.lock().unwrap().len() < 3 * each {
        assert!(std::time::Instant::now() < deadline, "the calls ran");
        std::thread::sleep(Duration::from_millis(1));
    }
    let got = order.lock().unwrap().clone();
    let mut want = vec![Priority::High; each];
    want.extend(vec![Priority::Normal; each]);
    want.extend(vec![Priority::Low; each]);
    assert_eq!(got, want);
}

/// Low work completes under a constant High load: 2000 High calls of
/// 20 us each are queued before one Low call, on two workers, so the High
/// level never runs dry until the last of them starts. The Low call must
/// run long before that: within a few fairness periods (see
/// `Priority::FAIRNESS_PERIOD`), not after every High call. Fails without
/// fairness turns (mutation checked: `find_leveled` never taking a
/// fairness turn, and `run_tasks` not yielding to one: the Low call runs
/// after all 2000).
#[test]
fn low_work_is_not_starved_by_a_constant_high_load() {
    const HIGH: usize = 2000;
    let device = Device::cpu_with_priorities(
        CpuConfig {
            workers: 2,
            queues: 2,
            ..Default::default()
        },
        &[Priority::High, Priority::Low],
    )
    .unwrap();
    let high = device.queue(0).unwrap();
    let high_runs = Arc::new(AtomicUsize::new(0));
    let all_high = Semaphore::new(0);
    // Both workers held until every call is queued: the load starts whole.
    let (release, gate) = mpsc::channel::<()>();
    let gate = Arc::new(Mutex::new(gate));
    let holding = Arc::new(AtomicUsize::new(0));
    for _ in 0..2 {
        let (gate, holding) = (gate.clone(), holding.clone());
        high.host_call(&[], &[], move || {
            holding.fetch_add(1, Ordering::AcqRel);
            let _ = gate.lock().unwrap().recv();
            Ok(())
        })
        .unwrap();
    }
    while holding.load(Ordering::Acquire) < 2 {
        std::thread::yield_now();
    }
    for _ in 0..HIGH {
        let (runs, all) = (high_runs.clone(), all_high.clone());
        high.host_call(&[], &[], move || {
            let t = std::time::Instant::now();
            while t.elapsed() < Duration::from_micros(20) {
                std::hint::spin_loop();
            }
            if runs.fetch_add(1, Ordering::AcqRel) + 1 == HIGH {
                all.signal(1)?;
            }
            Ok(())
        })
        .unwrap();
    }
    let low_ran = Semaphore::new(0);
    let runs_at_low = Arc::new(AtomicUsize::new(usize::MAX));
    let (runs, at) = (high_runs.clone(), runs_at_low.clone());
    device
        .queue(1)
        .unwrap()
        .host_call(&[], &[(&low_ran, 1)], move || {
            at.store(runs.load(Ordering::Acquire), Ordering::Relaxed);
            Ok(())
        })
        .unwrap();
    drop(release);
    low_ran.wait(1, LONG).unwrap();
    all_high.wait(1, LONG).unwrap();
    let at = runs_at_low.load(Ordering::Relaxed);
    assert!(
        at < HIGH / 2,
        "the Low call ran after {at} of {HIGH} High calls"
    );
}

/// A Low dispatch of many slow tiles yields to a High host call between
/// two tiles: the call runs long before the dispatch ends (one worker,
/// so without the yield it runs only after every tile). Fails without
/// the yield (mutation checked: `watch` false in `DispatchPayload::run`
/// and the shard's run: the call sees all 64 tiles done).
#[test]
fn a_low_dispatch_yields_to_high_work_between_tiles() {
    let device = three_levels(1);
    let tiles_done = Arc::new(AtomicUsize::new(0));
    let (started_tx, started) = mpsc::channel::<()>();
    let started_tx = Mutex::new(started_tx);
    let mut cb = device.command_buffer().unwrap();
    let count = tiles_done.clone();
    cb.dispatch([64, 1, 1], move |t| {
        if t.workgroup_id[0] == 1 {
            let _ = started_tx.lock().unwrap().send(());
        }
        std::thread::sleep(Duration::from_millis(1));
        count.fetch_add(1, Ordering::AcqRel);
        Ok(())
    })
    .unwrap();
    cb.end().unwrap();
    let batch_done = Semaphore::new(0);
    device
        .queue(2)
        .unwrap()
        .execute(&[], &[(&batch_done, 1)], &[&cb])
        .unwrap();
    started.recv_timeout(LONG).expect("the dispatch started");
    let seen = Arc::new(AtomicUsize::new(usize::MAX));
    let (seen2, count) = (seen.clone(), tiles_done.clone());
    let high_done = Semaphore::new(0);
    device
        .queue(0)
        .unwrap()
        .host_call(&[], &[(&high_done, 1)], move || {
            seen2.store(count.load(Ordering::Acquire), Ordering::Relaxed);
            Ok(())
        })
        .unwrap();
    high_done.wait(1, LONG).unwrap();
    batch_done.wait(1, LONG).unwrap();
    assert_eq!(
        tiles_done.load(Ordering::Acquire),
        64,
        "every tile ran once"
    );
    let seen = seen.load(Ordering::Relaxed);
    assert!(seen < 32, "the High call ran after {seen} of 64 tiles");
}

/// A High action waiting on a Low one runs as soon as the Low one
/// signals, ahead of Normal work that was ready before it: its tasks take
/// its own queue's priority, not that of the completion that issued them.
/// Fails if the backend made every task Low (mutation checked: `level:
/// Priority::Low.level()` in `CpuBackend::new`: the High call runs after
/// the Normal ones).
#[test]
fn a_high_action_waiting_on_a_low_one_runs_once_its_wait_is_met() {
    let device = three_levels(1);
    let order = Arc::new(Mutex::new(Vec::new()));
    let low_done = Semaphore::new(0);
    let high_done = Semaphore::new(0);
    let high_q = device.queue(0).unwrap();
    let normal_q = device.queue(1).unwrap();
    // The High call waits for the Low one.
    let o = order.clone();
    high_q
        .host_call(&[(&low_done, 1)], &[(&high_done, 1)], move || {
            o.lock().unwrap().push("high");
            Ok(())
        })
        .unwrap();
    // The Low call makes Normal work ready while it runs, then signals.
    let o = order.clone();
    device
        .queue(2)
        .unwrap()
        .host_call(&[], &[(&low_done, 1)], move || {
            o.lock().unwrap().push("low");
            for _ in 0..4 {
                let o = o.clone();
                normal_q
                    .host_call(&[], &[], move || {
                        o.lock().unwrap().push("normal");
                        Ok(())
                    })
                    .unwrap();
            }
            Ok(())
        })
        .unwrap();
    high_done.wait(1, LONG).unwrap();
    let deadline = std::time::Instant::now() + LONG;
    while order.lock().unwrap().len() < 6 {
        assert!(std::time::Instant::now() < deadline, "the calls ran");
        std::thread::sleep(Duration::from_millis(1));
    }
    let got = order.lock().unwrap().clone();
    assert_eq!(got, ["low", "high", "normal", "normal", "normal", "normal"]);
}

/// Dropping the device with ready work of every level queued behind a
/// held worker, and work of every level waiting on a semaphore nobody
/// signals: the ready work all runs, the waiting work's signals fail with
/// `Cancelled`, and the drop returns. Fails (the drop never returns) if
/// an idle worker's last look skipped a level (mutation checked: `find`
/// calling `find_normal` alone leaves the Low calls stranded).
#[test]
fn teardown_finishes_queued_work_of_every_level() {
    let device = three_levels(1);
    let ran = Arc::new(AtomicUsize::new(0));
    let (release, _held) = hold_the_worker(&device);
    let never = Semaphore::new(0);
    let cancelled = Semaphore::new(0);
    for queue in 0..3 {
        let q = device.queue(queue).unwrap();
        for _ in 0..5 {
            let ran = ran.clone();
            q.host_call(&[], &[], move || {
                ran.fetch_add(1, Ordering::Relaxed);
                Ok(())
            })
            .unwrap();
        }
        q.host_call(&[(&never, 1)], &[(&cancelled, queue as u64 + 1)], || Ok(()))
            .unwrap();
    }
    let (dropped_tx, dropped) = mpsc::channel();
    std::thread::spawn(move || {
        drop(device);
        dropped_tx.send(()).unwrap();
    });
    // The drop starts with everything still queued (it waits for the held
    // call), then the worker is let go.
    std::thread::sleep(Duration::from_millis(50));
    drop(release);
    dropped
        .recv_timeout(LONG)
        .expect("the device's drop returned");
    assert_eq!(ran.load(Ordering::Relaxed), 15);
    let err = cancelled.wait(1, LONG).unwrap_err();
    assert_eq!(err.kind(), ErrorKind::Cancelled, "{err}");
}
