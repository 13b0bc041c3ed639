//! `HostFn`: a `FnOnce` stored inline when small (no allocation), boxed
//! otherwise.

use std::mem::{self, MaybeUninit};

use crate::error::Error;

/// Bytes of captured state a host call keeps without allocating.
pub const HOST_CALL_INLINE_BYTES: usize = 48;

#[repr(C, align(16))]
struct Storage([MaybeUninit<u8>; HOST_CALL_INLINE_BYTES]);

/// Calls the closure stored at the pointer, moving it out.
type CallFn = unsafe fn(*mut u8) -> Result<(), Error>;

/// A type-erased `FnOnce() -> Result<(), Error> + Send`.
pub(crate) struct HostFn {
    storage: Storage,
    /// Calls (and consumes) the stored closure; `None` once called.
    call: Option<CallFn>,
    /// Drops the stored closure without calling it.
    drop: unsafe fn(*mut u8),
}

// SAFETY: only built from `Send` closures.
unsafe impl Send for HostFn {}

unsafe fn call_inline<F: FnOnce() -> Result<(), Error>>(p: *mut u8) -> Result<(), Error> {
    // SAFETY: `p` holds an `F`, read out once.
    let f = unsafe { p.cast::<F>().read() };
    f()
}

unsafe fn drop_inline<F>(p: *mut u8) {
    // SAFETY: `p` holds an `F`, dropped once.
    unsafe { std::ptr::drop_in_place(p.cast::<F>()) }
}

impl HostFn {
    pub(crate) fn new<F>(f: F) -> HostFn
    where
        F: FnOnce() -> Result<(), Error> + Send + 'static,
    {
        if mem::size_of::<F>() <= HOST_CALL_INLINE_BYTES && mem::align_of::<F>() <= 16 {
            let mut storage = Storage([const { MaybeUninit::uninit() }; HOST_CALL_INLINE_BYTES]);
            // SAFETY: the storage is large and aligned enough for `F`.
            unsafe { storage.0.as_mut_ptr().cast::<F>().write(f) };
            HostFn {
                storage,
                call: Some(call_inline::<F>),
                drop: drop_inline::<F>,
            }
        } else {
            type Boxed = Box<dyn FnOnce() -> Result<(), Error> + Send>;
            let boxed: Boxed = Box::new(f);
            HostFn::new_boxed(boxed)
        }
    }

    fn new_boxed(f: Box<dyn FnOnce() -> Result<(), Error> + Send>) -> HostFn {
        type Boxed = Box<dyn FnOnce() -> Result<(), Error> + Send>;
        let mut storage = Storage([const { MaybeUninit::uninit() }; HOST_CALL_INLINE_BYTES]);
        // SAFETY: a `Box<dyn ..>` (two words) fits the storage.
        unsafe { storage.0.as_mut_ptr().cast::<Boxed>().write(f) };
        HostFn {
            storage,
            call: Some(call_inline::<Boxed>),
            drop: drop_inline::<Boxed>,
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
        // SAFETY: the storage holds the closure `call` was made for; `call`
        // moves it out, and `Drop` no longer drops it (`call` is `None`).
        unsafe { call(self.storage.0.as_mut_ptr().cast()) }
    }
}

impl Drop for HostFn {
    fn drop(&mut self) {
        if self.call.is_some() {
            // SAFETY: the closure was never called: drop it once.
            unsafe { (self.drop)(self.storage.0.as_mut_ptr().cast()) };
        }
    }
}
