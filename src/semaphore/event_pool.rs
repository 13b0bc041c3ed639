//! `EventPool<E>`: reference-counted device events (CUDA events later),
//! created once and reused.
//!
//! The backend supplies `create` and `destroy`. Every slot lives in a
//! `BlockPool` capped at the pool's capacity and initialized when the pool
//! is made, so a slot keeps its created event while free: acquiring reuses
//! it without calling `create` again. Handles count references in the slot;
//! the handle that takes the count to zero returns the slot to the pool,
//! exactly once. A type-erased [`AnyEvent`] lets a semaphore hold events of
//! any backend ("an event was recorded that brings me to v").

use std::fmt;
use std::marker::PhantomData;
use std::ptr::NonNull;

use crate::error::{Error, ErrorKind};
use crate::pool::{BlockPool, BlockPoolConfig, RawBlock};
use crate::sync::atomic::{AtomicUsize, Ordering};
use crate::sync::counted::{Counted, Counts};
use crate::sync::{Arc, UnsafeCell};

/// Creates one device event (the backend's, e.g. `cuEventCreate`).
pub(crate) type CreateFn<E> = Box<dyn Fn() -> Result<E, Error> + Send + Sync>;
/// Destroys one device event when the pool goes away.
pub(crate) type DestroyFn<E> = Box<dyn Fn(E) + Send + Sync>;

/// Type-independent start of every slot, what an [`AnyEvent`] points to.
#[repr(C)]
struct EntryHeader {
    refs: AtomicUsize,
    /// Returns the slot to its pool (monomorphized per event type).
    release: unsafe fn(NonNull<EntryHeader>),
    /// The pool's shared state (its identity, for [`EventPool::event_of`]).
    owner: *const (),
}

#[repr(C)]
struct Entry<E> {
    header: EntryHeader,
    index: u32,
    /// The pool, held while the slot is out so the pool outlives handles.
    pool: UnsafeCell<Option<Arc<PoolState<E>>>>,
    /// `Some` once created; kept while the slot is free.
    event: UnsafeCell<Option<E>>,
}

struct PoolState<E> {
    blocks: BlockPool,
    /// Every slot, for destroying the events when the pool goes away.
    slots: Box<[NonNull<Entry<E>>]>,
    create: CreateFn<E>,
    destroy: DestroyFn<E>,
    created: AtomicUsize,
}

// SAFETY: slots are handed to one acquirer at a time; events are `Send`.
unsafe impl<E: Send> Send for PoolState<E> {}
// SAFETY: shared state is atomic or owned by one handle holder at a time;
// handles give `&E` to several threads, so `E: Sync`.
unsafe impl<E: Send + Sync> Sync for PoolState<E> {}

/// A pool of reusable device events. Cheap to clone (a handle).
pub struct EventPool<E> {
    shared: Arc<PoolState<E>>,
}

impl<E> Clone for EventPool<E> {
    fn clone(&self) -> Self {
        EventPool {
            shared: self.shared.clone(),
        }
    }
}

impl<E> fmt::Debug for EventPool<E> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("EventPool")
            .field("capacity", &self.shared.slots.len())
            .field("created", &self.shared.created.load(Ordering::Relaxed))
            .finish()
    }
}

