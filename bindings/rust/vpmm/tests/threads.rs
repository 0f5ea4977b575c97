//! A Pool shared by threads (Send + Sync): concurrent allocations, frees,
//! pauses and stats keep the pool's invariants; buffers move across threads.
mod common;

use std::sync::Arc;

use common::{host_pool, pattern, PAGE};
use vpmm::{AllocAttrs, Pool, Stream};

fn assert_send_sync<T: Send + Sync>() {}

#[test]
fn pool_buffer_and_reservation_are_send_and_sync() {
    assert_send_sync::<Pool>();
    assert_send_sync::<vpmm::Buffer<'static>>();
    assert_send_sync::<vpmm::Reservation<'static>>();
    assert_send_sync::<vpmm::HostStream>();
    assert_send_sync::<Stream>();
}

#[test]
fn scoped_threads_allocate_write_and_free_concurrently() {
    let pool = host_pool();
    std::thread::scope(|s| {
        for t in 0..4u8 {
            let pool = &pool;
            s.spawn(move || {
                let stream = vpmm::HostStream::new().unwrap();
                for i in 0..40u64 {
                    let size = (1 + (i + u64::from(t)) % 3) * PAGE / 2 + 100;
                    let mut b = pool.alloc_on(size, stream.stream()).unwrap();
                    let want = pattern(t.wrapping_add(i as u8), size as usize);
                    unsafe { b.host_slice_mut() }.copy_from_slice(&want);
                    assert_eq!(unsafe { b.host_slice() }, &want[..]);
                    if i % 10 == 0 {
                        let _ = pool.stats();
                        pool.check().unwrap();
                    }
                }
                stream.synchronize().unwrap();
            });
        }
    });
    let st = pool.stats();
    assert_eq!(st.n_live, 0);
    assert_eq!(st.n_malloc, 160);
    assert_eq!(st.n_free, 160);
    pool.check().unwrap();
}

#[test]
fn arc_pool_with_pauses_racing_allocations() {
    let pool = Arc::new(host_pool());
    let workers: Vec<_> = (0..3)
        .map(|t| {
            let pool = Arc::clone(&pool);
            std::thread::spawn(move || {
                let tag = format!("worker{}", t);
                for _ in 0..20 {
                    let mut b = pool
                        .alloc_with(PAGE, Stream::DEFAULT, &AllocAttrs::new().tag(&tag).host_backup(true))
                        .unwrap();
                    unsafe { b.host_slice_mut() }.copy_from_slice(&pattern(t, PAGE as usize));
                    pool.pause(Some(&tag)).unwrap();
                    assert!(pool.resume(Some(&tag)).unwrap());
                    assert_eq!(unsafe { b.host_slice() }, &pattern(t, PAGE as usize)[..]);
                }
            })
        })
        .collect();
    for w in workers {
        w.join().unwrap();
    }
    assert_eq!(pool.stats().n_live, 0);
    pool.check().unwrap();
}

#[test]
fn a_buffer_is_freed_on_another_thread() {
    let pool = host_pool();
    let buf = pool.alloc(PAGE).unwrap();
    std::thread::scope(|s| {
        s.spawn(move || drop(buf));
    });
    assert_eq!(pool.stats().n_free, 1);
}
