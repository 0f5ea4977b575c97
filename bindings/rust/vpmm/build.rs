// The crate's own tests, examples and doctests find libvpmm.so.1 at run time
// without LD_LIBRARY_PATH: vpmm-sys (links = "vpmm") reports the directory it
// linked from as DEP_VPMM_LIB_DIR, and this adds it as a RUNPATH to this
// package's own binaries (`rustc-link-arg` applies to the tests, examples
// and doctests of the package that emits it, never to crates depending on
// vpmm, whose programs find the library as their authors choose). RUNPATH
// (new dtags), unlike RPATH, yields to LD_LIBRARY_PATH.
use std::env;

fn main() {
    println!("cargo:rerun-if-env-changed=DEP_VPMM_LIB_DIR");
    if let Ok(dir) = env::var("DEP_VPMM_LIB_DIR") {
        println!("cargo:rustc-link-arg=-Wl,--enable-new-dtags,-rpath,{}", dir);
    }
}
