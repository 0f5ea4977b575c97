//! A small per-device memory manager over libvpmm, of the kind a Rust GPU
//! program (a STARK prover's backend, say) writes: typed device buffers from
//! one pool per device, a tagged arena of intermediate buffers that is paused
//! (with host backup) while the device is lent to another phase and resumed
//! at the same addresses, and the pool's stats printed at the end.
//!
//! Run it on the host backend (no GPU needed), from bindings/rust after
//! scripts/test.sh (or `ninja -C build`) built ../../build:
//!   VPMM_BACKEND=host cargo run --offline --example memory_manager
//! No LD_LIBRARY_PATH: the crates' own examples get a RUNPATH to the library
//! directory vpmm-sys's build.rs found (pkg-config, VPMM_LIB_DIR or build/).
use std::marker::PhantomData;
use std::mem::size_of;

use vpmm::{AllocAttrs, Buffer, Config, Pool, Stream};

/// A device buffer of `len` values of `T`, freed on drop.
struct DeviceBuffer<'p, T> {
    buf: Buffer<'p>,
    len: usize,
    _t: PhantomData<T>,
}

impl<'p, T: Copy> DeviceBuffer<'p, T> {
    fn device_ptr(&self) -> *mut T {
        self.buf.as_ptr() as *mut T
    }

    fn len(&self) -> usize {
        self.len
    }
}

/// One device's memory: a pool and the stream its work runs on.
struct MemoryManager {
    pool: Pool,
    stream: Stream,
}

impl MemoryManager {
    /// The environment picks the backend and sizes (VPMM_BACKEND,
    /// VPMM_MEMORY_LIMIT, ...); the device comes from the caller.
    fn new(device: i32) -> vpmm::Result<MemoryManager> {
        let pool = Pool::new(&Config::from_env().device(device))?;
        Ok(MemoryManager { pool, stream: Stream::DEFAULT })
    }

    /// A long-lived buffer (not pausable).
    fn alloc<T: Copy>(&self, len: usize) -> vpmm::Result<DeviceBuffer<'_, T>> {
        let buf = self.pool.alloc_on((len * size_of::<T>()) as u64, self.stream)?;
        Ok(DeviceBuffer { buf, len, _t: PhantomData })
    }

    /// A buffer of the named arena: paused and resumed with it, its bytes
    /// kept on the host meanwhile.
    fn alloc_in<T: Copy>(&self, arena: &str, len: usize) -> vpmm::Result<DeviceBuffer<'_, T>> {
        let attrs = AllocAttrs::new().tag(arena).host_backup(true);
        let buf = self.pool.alloc_with((len * size_of::<T>()) as u64, self.stream, &attrs)?;
        Ok(DeviceBuffer { buf, len, _t: PhantomData })
    }

    /// Gives the arena's device memory back; true if anything was paused.
    fn pause_arena(&self, arena: &str) -> vpmm::Result<bool> {
        self.pool.pause(Some(arena))
    }

    /// Brings the arena back at the same addresses.
    fn resume_arena(&self, arena: &str) -> vpmm::Result<bool> {
        self.pool.resume(Some(arena))
    }

    fn report(&self, when: &str) {
        let s = self.pool.stats();
        println!(
            "{:<16} mapped {:>6} KiB  live {:>6} KiB  paused {:>6} KiB  backup {:>6} KiB  allocations {}",
            when,
            s.mapped_bytes >> 10,
            s.live_bytes >> 10,
            s.paused_bytes >> 10,
            s.backup_bytes >> 10,
            s.n_live
        );
    }
}

fn main() -> vpmm::Result<()> {
    let mm = MemoryManager::new(0)?;
    println!("libvpmm {} on the {} backend", vpmm::version(), mm.pool.backend_name());

    let trace: DeviceBuffer<u64> = mm.alloc(1 << 16)?;
    let quotient: DeviceBuffer<u32> = mm.alloc_in("prover", 1 << 18)?;
    let twiddles: DeviceBuffer<u64> = mm.alloc_in("prover", 1 << 15)?;
    mm.report("allocated");

    let addr = quotient.device_ptr();
    if mm.pause_arena("prover")? {
        mm.report("arena paused");
    }
    // ... the device runs another phase here ...
    mm.resume_arena("prover")?;
    assert_eq!(quotient.device_ptr(), addr, "resumed at the same address");
    mm.report("arena resumed");

    println!(
        "buffers: trace {} x u64, quotient {} x u32, twiddles {} x u64",
        trace.len(),
        quotient.len(),
        twiddles.len()
    );
    drop((trace, quotient, twiddles));
    mm.pool.trim(0)?;
    mm.report("freed + trimmed");
    Ok(())
}
