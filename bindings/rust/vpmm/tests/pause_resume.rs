//! Pause and resume: physical memory goes back and comes again at the same
//! addresses; host-backup allocations keep their bytes, byte for byte.
mod common;

use common::{host_pool, pattern, PAGE};
use vpmm::{AllocAttrs, Region, Stream};

#[test]
fn pause_and_resume_with_backup_keep_every_byte() {
    let pool = host_pool();
    let size = 3 * PAGE + 1234;
    let attrs = AllocAttrs::new().tag("kv").host_backup(true);
    let mut kv = pool.alloc_with(size, Stream::DEFAULT, &attrs).unwrap();
    let mut other = pool.alloc_with(2 * PAGE, Stream::DEFAULT, &attrs).unwrap();
    let keep = pool.alloc(PAGE).unwrap(); // untagged: never paused
    let want = pattern(7, size as usize);
    unsafe { kv.host_slice_mut() }.copy_from_slice(&want);
    unsafe { other.host_slice_mut() }.copy_from_slice(&pattern(8, 2 * PAGE as usize));
    let (addr, mapped) = (kv.addr(), pool.stats().mapped_bytes);

    assert_eq!(pool.pause_count(Some("kv")).unwrap(), 2);
    let st = pool.stats();
    assert_eq!(st.paused_bytes, 6 * PAGE); // page-rounded
    assert!(st.backup_bytes >= size + 2 * PAGE);
    // Tagged allocations own whole handles: exactly their pages go back.
    assert_eq!(st.mapped_bytes, mapped - 6 * PAGE);
    let ts = pool.tag_stats(Some("kv")).unwrap();
    assert_eq!((ts.n_live, ts.n_paused, ts.paused_bytes), (0, 2, 6 * PAGE));
    // Nothing left to pause: false, not an error.
    assert!(!pool.pause(Some("kv")).unwrap());

    assert!(pool.resume(Some("kv")).unwrap());
    assert!(!pool.resume(Some("kv")).unwrap());
    assert_eq!(kv.addr(), addr);
    assert_eq!(unsafe { kv.host_slice() }, &want[..]);
    assert_eq!(unsafe { other.host_slice() }, &pattern(8, 2 * PAGE as usize)[..]);
    let ts = pool.tag_stats(Some("kv")).unwrap();
    assert_eq!((ts.n_live, ts.n_paused, ts.backup_bytes), (2, 0, 0));
    assert_eq!(pool.stats().paused_bytes, 0);
    pool.check().unwrap();
    drop((kv, other, keep));
}

#[test]
fn pause_without_backup_releases_memory_and_keeps_the_address() {
    let pool = host_pool();
    let buf = pool.alloc_with(4 * PAGE, Stream::DEFAULT, &AllocAttrs::new().tag("scratch")).unwrap();
    let addr = buf.addr();
    assert!(pool.pause(Some("scratch")).unwrap());
    assert_eq!(pool.stats().backup_bytes, 0);
    pool.trim(0).unwrap();
    assert_eq!(pool.stats().mapped_bytes, 0);
    assert!(pool.resume(None).unwrap());
    assert_eq!(buf.addr(), addr);
    assert_eq!(pool.lookup(buf.as_ptr()).unwrap(), (buf.as_ptr(), 4 * PAGE));
    assert_eq!(pool.stats().mapped_bytes, 4 * PAGE);
}

#[test]
fn region_scope_tags_allocations_for_pause_all() {
    let pool = host_pool();
    let mut tagged = {
        let _scope = Region::push("scoped", true).unwrap();
        pool.alloc(PAGE).unwrap()
    };
    let untagged = pool.alloc(PAGE).unwrap(); // after the scope closed
    unsafe { tagged.host_slice_mut() }.copy_from_slice(&pattern(3, PAGE as usize));
    assert_eq!(pool.tag_stats(Some("scoped")).unwrap().n_live, 1);
    assert_eq!(pool.tag_stats(None).unwrap().n_live, 1);
    assert_eq!(pool.pause_count(None).unwrap(), 1);
    assert_eq!(pool.resume_count(None).unwrap(), 1);
    assert_eq!(unsafe { tagged.host_slice() }, &pattern(3, PAGE as usize)[..]);
    drop((tagged, untagged));
}
