//! Gives the cdylib the soname `libcuda.so`: once a test preloads it by absolute
//! path, glibc hands it back for `dlopen("libcuda.so")` (cudarc's loader) because
//! the sonames match, so no real driver is ever looked for.

fn main() {
    println!("cargo:rustc-cdylib-link-arg=-Wl,-soname,libcuda.so");
    println!("cargo:rerun-if-changed=build.rs");
}
