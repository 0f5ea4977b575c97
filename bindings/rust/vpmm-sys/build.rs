// Finds libvpmm for the linker, in this order:
//  1. the `pkg-config` command (`pkg-config --libs-only-L vpmm`), the
//    way an installed libvpmm (`meson install`) is found; skipped when
//    `VPMM_NO_PKG_CONFIG` is set (the pkg-config crate's convention), so a
//    test of the in-tree build is not handed an older installed copy;
//  2. the directory named by `VPMM_LIB_DIR`;
//  3. the in-tree build directory `build/` of the libvpmm checkout this
//    crate sits in.
// It links `-l dylib=vpmm`, i.e. libvpmm.so, whose SONAME makes the program
// load libvpmm.so.1 at run time (from the loader's path, LD_LIBRARY_PATH, or
// an rpath the final program sets).
use std::env;
use std::path::{Path, PathBuf};
use std::process::Command;

/// The -L directories pkg-config gives for vpmm (none when the library is in
/// a directory the linker searches anyway); None when pkg-config or vpmm.pc
/// is missing. --libs-only-L honours PKG_CONFIG_SYSROOT_DIR (a DESTDIR
/// install), which --variable=libdir would not.
fn from_pkg_config() -> Option<Vec<PathBuf>> {
    if env::var_os("VPMM_NO_PKG_CONFIG").is_some() {
        return None;
    }
    let out = Command::new(env::var("PKG_CONFIG").unwrap_or_else(|_| "pkg-config".to_string()))
        .args(["--libs-only-L", "vpmm"])
        .output()
        .ok()?;
    if !out.status.success() {
        return None;
    }
    let text = String::from_utf8(out.stdout).ok()?;
    Some(text.split_whitespace().filter_map(|f| f.strip_prefix("-L")).map(PathBuf::from).collect())
}

fn from_env() -> Option<PathBuf> {
    env::var_os("VPMM_LIB_DIR").map(PathBuf::from)
}

fn in_tree() -> Option<PathBuf> {
    let manifest = PathBuf::from(env::var_os("CARGO_MANIFEST_DIR")?);
    let build = manifest.join("../../../build");
    if build.join("libvpmm.so").exists() {
        let build = build.canonicalize().unwrap_or(build);
        // Not silent: a program meant for an installed libvpmm whose
        // PKG_CONFIG_PATH was forgotten would otherwise link the checkout's.
        println!(
            "cargo:warning=libvpmm: not found through pkg-config (for an installed copy set \
             PKG_CONFIG_PATH=PREFIX/lib/x86_64-linux-gnu/pkgconfig) nor VPMM_LIB_DIR: linking the checkout's {}",
            build.display()
        );
        Some(build)
    } else {
        None
    }
}

fn main() {
    for var in ["VPMM_LIB_DIR", "VPMM_NO_PKG_CONFIG", "PKG_CONFIG", "PKG_CONFIG_PATH"] {
        println!("cargo:rerun-if-env-changed={}", var);
    }
    println!("cargo:rerun-if-changed=build.rs");
    let dirs = from_pkg_config()
        .or_else(|| from_env().map(|d| vec![d]))
        .or_else(|| in_tree().map(|d| vec![d]));
    match dirs {
        Some(dirs) => {
            for dir in &dirs {
                if !Path::new(dir).join("libvpmm.so").exists() {
                    println!("cargo:warning=no libvpmm.so in {}", dir.display());
                }
                println!("cargo:rustc-link-search=native={}", dir.display());
            }
            // DEP_VPMM_LIB_DIR for the build scripts of dependent crates, and
            // a RUNPATH for this package's own tests and doctests (see vpmm/build.rs).
            if let Some(dir) = dirs.first() {
                println!("cargo:lib_dir={}", dir.display());
                println!("cargo:rustc-link-arg=-Wl,--enable-new-dtags,-rpath,{}", dir.display());
            }
        }
        None => println!(
            "cargo:warning=libvpmm not found through pkg-config, VPMM_LIB_DIR or ../../../build; \
             relying on the linker's default search path"
        ),
    }
    println!("cargo:rustc-link-lib=dylib=vpmm");
}
