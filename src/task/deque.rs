//! The workers' local deques: crossbeam's work-stealing deque, or, under
//! the model checker, a stand-in with the same interface on loom's
//! `Mutex`.
//!
//! crossbeam's deque runs on std atomics that loom cannot see: tasks
//! handed through it would carry no happens-before edge in a model, and
//! loom would report every stolen task's fields as racing. The stand-in
//! gives the models the deque's contract (owner pushes and pops at one
//! end, thieves take a batch from the other) with edges loom tracks; the
//! lock-free deque itself is crossbeam's, checked by crossbeam's own tests.

#[cfg(not(fenceline_loom))]
pub(crate) use crossbeam_deque::{Steal, Stealer, Worker};

#[cfg(fenceline_loom)]
pub(crate) use model::{Steal, Stealer, Worker};

#[cfg(fenceline_loom)]
mod model {
    use std::collections::VecDeque;

    use crate::sync::{Arc, Mutex};

    /// The outcome of a steal (as crossbeam's).
    pub(crate) enum Steal<T> {
        Empty,
        Success(T),
        // Never produced by the stand-in; kept for the same `match`.
        #[allow(dead_code)]
        Retry,
    }

    /// The owner's end of a deque (LIFO for the owner).
    pub(crate) struct Worker<T> {
        items: Arc<Mutex<VecDeque<T>>>,
    }

    /// A thief's end of a deque.
    pub(crate) struct Stealer<T> {
        items: Arc<Mutex<VecDeque<T>>>,
    }

    impl<T> Worker<T> {
        pub(crate) fn new_lifo() -> Worker<T> {
            Worker {
                items: Arc::new(Mutex::new(VecDeque::new())),
            }
        }

        pub(crate) fn stealer(&self) -> Stealer<T> {
            Stealer {
                items: self.items.clone(),
            }
        }

        fn lock(&self) -> crate::sync::MutexGuard<'_, VecDeque<T>> {
            self.items.lock().unwrap_or_else(|p| p.into_inner())
        }

        pub(crate) fn push(&self, item: T) {
            self.lock().push_back(item);
        }

        pub(crate) fn pop(&self) -> Option<T> {
            self.lock().pop_back()
        }

        pub(crate) fn len(&self) -> usize {
            self.lock().len()
        }

        pub(crate) fn is_empty(&self) -> bool {
            self.lock().is_empty()
        }
    }

    impl<T> Stealer<T> {
        /// Whether the deque looked empty (a hint, as crossbeam's).
        pub(crate) fn is_empty(&self) -> bool {
            self.items
                .lock()
                .unwrap_or_else(|p| p.into_inner())
                .is_empty()
        }

        /// Takes about half of the items (the oldest), moves all but one
        /// into `dest` and returns that one.
        pub(crate) fn steal_batch_and_pop(&self, dest: &Worker<T>) -> Steal<T> {
            let mut taken = {
                let mut items = self.items.lock().unwrap_or_else(|p| p.into_inner());
                let n = items.len().div_ceil(2);
                items.drain(..n).collect::<VecDeque<T>>()
            };
            let Some(first) = taken.pop_front() else {
                return Steal::Empty;
            };
            for item in taken {
                dest.push(item);
            }
            Steal::Success(first)
        }
    }
}
