//! cudarc, which dlopens "libcuda.so", runs against the simulated driver once
//! the cdylib has been loaded by path: the soname makes glibc hand it back.
//! This test does not link the crate's rlib, so every call goes through
//! cudarc's loader into the shared library.

use cudarc::driver::result::{self, stream::StreamKind, DriverError};
use cudarc::driver::sys::{self, cudaError_enum::*};
use std::path::PathBuf;

/// The cdylib cargo built next to this test's executable (`target/<profile>/`).
fn sim_library() -> PathBuf {
    let exe = std::env::current_exe().expect("test executable path");
    let deps = exe.parent().expect("test executable has a directory");
    [
        deps.join("libfenceline_cudasim.so"),
        deps.join("../libfenceline_cudasim.so"),
    ]
    .into_iter()
    .find(|p| p.exists())
    .expect("libfenceline_cudasim.so next to the test executable")
}

#[test]
fn cudarc_runs_against_the_preloaded_simulator() -> Result<(), DriverError> {
    // SAFETY: the simulator's initializers are plain Rust statics.
    let lib = unsafe { libloading::Library::new(sim_library()) }.expect("loading the simulator");
    // SAFETY: the simulator exports this symbol with this type.
    let misuse_count = unsafe {
        *lib.get::<unsafe extern "C" fn() -> u64>(b"fenceline_sim_misuse_count")
            .unwrap()
    };

    result::init()?;
    let dev = result::device::get(0)?;
    assert_eq!(result::device::get_name(dev)?, "fenceline simulated GPU");
    let mut version = 0;
    // SAFETY: valid out-pointer.
    assert_eq!(
        unsafe { sys::cuDriverGetVersion(&mut version) },
        CUDA_SUCCESS
    );
    assert_eq!(version, 12080);

    // SAFETY: the context, stream, event and memory are used only while alive;
    // `src` and `dst` outlive the stream synchronize.
    unsafe {
        let ctx = result::primary_ctx::retain(dev)?;
        result::ctx::set_current(ctx)?;
        let stream = result::stream::create(StreamKind::NonBlocking)?;
        let d = result::malloc_sync(8)?;
        let src = [1u8, 2, 3, 4, 5, 6, 7, 8];
        let mut dst = [0u8; 8];
        result::memcpy_htod_async(d, &src, stream)?;
        result::memcpy_dtoh_async(&mut dst, d, stream)?;
        result::stream::synchronize(stream)?;
        assert_eq!(dst, src);

        let event = result::event::create(sys::CUevent_flags::CU_EVENT_DISABLE_TIMING)?;
        let before = misuse_count();
        let waited = result::stream::wait_event(
            stream,
            event,
            sys::CUevent_wait_flags::CU_EVENT_WAIT_DEFAULT,
        );
        assert_eq!(waited, Err(DriverError(CUDA_ERROR_ILLEGAL_STATE)));
        assert_eq!(misuse_count(), before + 1);

        result::event::destroy(event)?;
        result::free_sync(d)?;
        result::stream::destroy(stream)?;
    }
    Ok(())
}
