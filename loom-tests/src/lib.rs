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
