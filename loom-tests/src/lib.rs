//! Empty unless built with `--cfg fenceline_loom`: the models live in
//! `tests/`; this library holds what several of them share.

/// A model with worker threads: many more steps than loom's defaults
/// allow (a worker's loop is long), and at most two preemptions unless
/// `LOOM_MAX_PREEMPTIONS` says otherwise.
#[cfg(fenceline_loom)]
pub fn big_model() -> loom::model::Builder {
    let mut builder = loom::model::Builder::new();
    builder.max_branches = 1_000_000;
    builder.preemption_bound = builder.preemption_bound.or(Some(2));
    builder
}

/// Submits, on `exec`, a wait task for `gate` to reach 1 followed by a
/// fence that signals `out` to 1 (or fails it with the wait's error):
/// the graph of the wait-task models. Returns the graph's scope.
#[cfg(fenceline_loom)]
pub fn submit_wait_then_fence(
    exec: &fenceline::task::Executor,
    gate: &fenceline::Semaphore,
    out: &fenceline::Semaphore,
) -> fenceline::task::Scope {
    let scope = fenceline::task::Scope::new();
    let mut g = exec.graph(&scope);
    let w = g.wait(gate, 1, fenceline::Timeout::Never).unwrap();
    let f = g.fence(Some((out, 1))).unwrap();
    g.set_completion(w, f).unwrap();
    g.submit();
    scope
}
