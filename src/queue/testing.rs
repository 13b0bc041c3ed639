//! A deterministic backend for tests: issued actions wait in a list until
//! the test completes them, so ordering and races can be tested without
//! device threads (and under loom).

use std::collections::VecDeque;

use super::backend::{Backend, Completion, IssueTurn};
use crate::error::Error;
use crate::sync::Mutex;

/// Payload of the testing backend: an id the test chooses.
pub type TestPayload = u64;

/// Issued actions are kept, in issue order, until the test completes them.
/// With `auto_complete`, each action completes inside `issue` instead.
#[derive(Debug)]
pub struct TestingBackend {
    issued: Mutex<VecDeque<Completion<TestingBackend>>>,
    log: Mutex<Vec<TestPayload>>,
    auto_complete: bool,
    /// Takes the issuer turns the queue hands off (`handing_off`), until
    /// the test runs them.
    turns: Option<Mutex<Vec<IssueTurn<TestingBackend>>>>,
}

impl Default for TestingBackend {
    fn default() -> Self {
        Self::new(false)
    }
}

impl TestingBackend {
    /// A backend that holds issued actions (`auto_complete: false`) or
    /// completes them `Ok` as soon as they are issued.
    pub fn new(auto_complete: bool) -> TestingBackend {
        TestingBackend {
            issued: Mutex::new(VecDeque::with_capacity(64)),
            log: Mutex::new(Vec::with_capacity(64)),
            auto_complete,
            turns: None,
        }
    }

    /// As [`new`](Self::new), and takes every issuer turn the queue hands
    /// off ([`Backend::hand_off_turn`]) until [`run_turns`](Self::run_turns)
    /// or [`take_turns`](Self::take_turns). A turn holds its queue: one
    /// left here when the queue's handle goes keeps the queue alive (the
    /// backend is part of it), so a test runs or takes every turn.
    pub fn handing_off(auto_complete: bool) -> TestingBackend {
        TestingBackend {
            turns: Some(Mutex::new(Vec::new())),
            ..Self::new(auto_complete)
        }
    }

    /// Issuer turns handed off and not run yet.
    pub fn turns_waiting(&self) -> usize {
        self.turns
            .as_ref()
            .map_or(0, |t| t.lock().unwrap_or_else(|p| p.into_inner()).len())
    }

    /// Takes the issuer turns handed off so far, not run (each runs when
    /// run or dropped).
    pub fn take_turns(&self) -> Vec<IssueTurn<TestingBackend>> {
        self.turns.as_ref().map_or_else(Vec::new, |t| {
            std::mem::take(&mut *t.lock().unwrap_or_else(|p| p.into_inner()))
        })
    }

    /// Runs every issuer turn handed off (including any handed off
    /// meanwhile); returns how many.
    pub fn run_turns(&self) -> usize {
        let mut n = 0;
        while let Some(turn) = self
            .turns
            .as_ref()
            .and_then(|t| t.lock().unwrap_or_else(|p| p.into_inner()).pop())
        {
            turn.run();
            n += 1;
        }
        n
    }

    /// Ids of every action issued so far, in issue order.
    pub fn issued_log(&self) -> Vec<TestPayload> {
        self.log.lock().unwrap_or_else(|p| p.into_inner()).clone()
    }

    /// Forgets the issue log (keeps its capacity).
    pub fn clear_log(&self) {
        self.log.lock().unwrap_or_else(|p| p.into_inner()).clear();
    }

    /// Issued actions not completed yet.
    pub fn in_flight(&self) -> usize {
        self.issued.lock().unwrap_or_else(|p| p.into_inner()).len()
    }

    /// Completes the oldest issued action with `result`; returns its id.
    pub fn complete_next(&self, result: Result<(), Error>) -> Option<TestPayload> {
        // Pop under the lock, complete outside it: completing may issue
        // more actions into this backend.
        let work = self
            .issued
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .pop_front()?;
        let id = *work.payload();
        work.complete(result);
        Some(id)
    }

    /// Takes the oldest issued action without completing it (to hand it
    /// on, e.g. through a [`CompletionStack`](super::CompletionStack)).
    pub fn take_next(&self) -> Option<Completion<TestingBackend>> {
        self.issued
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .pop_front()
    }

    /// Completes every issued action, including those issued meanwhile.
    pub fn complete_all(&self) -> usize {
        let mut n = 0;
        while self.complete_next(Ok(())).is_some() {
            n += 1;
        }
        n
    }
}

impl Backend for TestingBackend {
    type Payload = TestPayload;

    fn issue(&self, work: Completion<Self>) {
        self.log
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .push(*work.payload());
        if self.auto_complete {
            work.complete(Ok(()));
        } else {
            self.issued
                .lock()
                .unwrap_or_else(|p| p.into_inner())
                .push_back(work);
        }
    }

    fn wants_turn(&self) -> bool {
        self.turns.is_some()
    }

    fn hand_off_turn(&self, turn: IssueTurn<Self>) -> Result<(), IssueTurn<Self>> {
        match &self.turns {
            Some(turns) => {
                turns.lock().unwrap_or_else(|p| p.into_inner()).push(turn);
                Ok(())
            }
            None => Err(turn),
        }
    }
}
