//! `SmallBox`: a value kept in place when it fits, boxed otherwise. The one
//! place fenceline decides between the two, for every closure it stores
//! (task payloads, host calls).

use std::marker::PhantomData;
use std::mem::{self, ManuallyDrop, MaybeUninit};

/// A `T` in `N` bytes (aligned to 16) when it fits there (size at most `N`,
/// alignment at most 16); otherwise a `Box<T>` in the same bytes, and
/// making it is the one heap allocation. Which of the two is known from
/// `T`'s layout alone ([`SmallBox::INLINE`]), so no tag is stored.
#[repr(C, align(16))]
pub(crate) struct SmallBox<T, const N: usize> {
    bytes: [MaybeUninit<u8>; N],
    /// Owns a `T` (auto traits and drop check follow `T`'s; a `Box<T>` has
    /// the same).
    _value: PhantomData<T>,
}

impl<T, const N: usize> SmallBox<T, N> {
    /// Whether a `T` is kept in place (`false`: boxed).
    pub(crate) const INLINE: bool = mem::size_of::<T>() <= N && mem::align_of::<T>() <= 16;

    /// Stores `value`, in place or boxed.
    #[inline]
    pub(crate) fn new(value: T) -> Self {
        const { assert!(N >= mem::size_of::<Box<T>>(), "no room for the box pointer") };
        let mut b = SmallBox {
            bytes: [const { MaybeUninit::uninit() }; N],
            _value: PhantomData,
        };
        let at = b.bytes.as_mut_ptr();
        if Self::INLINE {
            // SAFETY: `INLINE`: `N` bytes aligned to 16 hold a `T`.
            unsafe { at.cast::<T>().write(value) };
        } else {
            // SAFETY: the bytes (aligned to 16) hold a pointer (asserted).
            unsafe { at.cast::<Box<T>>().write(Box::new(value)) };
        }
        b
    }

    /// The value.
    #[inline]
    pub(crate) fn get(&self) -> &T {
        let at = self.bytes.as_ptr();
        if Self::INLINE {
            // SAFETY: `new` wrote a `T` here, alive until `self` drops.
            unsafe { &*at.cast::<T>() }
        } else {
            // SAFETY: `new` wrote a `Box<T>` here.
            unsafe { &*at.cast::<Box<T>>() }
        }
    }

    /// The value, mutably.
    #[inline]
    pub(crate) fn get_mut(&mut self) -> &mut T {
        let at = self.bytes.as_mut_ptr();
        if Self::INLINE {
            // SAFETY: as in `get`, borrowed mutably.
            unsafe { &mut *at.cast::<T>() }
        } else {
            // SAFETY: as in `get`, borrowed mutably.
            unsafe { &mut *at.cast::<Box<T>>() }
        }
    }

    /// Moves the value out (freeing its box, if any).
    #[inline]
    pub(crate) fn into_inner(self) -> T {
        let this = ManuallyDrop::new(self);
        let at = this.bytes.as_ptr();
        if Self::INLINE {
            // SAFETY: `new` wrote a `T`; read once, and `self` is not
            // dropped.
            unsafe { at.cast::<T>().read() }
        } else {
            // SAFETY: `new` wrote a `Box<T>`; read once, as above.
            *unsafe { at.cast::<Box<T>>().read() }
        }
    }
}

impl<T, const N: usize> Drop for SmallBox<T, N> {
    fn drop(&mut self) {
        let at = self.bytes.as_mut_ptr();
        if Self::INLINE {
            // SAFETY: `new` wrote a `T`, dropped once, here.
            unsafe { at.cast::<T>().drop_in_place() }
        } else {
            // SAFETY: `new` wrote a `Box<T>`, dropped once, here.
            unsafe { at.cast::<Box<T>>().drop_in_place() }
        }
    }
}

#[cfg(all(test, not(fenceline_loom)))]
mod tests {
    use std::sync::atomic::{AtomicUsize, Ordering};
    use std::sync::Arc;

    use super::SmallBox;

    /// Counts its drops.
    struct Counted(Arc<AtomicUsize>, #[allow(dead_code)] [u64; 8]);
    impl Drop for Counted {
        fn drop(&mut self) {
            self.0.fetch_add(1, Ordering::Relaxed);
        }
    }

    #[test]
    fn small_values_stay_in_place_and_large_ones_are_boxed() {
        const { assert!(SmallBox::<[u64; 8], 64>::INLINE) };
        const { assert!(!SmallBox::<[u64; 9], 64>::INLINE) };
        #[repr(align(32))]
        struct Overaligned(#[allow(dead_code)] u8);
        const { assert!(!SmallBox::<Overaligned, 64>::INLINE) };
        assert_eq!(std::mem::size_of::<SmallBox<[u64; 100], 64>>(), 64);
    }

    #[test]
    fn get_into_inner_and_drop_in_both_forms() {
        fn check<const N: usize>() {
            let drops = Arc::new(AtomicUsize::new(0));
            let mut b = SmallBox::<Counted, N>::new(Counted(drops.clone(), [7; 8]));
            assert_eq!(b.get().1[3], 7);
            b.get_mut().1[3] = 9;
            let v = b.into_inner();
            assert_eq!(v.1[3], 9);
            assert_eq!(drops.load(Ordering::Relaxed), 0, "moved out, not dropped");
            drop(v);
            assert_eq!(drops.load(Ordering::Relaxed), 1);
            drop(SmallBox::<Counted, N>::new(Counted(drops.clone(), [0; 8])));
            assert_eq!(drops.load(Ordering::Relaxed), 2, "dropped once");
        }
        check::<80>(); // in place (72 bytes)
        check::<16>(); // boxed
    }

    #[test]
    fn closures_of_both_forms_run() {
        let small = [1u64; 2];
        let large = [1u64; 32];
        let a = SmallBox::<_, 32>::new(move || small.iter().sum::<u64>());
        let b = SmallBox::<_, 32>::new(move || large.iter().sum::<u64>());
        let forms = (
            SmallBox::<[u64; 2], 32>::INLINE,
            SmallBox::<[u64; 32], 32>::INLINE,
        );
        assert_eq!(forms, (true, false));
        assert_eq!((a.get())() + (b.get())(), 34);
    }
}
