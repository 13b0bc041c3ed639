//! Teardown seen from the threads themselves (Linux `/proc`): the workers
//! exit after the last handle was dropped inside their own work, idle
//! workers sleep while shutdown waits for a long task, and a device's drop
//! blocks instead of polling. One test, run alone in its binary, so that
//! no other test's threads are counted.

#![cfg(target_os = "linux")]

use std::sync::mpsc;
use std::time::{Duration, Instant};

use fenceline::task::{Executor, ExecutorConfig, Scope};
use fenceline::{CpuConfig, Device, Semaphore};

const LIMIT: Duration = Duration::from_secs(10);
/// Worker threads are named `fenceline-worker-N`; Linux keeps the first 15
/// bytes of a thread's name.
const WORKER: &str = "fenceline-work";

/// The tids of this process's threads whose name starts with `prefix`.
fn threads(prefix: &str) -> Vec<String> {
    let mut out = Vec::new();
    for entry in std::fs::read_dir("/proc/self/task").unwrap().flatten() {
        let comm = std::fs::read_to_string(entry.path().join("comm")).unwrap_or_default();
        if comm.starts_with(prefix) {
            out.push(entry.file_name().to_string_lossy().into_owned());
        }
    }
    out
}

/// CPU time (user + system, in clock ticks) of thread `tid`.
fn cpu_ticks(tid: &str) -> u64 {
    let stat = std::fs::read_to_string(format!("/proc/self/task/{tid}/stat")).unwrap_or_default();
    // Fields after the parenthesized name: state is the 3rd field overall,
    // utime the 14th and stime the 15th.
    let rest = stat.rsplit_once(')').map_or("", |(_, r)| r);
    let f: Vec<&str> = rest.split_whitespace().collect();
    let at = |i: usize| {
        f.get(i - 3)
            .and_then(|v| v.parse::<u64>().ok())
            .unwrap_or(0)
    };
    at(14) + at(15)
}

/// Voluntary context switches of thread `tid` so far.
fn voluntary_switches(tid: &str) -> u64 {
    let status =
        std::fs::read_to_string(format!("/proc/self/task/{tid}/status")).unwrap_or_default();
    status
        .lines()
        .find_map(|l| l.strip_prefix("voluntary_ctxt_switches:"))
        .and_then(|v| v.trim().parse().ok())
        .unwrap_or(0)
}

/// `USER_HZ`, the unit of `/proc` CPU times: 100 on every mainstream
/// Linux architecture.
fn ticks_per_second() -> u64 {
    100
}

fn wait_until(what: &str, mut f: impl FnMut() -> bool) {
    let start = Instant::now();
    while !f() {
        assert!(start.elapsed() < LIMIT, "{what}: not after {LIMIT:?}");
        std::thread::sleep(Duration::from_millis(5));
    }
}

#[test]
// Miri runs every thread on one host thread: `/proc` shows no worker.
#[cfg_attr(miri, ignore)]
fn teardown_leaves_no_thread_running_and_burns_no_cpu() {
    assert!(threads(WORKER).is_empty(), "no worker before");

    // 1. The last handles dropped inside a host call: once the call has
    // finished, every worker exits on its own (nothing leaks a thread).
    // Mutation caught: `Device` drop waiting for in-flight work wherever
    // it runs (the worker hangs in the drop: the threads never exit).
    {
        let device = Device::cpu_with(CpuConfig {
            workers: 2,
            queues: 1,
            ..Default::default()
        })
        .unwrap();
        let queue = device.queue(0).unwrap();
        let done = Semaphore::new(0);
        wait_until("two workers started", || threads(WORKER).len() == 2);
        let q = queue.clone();
        queue
            .host_call(&[], &[(&done, 1)], move || {
                drop((device, q));
                Ok(())
            })
            .unwrap();
        drop(queue);
        done.wait(1, LIMIT).unwrap();
        wait_until("the workers exited", || threads(WORKER).is_empty());
    }

    // 2. Shutdown with a long task running elsewhere: the idle worker
    // sleeps. Mutation caught: idle workers skipping the park once shutdown
    // started (one burns a core until the long task ends).
    {
        let exec = Executor::new(ExecutorConfig {
            workers: 2,
            spin: true,
        })
        .unwrap();
        let scope = Scope::new();
        let (started, release) = (Semaphore::new(0), Semaphore::new(0));
        let mut g = exec.graph(&scope);
        let (s, r) = (started.clone(), release.clone());
        g.call(move |_| {
            s.signal(1)?;
            r.wait(1, LIMIT)
        })
        .unwrap();
        g.submit();
        started.wait(1, LIMIT).unwrap();
        let (tx, rx) = mpsc::channel();
        let dropper = std::thread::spawn(move || {
            drop(exec); // returns once the long task ended
            let _ = tx.send(());
        });
        std::thread::sleep(Duration::from_millis(50));
        let workers = threads(WORKER);
        let before: u64 = workers.iter().map(|t| cpu_ticks(t)).sum();
        let window = Duration::from_millis(500);
        std::thread::sleep(window);
        let after: u64 = workers.iter().map(|t| cpu_ticks(t)).sum();
        release.signal(1).unwrap();
        rx.recv_timeout(LIMIT)
            .expect("the executor's drop returned");
        dropper.join().unwrap();
        let burnt = Duration::from_millis((after - before) * 1000 / ticks_per_second());
        assert!(
            burnt < window / 4,
            "workers used {burnt:?} of CPU in {window:?} while waiting at shutdown"
        );
        wait_until("the workers exited", || threads(WORKER).is_empty());
    }

    // 3. A device's drop while an issued host call runs blocks on the
    // drain instead of sleep-polling. Mutation caught: `Device` drop
    // polling in-flight counts every 50 us (thousands of voluntary context
    // switches on the dropping thread instead of a handful).
    {
        let device = Device::cpu_with(CpuConfig {
            workers: 1,
            queues: 1,
            ..Default::default()
        })
        .unwrap();
        let queue = device.queue(0).unwrap();
        let (started, release, done) = (Semaphore::new(0), Semaphore::new(0), Semaphore::new(0));
        let (s, r) = (started.clone(), release.clone());
        queue
            .host_call(&[], &[(&done, 1)], move || {
                s.signal(1)?;
                r.wait(1, LIMIT)
            })
            .unwrap();
        started.wait(1, LIMIT).unwrap();
        drop(queue);
        let (tid_tx, tid_rx) = mpsc::channel();
        let dropper = std::thread::spawn(move || {
            let me = std::fs::read_link("/proc/thread-self").unwrap();
            let tid = me.file_name().unwrap().to_string_lossy().into_owned();
            tid_tx.send(tid).unwrap();
            drop(device);
        });
        let tid = tid_rx.recv_timeout(LIMIT).unwrap();
        std::thread::sleep(Duration::from_millis(50));
        let before = voluntary_switches(&tid);
        std::thread::sleep(Duration::from_millis(300));
        let after = voluntary_switches(&tid);
        release.signal(1).unwrap();
        dropper.join().unwrap();
        done.wait(1, LIMIT).unwrap();
        assert!(
            after - before < 50,
            "the dropping thread woke {} times in 300 ms while the work ran",
            after - before
        );
    }
}