impl<E: Send + Sync + 'static> EventPool<E> {
    /// A pool of at most `capacity` events, `prefill` of them created now.
    ///
    /// Errors: `InvalidArgument` if `prefill > capacity` or `capacity` is 0;
    /// the error of `create` while prefilling.
    pub fn new(
        create: impl Fn() -> Result<E, Error> + Send + Sync + 'static,
        destroy: impl Fn(E) + Send + Sync + 'static,
        prefill: usize,
        capacity: u32,
    ) -> Result<EventPool<E>, Error> {
        let (create, destroy): (CreateFn<E>, DestroyFn<E>) = (Box::new(create), Box::new(destroy));
        if capacity == 0 || prefill > capacity as usize {
            return Err(Error::new(
                ErrorKind::InvalidArgument,
                format!("event pool prefill {prefill} with capacity {capacity}: need 0 <= prefill <= capacity, capacity > 0"),
            ));
        }
        let blocks = BlockPool::with_config(BlockPoolConfig {
            block_size: std::mem::size_of::<Entry<E>>(),
            align: std::mem::align_of::<Entry<E>>().max(16),
            first_chunk_blocks: capacity.next_power_of_two(),
            max_blocks: Some(capacity),
        })?;
        // Take every block once to initialize its slot, then free them all.
        let mut raw = Vec::with_capacity(capacity as usize);
        let mut slots = Vec::with_capacity(capacity as usize);
        for _ in 0..capacity {
            let block = blocks.acquire_raw()?;
            let slot = block.as_ptr().cast::<Entry<E>>();
            // SAFETY: the block is ours, sized and aligned for a slot.
            unsafe {
                slot.as_ptr().write(Entry {
                    header: EntryHeader {
                        refs: AtomicUsize::new(0),
                        release: release_slot::<E>,
                        owner: std::ptr::null(),
                    },
                    index: block.index(),
                    pool: UnsafeCell::new(None),
                    event: UnsafeCell::new(None),
                })
            };
            slots.push(slot);
            raw.push(block);
        }
        let shared = PoolState {
            blocks,
            slots: slots.into_boxed_slice(),
            create,
            destroy,
            created: AtomicUsize::new(0),
        };
        for &slot in shared.slots.iter().take(prefill) {
            let event = (shared.create)()?;
            // SAFETY: the slot is initialized and owned by us (not yet free).
            unsafe { slot.as_ref() }
                .event
                .with_mut(|e| unsafe { *e = Some(event) });
            shared.created.fetch_add(1, Ordering::Relaxed);
        }
        // SAFETY: every block came from `shared.blocks` and is freed once.
        unsafe { shared.blocks.release_raw_all(raw) };
        let shared = Arc::new(shared);
        let owner = Arc::as_ptr(&shared).cast::<()>();
        for &slot in shared.slots.iter() {
            // SAFETY: no slot has been handed out yet (the pool is not
            // shared), so nothing reads the header concurrently.
            unsafe { (*slot.as_ptr()).header.owner = owner };
        }
        Ok(EventPool { shared })
    }

    /// An event with one reference, reusing a created one if any is free.
    ///
    /// Errors: `ResourceExhausted` when all `capacity` events are out; the
    /// error of `create` for a slot never used before.
    pub fn acquire(&self) -> Result<EventHandle<E>, Error> {
        let block = self.shared.blocks.acquire_raw().map_err(|_| {
            Error::new(
                ErrorKind::ResourceExhausted,
                format!(
                    "all {} events of the pool are in use",
                    self.shared.slots.len()
                ),
            )
        })?;
        let slot = block.as_ptr().cast::<Entry<E>>();
        // SAFETY: initialized in `new`; the block is ours until released.
        let s = unsafe { slot.as_ref() };
        // SAFETY: we own the slot.
        let missing = s.event.with(|e| unsafe { (*e).is_none() });
        if missing {
            match (self.shared.create)() {
                Ok(event) => {
                    // SAFETY: we own the slot.
                    s.event.with_mut(|e| unsafe { *e = Some(event) });
                    self.shared.created.fetch_add(1, Ordering::Relaxed);
                }
                Err(e) => {
                    // SAFETY: from this pool, released once.
                    unsafe { self.shared.blocks.release_raw(block) };
                    return Err(e);
                }
            }
        }
        // SAFETY: we own the slot.
        s.pool
            .with_mut(|p| unsafe { *p = Some(self.shared.clone()) });
        s.header.refs.store(1, Ordering::Relaxed);
        Ok(EventHandle {
            // SAFETY: counted 1 (this handle) above; the slot goes back to
            // the pool only in its `last_drop`.
            slot: unsafe { Counted::from_raw(slot.cast::<EntryHeader>()) },
            _marker: PhantomData,
        })
    }

    /// The event behind `event` if it is one of this pool's, else `None`
    /// (an event of another pool or backend).
    pub fn event_of<'a>(&self, event: &'a AnyEvent) -> Option<&'a E> {
        if event.header.owner != Arc::as_ptr(&self.shared).cast::<()>() {
            return None;
        }
        let slot = Counted::as_ptr(&event.header).cast::<Entry<E>>();
        // SAFETY: the slot belongs to this pool, so it is a `Entry<E>`; it
        // is out (a reference is held), so its event is `Some` and not
        // written until released.
        unsafe { &*slot }.event.with(|e| unsafe { (*e).as_ref() })
    }

    /// Events created so far (each is created once and reused).
    pub fn created(&self) -> usize {
        self.shared.created.load(Ordering::Relaxed)
    }

    /// Most events the pool will ever hold.
    pub fn capacity(&self) -> usize {
        self.shared.slots.len()
    }
}

