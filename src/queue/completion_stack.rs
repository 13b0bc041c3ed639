//! [`CompletionStack`]: issued actions handed, lock-free, from the thread
//! that learns they finished (a driver callback) to the one that completes
//! them; a backend's tool (the CUDA device's completion threads use it).

use std::fmt;

use super::action::SubmitLink;
use super::backend::{Backend, Completion};
use crate::list::{Handle, SList, TransferStack};

/// A lock-free stack of issued actions, for a backend that hands
/// completions from one thread (a driver callback) to another. It links
/// the actions through their own submit links (free once issued): no
/// allocation, no lock.
pub struct CompletionStack<B: Backend> {
    stack: TransferStack<SubmitLink<B::Payload>>,
}

// SAFETY: the stack owns the pushed actions (payloads are `Send`).
unsafe impl<B: Backend> Send for CompletionStack<B> {}
// SAFETY: push and take_all are lock-free and safe from any thread.
unsafe impl<B: Backend> Sync for CompletionStack<B> {}

impl<B: Backend> Default for CompletionStack<B> {
    fn default() -> Self {
        CompletionStack {
            stack: TransferStack::new(),
        }
    }
}

impl<B: Backend> fmt::Debug for CompletionStack<B> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("CompletionStack")
    }
}

impl<B: Backend> CompletionStack<B> {
    /// Pushes an issued action; only atomic operations (safe in a driver
    /// callback).
    pub fn push(&self, work: Completion<B>) {
        let action = work.action;
        std::mem::forget(work);
        // SAFETY: an issued action is linked nowhere; its submit links are
        // free and the stack now owns it.
        self.stack.push(unsafe { Handle::from_raw(action) });
    }

    /// Takes every pushed action, oldest first. Actions the iterator is
    /// dropped before yielding are completed with an error, not leaked.
    #[must_use = "dropping the iterator fails every action it still holds"]
    pub fn take_all(&self) -> Completions<B> {
        Completions {
            list: self.stack.take_all(),
        }
    }

    /// Whether nothing is pushed (a snapshot).
    pub fn is_empty(&self) -> bool {
        self.stack.is_empty()
    }
}

/// Actions taken from a [`CompletionStack`], oldest first: an iterator,
/// and a FIFO a backend can keep and [`append`](Self::append) to.
pub struct Completions<B: Backend> {
    list: SList<SubmitLink<B::Payload>>,
}

impl<B: Backend> Completions<B> {
    /// Adds `more` (taken later) behind these.
    pub fn append(&mut self, mut more: Completions<B>) {
        self.list.append(&mut more.list);
    }

    /// Actions not yet yielded.
    pub fn len(&self) -> usize {
        self.list.len()
    }

    /// Whether every action was yielded.
    #[cfg_attr(not(feature = "cuda"), allow(dead_code))]
    pub fn is_empty(&self) -> bool {
        self.list.is_empty()
    }
}

impl<B: Backend> fmt::Debug for Completions<B> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Completions")
            .field("len", &self.len())
            .finish()
    }
}

impl<B: Backend> Iterator for Completions<B> {
    type Item = Completion<B>;

    fn next(&mut self) -> Option<Completion<B>> {
        self.list.pop_front().map(|action| {
            // SAFETY: pushed by `CompletionStack::push` from a
            // `Completion<B>`, and popped once.
            unsafe { Completion::from_raw(action.into_raw().as_ptr().cast()) }
        })
    }
}

impl<B: Backend> Drop for Completions<B> {
    fn drop(&mut self) {
        for work in self.by_ref() {
            drop(work);
        }
    }
}

impl<B: Backend> Drop for CompletionStack<B> {
    fn drop(&mut self) {
        // Complete (with an error) anything left rather than strand it.
        drop(self.take_all());
    }
}
