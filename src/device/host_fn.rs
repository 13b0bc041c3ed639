//! `HostFn`: a host call's `FnOnce`, type-erased, kept in a
//! [`SmallBox`] (in place when small, boxed otherwise).

use std::mem::{self, MaybeUninit};

use crate::error::Error;
use crate::small_box::SmallBox;

/// Bytes of captured state a host call keeps without allocating.
pub const HOST_CALL_INLINE_BYTES: usize = 48;

/// The closure's box, for whichever closure type `F`: every
/// `SmallBox<F, HOST_CALL_INLINE_BYTES>` has this size and alignment.
type Room = MaybeUninit<SmallBox<(), HOST_CALL_INLINE_BYTES>>;

/// Moves the closure out of the room and calls it.
type CallFn = unsafe fn(*mut Room) -> Result<(), Error>;

/// A type-erased `FnOnce() -> Result<(), Error> + Send`.
pub(crate) struct HostFn {
    /// A `SmallBox<F, HOST_CALL_INLINE_BYTES>` for the `F` that `call` and
    /// `drop` were made for.
    room: Room,
    /// Calls (and consumes) the stored closure; `None` once called.
    call: Option<CallFn>,
    /// Drops the stored closure without calling it.
    drop: unsafe fn(*mut Room),
}

// SAFETY: only built from `Send` closures.
unsafe impl Send for HostFn {}

/// # Safety
/// `room` holds a `SmallBox<F, _>`, moved out here.
unsafe fn call_boxed<F: FnOnce() -> Result<(), Error>>(room: *mut Room) -> Result<(), Error> {
    // SAFETY: per contract.
    let f = unsafe { room.cast::<SmallBox<F, HOST_CALL_INLINE_BYTES>>().read() };
    (f.into_inner())()
}

/// # Safety
/// `room` holds a `SmallBox<F, _>`, dropped here.
unsafe fn drop_boxed<F>(room: *mut Room) {
    // SAFETY: per contract.
    unsafe {
        room.cast::<SmallBox<F, HOST_CALL_INLINE_BYTES>>()
            .drop_in_place()
    }
}

impl HostFn {
    pub(crate) fn new<F>(f: F) -> HostFn
    where
        F: FnOnce() -> Result<(), Error> + Send + 'static,
    {
        const {
            assert!(
                mem::size_of::<SmallBox<F, HOST_CALL_INLINE_BYTES>>() == mem::size_of::<Room>()
            );
            assert!(
                mem::align_of::<SmallBox<F, HOST_CALL_INLINE_BYTES>>() == mem::align_of::<Room>()
            );
        };
        let mut room = Room::uninit();
        // SAFETY: same size and alignment (asserted above).
        unsafe {
            room.as_mut_ptr()
                .cast::<SmallBox<F, HOST_CALL_INLINE_BYTES>>()
                .write(SmallBox::new(f))
        };
        HostFn {
            room,
            call: Some(call_boxed::<F>),
            drop: drop_boxed::<F>,
        }
    }

    /// Calls the closure (once).
    pub(crate) fn call(mut self) -> Result<(), Error> {
        let Some(call) = self.call.take() else {
            return Err(Error::new(
                crate::error::ErrorKind::Internal,
                "host call already ran",
            ));
        };
        let t = crate::trace::now();
        // SAFETY: the room holds the box `call` was made for; `call` moves
        // it out, and `Drop` no longer drops it (`call` is `None`).
        let r = unsafe { call(&mut self.room) };
        crate::trace::span(crate::trace::Kind::HostCall, t, 0, 0, u64::from(r.is_err()));
        r
    }
}

impl Drop for HostFn {
    fn drop(&mut self) {
        if self.call.is_some() {
            // SAFETY: the closure was never called: drop it once.
            unsafe { (self.drop)(&mut self.room) };
        }
    }
}
