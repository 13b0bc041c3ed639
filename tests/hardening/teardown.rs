//! The last handle dropped inside the device's own work: each drop returns,
//! and the work it held finishes and signals.

use super::*;

// Mutation caught: `Device` drop waiting for in-flight work to reach zero
// wherever it runs (it then waits for the host call running it: hang).
#[test]
fn a_host_call_holding_the_last_handles_finishes_and_signals() {
    within("host call dropping the last device handle", || {
        let device = cpu(2, 1);
        let queue = device.queue(0).unwrap();
        let done = Semaphore::new(0);
        let q = queue.clone();
        let inner = done.clone();
        // The host call takes the device and a queue handle: once the test
        // drops its own queue handle, they are the last; they drop on the
        // worker when the call's closure is consumed.
        queue
            .host_call(&[], &[(&done, 1)], move || {
                let _keep = (device, q);
                inner.query().map(|_| ())
            })
            .unwrap();
        drop(queue);
        done.wait(1, LIMIT).unwrap();
    });
}

// Mutation caught: as above, from a dispatch closure whose recording holds
// the last queue handle (dropped when the finished action frees its
// payload, on a worker).
#[test]
fn a_dispatch_closure_holding_the_last_queue_handle_finishes() {
    within("dispatch closure dropping the last queue handle", || {
        let device = cpu(2, 1);
        let queue = device.queue(0).unwrap();
        let tiles = Arc::new(AtomicUsize::new(0));
        let freed = Semaphore::new(0);
        let mut cb = device.command_buffer().unwrap();
        // Dropped in order: the queue handle, then the flag.
        let held = (queue.clone(), SignalOnDrop(freed.clone()));
        let t = tiles.clone();
        cb.dispatch([8, 1, 1], move |_: &Tile| {
            let _ = &held;
            t.fetch_add(1, Ordering::Relaxed);
            Ok(())
        })
        .unwrap();
        cb.end().unwrap();
        let done = Semaphore::new(0);
        queue.execute(&[], &[(&done, 1)], &[&cb]).unwrap();
        drop((cb, queue, device));
        done.wait(1, LIMIT).unwrap();
        assert_eq!(tiles.load(Ordering::Relaxed), 8);
        freed
            .wait(1, LIMIT)
            .expect("dropping the last handle returned");
    });
}

// Mutation caught: as above, with the host call submitting the next stage
// through the captured queue (the reason to capture it) before dropping it.
#[test]
fn a_host_call_may_submit_the_next_stage_then_drop_the_last_handle() {
    within("host call chaining through the last handle", || {
        let device = cpu(2, 2);
        let (first, second) = (device.queue(0).unwrap(), device.queue(1).unwrap());
        let (done, freed, ran) = (Semaphore::new(0), Semaphore::new(0), Semaphore::new(0));
        let d = done.clone();
        let held = (second, SignalOnDrop(freed.clone()));
        first
            .host_call(&[], &[(&ran, 1)], move || {
                held.0.host_call(&[], &[(&d, 1)], || Ok(()))?;
                drop(held); // the last handle (the test dropped its own)
                Ok(())
            })
            .unwrap();
        drop(first);
        drop(device);
        done.wait(1, LIMIT).unwrap();
        freed
            .wait(1, LIMIT)
            .expect("dropping the last handle returned");
        ran.wait(1, LIMIT).unwrap();
    });
}

// Mutation caught: `Device` drop waiting for its queues to drain when it
// runs inside one of their issue passes (here: a pending host call holding
// the last handles is failed by a signal on the test thread; the pass that
// fails it drops the captures, and the drop waited for that very pass).
// Found by the soak test.
#[test]
fn a_pending_action_holding_the_last_handles_may_be_failed() {
    within(
        "failing a pending action that holds the last handles",
        || {
            let device = cpu(1, 1);
            let queue = device.queue(0).unwrap();
            let (gate, out, freed) = (Semaphore::new(0), Semaphore::new(0), Semaphore::new(0));
            let held = (device, queue.clone(), SignalOnDrop(freed.clone()));
            queue
                .host_call(&[(&gate, 1)], &[(&out, 1)], move || {
                    let _ = &held;
                    Ok(())
                })
                .unwrap();
            drop(queue);
            gate.fail(Error::new(ErrorKind::Aborted, "the gate failed"));
            freed
                .wait(1, LIMIT)
                .expect("dropping the last handle returned");
            assert_eq!(out.query().unwrap_err().kind(), ErrorKind::Aborted);
        },
    );
}

// Mutation caught: `Executor` drop joining its workers from one of them
// (a task that captured the executor: joining itself).
#[test]
fn an_executor_dropped_from_its_own_task_shuts_down() {
    within("executor dropped inside its own task", || {
        let exec = Arc::new(
            Executor::new(ExecutorConfig {
                workers: 2,
                ..Default::default()
            })
            .unwrap(),
        );
        let scope = Scope::new();
        let ran = Semaphore::new(0);
        let r = ran.clone();
        let mut g = exec.graph(&scope);
        let mine = Some(exec.clone());
        let mut slot = mine;
        g.call(move |_| {
            drop(slot.take());
            r.signal(1)
        })
        .unwrap();
        g.submit();
        drop(exec);
        ran.wait(1, LIMIT).unwrap();
        scope.wait_idle(LIMIT).unwrap();
    });
}