/// Returns a slot whose last reference dropped.
///
/// # Safety
/// `header` starts a `Entry<E>` whose count just reached zero.
unsafe fn release_slot<E>(header: NonNull<EntryHeader>) {
    let slot = header.cast::<Entry<E>>();
    // SAFETY: valid per contract; we are the only owner now.
    let s = unsafe { slot.as_ref() };
    // SAFETY: as above.
    let pool = s.pool.with_mut(|p| unsafe { (*p).take() });
    let Some(pool) = pool else {
        unreachable!("an acquired slot holds its pool");
    };
    // SAFETY: the slot is block `index` of `pool.blocks`.
    let block = unsafe { RawBlock::from_parts(slot.cast(), s.index) };
    // SAFETY: the slot is a block of `pool.blocks`, released once.
    unsafe { pool.blocks.release_raw(block) };
    // Dropping `pool` may drop the whole pool (and destroy the events),
    // after our slot is back.
    drop(pool);
}

impl<E> Drop for PoolState<E> {
    fn drop(&mut self) {
        for &slot in self.slots.iter() {
            // SAFETY: every slot was initialized in `new`; no handle is
            // alive (each holds an `Arc` to us), so we own them all.
            let event = unsafe { slot.as_ref() }
                .event
                .with_mut(|e| unsafe { (*e).take() });
            if let Some(event) = event {
                (self.destroy)(event);
            }
            // SAFETY: dropped once; the memory goes with the block pool.
            unsafe { std::ptr::drop_in_place(slot.as_ptr()) };
        }
    }
}

/// A counted reference to one pooled event. Cloning adds a reference;
/// the last drop returns the event to its pool.
pub struct EventHandle<E> {
    /// The start of a `Entry<E>`.
    slot: Counted<EntryHeader>,
    _marker: PhantomData<E>,
}

// SAFETY: `refs` is the handles' count alone (set to 1 when the pool hands
// the slot out, while no handle exists).
unsafe impl Counts for EntryHeader {
    fn count(&self) -> &AtomicUsize {
        &self.refs
    }

    unsafe fn last_drop(this: NonNull<EntryHeader>) {
        // SAFETY: the last handle: the slot is ours, valid until released.
        let release = unsafe { (*this.as_ptr()).release };
        // SAFETY: `release` is the slot's pool's, for its event type, and
        // this is the one call (the last handle's).
        unsafe { release(this) }
    }
}

// SAFETY: the handle gives `&E` and may be dropped on any thread.
unsafe impl<E: Send + Sync> Send for EventHandle<E> {}
// SAFETY: as above.
unsafe impl<E: Send + Sync> Sync for EventHandle<E> {}

impl<E> EventHandle<E> {
    /// The event.
    pub fn event(&self) -> &E {
        // SAFETY: the slot is out (we hold a reference), its event is
        // `Some` and not written until the slot is back and reacquired.
        let slot = Counted::as_ptr(&self.slot).cast::<Entry<E>>();
        // SAFETY: a slot's header starts its `Entry<E>` (`repr(C)`).
        let event = unsafe { &*slot }.event.with(|e| unsafe { (*e).as_ref() });
        match event {
            Some(e) => e,
            None => unreachable!("an acquired slot holds an event"),
        }
    }
}

impl<E: Send + Sync> EventHandle<E> {
    /// Forgets the type, for holders of events of any backend.
    pub fn erase(self) -> AnyEvent {
        AnyEvent { header: self.slot }
    }
}

impl<E> Clone for EventHandle<E> {
    fn clone(&self) -> Self {
        EventHandle {
            slot: self.slot.clone(),
            _marker: PhantomData,
        }
    }
}

impl<E> fmt::Debug for EventHandle<E> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("EventHandle")
    }
}

/// A counted reference to a pooled event of any type (see
/// [`EventHandle::erase`]).
pub struct AnyEvent {
    header: Counted<EntryHeader>,
}

// SAFETY: only made by `erase` from an `EventHandle<E>` with `E: Send +
// Sync`; it only counts references and calls the release function.
unsafe impl Send for AnyEvent {}
// SAFETY: as above; shared access only touches the atomic count.
unsafe impl Sync for AnyEvent {}

impl AnyEvent {
    /// The typed handle back.
    ///
    /// # Safety
    /// `E` is the type the handle was erased from.
    pub unsafe fn downcast<E>(self) -> EventHandle<E> {
        EventHandle {
            slot: self.header,
            _marker: PhantomData,
        }
    }

    /// Whether two references name the same event.
    pub fn same(&self, other: &AnyEvent) -> bool {
        Counted::ptr_eq(&self.header, &other.header)
    }
}

impl Clone for AnyEvent {
    fn clone(&self) -> Self {
        AnyEvent {
            header: self.header.clone(),
        }
    }
}

impl fmt::Debug for AnyEvent {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("AnyEvent")
    }
}

static_assertions::assert_impl_all!(EventPool<u64>: Send, Sync, Clone);
static_assertions::assert_impl_all!(EventHandle<u64>: Send, Sync, Clone);
static_assertions::assert_impl_all!(AnyEvent: Send, Sync, Clone);
