//! Handles and the global registries they are looked up in.
//!
//! A handle is a never-reused id from one global counter, cast to the
//! driver's pointer type. Each registry remembers the ids it destroyed, so a
//! destroyed handle is reported as misuse ("used after destroy") while an id
//! it never issued is a plain `CUDA_ERROR_INVALID_HANDLE`.
//!
//! All registries sit behind the one [`state`] lock. It is held only for
//! short bookkeeping, never while blocking, and stream threads never take it.

use crate::context::Context;
use crate::graph::{Exec, Graph};
use crate::misuse::{error, lock, misuse};
use crate::module::{Function, HostKernel, Module};
use crate::stream::{Event, Stream};
use crate::SimResult;
use cudarc::driver::sys::cudaError_enum::*;
use cudarc::driver::sys::CUdevice;
use std::collections::{BTreeMap, BTreeSet};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};

/// Ids start above the special stream values 0x1 and 0x2 and step by 16 so
/// that they look like (aligned) pointers. Relaxed: only uniqueness matters.
static NEXT_ID: AtomicU64 = AtomicU64::new(0x1000);

pub(crate) fn new_id() -> u64 {
    NEXT_ID.fetch_add(0x10, Ordering::Relaxed)
}

/// The handle of type `*mut T` for `id`; it is never dereferenced.
pub(crate) fn handle<T>(id: u64) -> *mut T {
    std::ptr::without_provenance_mut(id as usize)
}

/// The id behind a handle.
pub(crate) fn id_of<T>(h: *mut T) -> u64 {
    h.addr() as u64
}

/// Live objects of one kind by id, and the ids destroyed so far.
pub(crate) struct Registry<T> {
    kind: &'static str,
    live: BTreeMap<u64, T>,
    dead: BTreeSet<u64>,
}

impl<T> Registry<T> {
    const fn new(kind: &'static str) -> Self {
        Registry {
            kind,
            live: BTreeMap::new(),
            dead: BTreeSet::new(),
        }
    }

    /// Registers `value` under a new id and returns the id.
    pub(crate) fn insert(&mut self, value: T) -> u64 {
        let id = new_id();
        self.live.insert(id, value);
        id
    }

    pub(crate) fn get(&self, id: u64, call: &str) -> SimResult<&T> {
        self.live
            .get(&id)
            .ok_or_else(|| missing(self.kind, &self.dead, id, call))
    }

    pub(crate) fn get_mut(&mut self, id: u64, call: &str) -> SimResult<&mut T> {
        let Registry { kind, live, dead } = self;
        live.get_mut(&id)
            .ok_or_else(|| missing(kind, dead, id, call))
    }

    /// Destroys `id`; later uses are reported as misuse.
    pub(crate) fn remove(&mut self, id: u64, call: &str) -> SimResult<T> {
        let value = self
            .live
            .remove(&id)
            .ok_or_else(|| missing(self.kind, &self.dead, id, call))?;
        self.dead.insert(id);
        Ok(value)
    }

    /// Live objects (created minus destroyed).
    pub(crate) fn live_count(&self) -> u64 {
        self.live.len() as u64
    }
}

/// The error for an id that is not live: misuse if it was destroyed.
fn missing(kind: &str, dead: &BTreeSet<u64>, id: u64, call: &str) -> crate::CUresult {
    if dead.contains(&id) {
        misuse(
            CUDA_ERROR_INVALID_HANDLE,
            format!("{call}: {kind} {id:#x} used after destroy"),
        )
    } else {
        error(
            CUDA_ERROR_INVALID_HANDLE,
            format_args!("{call}: {kind} {id:#x} was never created"),
        )
    }
}

/// Everything the simulated driver knows, except memory (see `memory.rs`).
pub(crate) struct State {
    pub(crate) device_count: i32,
    pub(crate) contexts: Registry<Context>,
    /// The live primary context of each device that has one.
    pub(crate) primary: BTreeMap<CUdevice, u64>,
    /// The null stream, started on first use.
    pub(crate) null_stream: Option<Arc<Stream>>,
    pub(crate) streams: Registry<Arc<Stream>>,
    pub(crate) events: Registry<Arc<Event>>,
    pub(crate) modules: Registry<Module>,
    pub(crate) functions: Registry<Function>,
    pub(crate) graphs: Registry<Graph>,
    pub(crate) execs: Registry<Arc<Exec>>,
    /// Host implementations of kernels, by entry name.
    pub(crate) kernels: BTreeMap<String, Arc<HostKernel>>,
}

static STATE: Mutex<State> = Mutex::new(State {
    device_count: 0,
    contexts: Registry::new("context"),
    primary: BTreeMap::new(),
    null_stream: None,
    streams: Registry::new("stream"),
    events: Registry::new("event"),
    modules: Registry::new("module"),
    functions: Registry::new("function"),
    graphs: Registry::new("graph"),
    execs: Registry::new("graph exec"),
    kernels: BTreeMap::new(),
});

pub(crate) fn state() -> MutexGuard<'static, State> {
    lock(&STATE)
}
