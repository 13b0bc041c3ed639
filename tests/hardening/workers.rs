//! Every queued task stays reachable, scopes go idle on time, timers
//! fire.

use super::*;

// Mutation caught: a worker moving the whole injector into a private list
// and exposing only part of it to thieves (the rest is stranded while the
// worker blocks in a call waiting on a fence behind them).
#[test]
fn a_blocked_worker_strands_no_queued_task() {
    within("call waiting on a fence behind 40 nops", || {
        let exec = Executor::new(ExecutorConfig {
            workers: 2,
            spin: false,
        })
        .unwrap();
        let scope = Scope::new();
        let fence = Semaphore::new(0);
        let mut g = exec.graph(&scope);
        let f = fence.clone();
        let (tx, rx) = mpsc::channel();
        g.call(move |_| {
            let _ = tx.send(f.wait(1, Duration::from_secs(5)));
            Ok(())
        })
        .unwrap();
        let first = g.nop().unwrap();
        for _ in 1..40 {
            g.nop().unwrap();
        }
        let signal = g.fence(Some((&fence, 1))).unwrap();
        g.join_from(first, signal).unwrap();
        g.submit();
        let waited = rx.recv_timeout(LIMIT).unwrap();
        waited.expect("the fence behind the nops was reached");
        scope.wait_idle(LIMIT).unwrap();
    });
}

// Mutation caught: a worker publishing a scope's retirements only at its
// next idle or scope change at retire (the scope stays busy while the
// worker runs a long task of another scope).
#[test]
fn a_scope_is_idle_when_its_last_task_retires() {
    within(
        "scope idle while the worker runs another scope's task",
        || {
            let exec = Arc::new(
                Executor::new(ExecutorConfig {
                    workers: 1,
                    spin: false,
                })
                .unwrap(),
            );
            let (first, second) = (Scope::new(), Scope::new());
            let release = Semaphore::new(0);
            let mut g = exec.graph(&first);
            let (e, s2, r) = (exec.clone(), second.clone(), release.clone());
            // The one worker runs this task, which queues a long task of
            // another scope, then retires: the worker goes straight on to it.
            let mut long = Some(move || r.wait(1, LIMIT));
            g.call(move |_| {
                let mut g2 = e.graph(&s2);
                if let Some(f) = long.take() {
                    g2.call(move |_| f())?;
                }
                g2.submit();
                Ok(())
            })
            .unwrap();
            g.submit();
            let idle = first.wait_idle(Duration::from_secs(3));
            release.signal(1).unwrap();
            idle.expect("the first scope went idle while the other task ran");
            second.wait_idle(LIMIT).unwrap();
        },
    );
}

// Mutation caught: a timed wait's deadline armed only by the worker that
// parks after suspending it (a worker parked earlier keeps sleeping with no
// timer while the suspending worker runs a long task).
#[test]
fn a_timed_wait_fires_while_another_worker_idles() {
    within("timed wait with the other worker parked", || {
        let exec = Executor::new(ExecutorConfig {
            workers: 2,
            spin: false,
        })
        .unwrap();
        // Let both workers park with no timer.
        std::thread::sleep(Duration::from_millis(100));
        let scope = Scope::new();
        let (never, release) = (Semaphore::new(0), Semaphore::new(0));
        let (tx, rx) = mpsc::channel();
        let mut g = exec.graph(&scope);
        // Ready together: one worker takes both, suspends the wait, then
        // runs the long call; the other stays parked.
        let w = g.wait(&never, 1, Duration::from_millis(100)).unwrap();
        let report = g
            .finally(move |r| {
                let _ = tx.send(r);
            })
            .unwrap();
        g.set_completion(w, report).unwrap();
        let r = release.clone();
        g.call(move |_| r.wait(1, LIMIT)).unwrap();
        g.submit();
        let got = rx.recv_timeout(Duration::from_secs(3));
        release.signal(1).unwrap();
        let e = got
            .expect("the wait timed out while the other worker was idle")
            .unwrap_err();
        assert_eq!(e.kind(), ErrorKind::DeadlineExceeded, "{e}");
        let _ = scope.wait_idle(LIMIT);
    });
}
