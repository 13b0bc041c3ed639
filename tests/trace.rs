//! Feature `trace`: a recorded timeline parses as Chrome trace JSON, every
//! thread's spans nest or follow each other, every submitted action
//! appears with its issue and its completion, counts match the workload,
//! and full rings drop their oldest events and say so. (Mutations
//! checked: the issue span removed fails the first test; spans recorded
//! twice as long fail the nesting test.)
#![cfg(feature = "trace")]

use std::collections::{BTreeMap, HashMap};
use std::sync::Mutex;
use std::time::Duration;

use fenceline::{Device, ErrorKind, Semaphore};
use serde_json::Value;

const T: Duration = Duration::from_secs(10);

/// One trace records at a time in a process: the tests take turns.
static ONE_AT_A_TIME: Mutex<()> = Mutex::new(());

#[path = "common/workload.rs"]
mod workload;
use workload::{dispatch_16, mixed};

fn device() -> Device {
    workload::device(2)
}

/// Runs `n` chained actions (executes of a 16-tile dispatch, barriers and
/// host calls, alternating queues) while a trace records; its JSON.
fn traced_workload(d: &Device, n: u64, events_per_thread: usize) -> (Value, fenceline::Trace) {
    let qs = [d.queue(0).unwrap(), d.queue(1).unwrap()];
    let cb = dispatch_16(d);
    let s = Semaphore::new(0);
    d.start_trace(events_per_thread).unwrap();
    mixed(&qs, &cb, &s, 0, n);
    s.wait(n, T).unwrap();
    // The last completion's own span ends just after its signal.
    std::thread::sleep(Duration::from_millis(20));
    let trace = d.stop_trace().unwrap();
    let mut json = Vec::new();
    trace.write_chrome_json(&mut json).unwrap();
    (
        serde_json::from_slice(&json).expect("the trace is JSON"),
        trace,
    )
}

fn events(v: &Value) -> &Vec<Value> {
    v["traceEvents"].as_array().expect("a traceEvents array")
}

#[test]
fn every_action_appears_with_its_issue_and_completion() {
    let _turn = ONE_AT_A_TIME.lock().unwrap_or_else(|p| p.into_inner());
    let d = device();
    const N: u64 = 90;
    let (v, trace) = traced_workload(&d, N, 1 << 16);
    assert_eq!(trace.dropped(), 0);
    assert_eq!(v["otherData"]["dropped_events"], 0);
    let mut by_name: HashMap<&str, Vec<&str>> = HashMap::new();
    for e in events(&v) {
        if e["ph"] == "X" {
            let id = e["args"]["id"].as_str().unwrap();
            by_name
                .entry(e["name"].as_str().unwrap())
                .or_default()
                .push(id);
        }
    }
    let mut ids = |name: &str| {
        let mut v = by_name.remove(name).unwrap_or_default();
        v.sort_unstable();
        v
    };
    let (submits, issues, completes) = (ids("submit"), ids("issue"), ids("complete"));
    assert_eq!(submits.len() as u64, N, "one submit span per action");
    // Action ids are block addresses (reused): the multisets match.
    assert_eq!(submits, issues, "every submitted action was issued");
    assert_eq!(submits, completes, "every submitted action completed");
    // N/3 executes of a 16-tile dispatch: dispatch tasks ran; N/3 host
    // calls ran; N signals were made.
    assert_eq!(ids("host call").len() as u64, N / 3);
    assert!(ids("dispatch").len() as u64 >= N / 3);
    assert!(ids("signal").len() as u64 >= N);
    // Flow arrows: each submission starts one, each issue ends one.
    let count = |ph: &str| events(&v).iter().filter(|e| e["ph"] == ph).count() as u64;
    assert!(count("s") >= N && count("f") >= N);
    // Thread names: the workers are named.
    let names: Vec<&str> = events(&v)
        .iter()
        .filter(|e| e["ph"] == "M")
        .map(|e| e["args"]["name"].as_str().unwrap())
        .collect();
    assert!(
        names.iter().any(|n| n.starts_with("fenceline-worker")),
        "{names:?}"
    );
}

#[test]
fn spans_of_one_thread_nest_or_follow_each_other() {
    let _turn = ONE_AT_A_TIME.lock().unwrap_or_else(|p| p.into_inner());
    let d = device();
    let (v, _) = traced_workload(&d, 300, 1 << 16);
    let mut per_thread: BTreeMap<u64, Vec<(f64, f64)>> = BTreeMap::new();
    for e in events(&v) {
        if e["ph"] == "X" {
            let ts = e["ts"].as_f64().unwrap();
            let dur = e["dur"].as_f64().unwrap();
            assert!(dur >= 0.0);
            per_thread
                .entry(e["tid"].as_u64().unwrap())
                .or_default()
                .push((ts, ts + dur));
        }
    }
    assert!(
        per_thread.len() >= 2,
        "the workers and the submitting thread"
    );
    for (tid, mut spans) in per_thread {
        // Outer spans first when they start together.
        spans.sort_by(|a, b| a.0.total_cmp(&b.0).then(b.1.total_cmp(&a.1)));
        let mut open: Vec<f64> = Vec::new();
        for (start, end) in spans {
            while open.last().is_some_and(|&e| e <= start) {
                open.pop();
            }
            if let Some(&outer) = open.last() {
                // Printed in microseconds with 3 decimals: 1 ns of slack.
                assert!(
                    end <= outer + 0.001,
                    "thread {tid}: span [{start}, {end}] overlaps its enclosing span ending at {outer}"
                );
            }
            open.push(end);
        }
    }
}

#[test]
fn a_full_ring_drops_its_oldest_events_and_says_how_many() {
    let _turn = ONE_AT_A_TIME.lock().unwrap_or_else(|p| p.into_inner());
    let d = device();
    let (v, trace) = traced_workload(&d, 300, 16);
    assert!(trace.dropped() > 0);
    assert_eq!(v["otherData"]["dropped_events"], trace.dropped());
    let mut per_thread: HashMap<u64, usize> = HashMap::new();
    for e in events(&v) {
        if e["ph"] != "M" {
            *per_thread.entry(e["tid"].as_u64().unwrap()).or_default() += 1;
        }
    }
    assert!(per_thread.values().all(|&n| n <= 16), "{per_thread:?}");
    // The newest events are kept: the last completion is there.
    assert!(events(&v).iter().any(|e| e["name"] == "complete"));
}

#[test]
fn one_trace_at_a_time_and_clear_errors() {
    let _turn = ONE_AT_A_TIME.lock().unwrap_or_else(|p| p.into_inner());
    let d = device();
    assert_eq!(
        d.stop_trace().unwrap_err().kind(),
        ErrorKind::FailedPrecondition
    );
    assert_eq!(
        d.start_trace(0).unwrap_err().kind(),
        ErrorKind::InvalidArgument
    );
    d.start_trace(8).unwrap();
    assert_eq!(
        d.start_trace(8).unwrap_err().kind(),
        ErrorKind::FailedPrecondition
    );
    let other = device();
    assert_eq!(
        other.start_trace(8).unwrap_err().kind(),
        ErrorKind::FailedPrecondition
    );
    let t = other.stop_trace().unwrap();
    assert_eq!(t.events(), 0);
    assert_eq!(
        d.stop_trace().unwrap_err().kind(),
        ErrorKind::FailedPrecondition
    );
}
