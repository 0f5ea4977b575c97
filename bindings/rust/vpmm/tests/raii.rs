//! RAII: buffers free on drop on their own stream, reservations release,
//! region scopes pop in nesting order, pool-made streams are destroyed, and
//! everything that borrows a pool is gone before the pool.
mod common;

use common::{host_pool, PAGE};
use vpmm::{AllocAttrs, HostStream, Region, Stream};

#[test]
fn buffers_free_on_drop_in_any_order() {
    let pool = host_pool();
    let a = pool.alloc(PAGE).unwrap();
    let b = pool.alloc(2 * PAGE).unwrap();
    let c = pool.alloc(3 * PAGE).unwrap();
    assert_eq!(pool.stats().n_live, 3);
    drop(b);
    assert_eq!(pool.stats().live_bytes, 4 * PAGE);
    drop(a);
    assert_eq!(pool.stats().live_bytes, 3 * PAGE);
    let raw = c.into_raw(); // ownership leaves the Buffer
    assert_eq!(pool.stats().n_live, 1);
    unsafe { pool.free(raw, Stream::DEFAULT) }.unwrap();
    assert_eq!(pool.stats().n_live, 0);
    assert_eq!(pool.stats().n_free, 3);
}

#[test]
fn a_buffer_is_freed_on_its_own_stream() {
    let pool = host_pool();
    let s = HostStream::new().unwrap();
    let buf = pool.alloc_on(2 * PAGE, s.stream()).unwrap();
    let addr = buf.addr();
    {
        let _hold = s.hold().unwrap();
        drop(buf);
        // Freed in the order of `s`, which is held: the region is free but
        // its event is pending, so it carries `s` and is not harvested.
        let regions = pool.regions().unwrap();
        let freed = regions.iter().find(|r| r.va == addr).unwrap();
        assert_eq!(freed.kind, vpmm::RegionKind::Free);
        assert_eq!(freed.stream, s.stream());
        // The same stream may reuse it at once, in stream order.
        let again = pool.alloc_on(2 * PAGE, s.stream()).unwrap();
        assert_eq!(again.addr(), addr);
    }
    s.synchronize().unwrap();
}

#[test]
fn reservations_release_on_drop() {
    let pool = host_pool();
    {
        let r = pool.reserve(8 * PAGE).unwrap();
        let buf = pool.alloc_with(2 * PAGE, Stream::DEFAULT, &AllocAttrs::new().reservation(&r)).unwrap();
        assert_eq!(pool.stats().reserved_bytes, 8 * PAGE);
        assert_eq!(r.info().unwrap(), (8 * PAGE, 2 * PAGE));
        drop(buf);
        assert_eq!(r.used().unwrap(), 0);
    }
    assert_eq!(pool.stats().reserved_bytes, 0);
    let r = pool.reserve(PAGE).unwrap();
    r.release().unwrap();
    assert_eq!(pool.stats().reserved_bytes, 0);
}

#[test]
fn region_scopes_nest_and_pop_in_reverse_order() {
    let pool = host_pool();
    let outer = Region::push("outer", false).unwrap();
    let a = pool.alloc(PAGE).unwrap();
    let inner = Region::push("inner", true).unwrap();
    let b = pool.alloc(PAGE).unwrap();
    drop(inner);
    let c = pool.alloc(PAGE).unwrap(); // back in "outer"
    drop(outer);
    let d = pool.alloc(PAGE).unwrap(); // untagged
    assert_eq!(pool.tag_stats(Some("outer")).unwrap().n_live, 2);
    assert_eq!(pool.tag_stats(Some("inner")).unwrap().n_live, 1);
    assert_eq!(pool.tag_stats(None).unwrap().n_live, 3);
    drop((a, b, c, d));
    // No scope is left open on this thread.
    assert_eq!(unsafe { vpmm::sys::vpmm_region_pop() }, vpmm::sys::VPMM_ERR_WRONG_STATE);
}

#[test]
fn pool_streams_and_everything_borrowing_the_pool_drop_first() {
    let pool = host_pool();
    {
        let stream = pool.create_stream().unwrap();
        let _buf = pool.alloc_on(PAGE, stream.stream()).unwrap();
        let _res = pool.reserve(PAGE).unwrap();
        assert_eq!((pool.stats().n_live, pool.stats().reserved_bytes), (1, PAGE));
        // Dropped in reverse order of declaration: the reservation, the
        // buffer (freed on `stream`, still alive), then the stream.
    }
    let st = pool.stats();
    assert_eq!((st.n_live, st.n_free, st.reserved_bytes), (0, 1, 0));
    pool.check().unwrap();
}

#[test]
fn dropping_a_pool_releases_its_memory() {
    let config = common::host_config(64).host_capacity(8 * PAGE);
    for _ in 0..4 {
        // Each pool may take all of the host capacity: only works when the
        // previous pool gave it back on drop.
        let pool = vpmm::Pool::new(&config).unwrap();
        let _a = pool.alloc(8 * PAGE).unwrap();
    }
}

#[test]
fn marked_steps_report_their_driver_time() {
    let pool = host_pool();
    pool.mark_step().unwrap(); // opens the first step
    drop(pool.alloc(4 * PAGE).unwrap()); // grows: driver calls in the step
    pool.mark_step().unwrap();
    let s = pool.stats();
    assert_eq!(s.n_steps, 1);
    assert!(s.last_step_driver_ns > 0);
    assert!(s.last_step_ns >= s.last_step_driver_ns);
    let first = s.last_step_ns;
    drop(pool.alloc(4 * PAGE).unwrap()); // cached: no driver call
    pool.mark_step().unwrap();
    let s = pool.stats();
    assert_eq!((s.n_steps, s.last_step_driver_ns), (2, 0));
    assert_eq!(s.steps_ns, first + s.last_step_ns);
}
