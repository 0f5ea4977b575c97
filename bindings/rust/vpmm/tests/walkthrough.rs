//! The seed walkthrough, cases A-D (docs/design.md; traces/walkthrough_*.trace;
//! tests/unit/test_walkthrough.cpp): +10 > +1 > -10 > +4 > +11 pages on one
//! stream from PAGES = 11 + X initial pages, with one physical handle per
//! page. The openvm VPMM expectations: 22 / 18 / 15 / 12 preallocated pages
//! end with 22 / 18 / 16 / 16 mapped pages, in the seed's layouts, and the
//! data of the surviving allocations is intact after defragmentation.
mod common;

use common::{host_config, layout, pattern, PAGE};
use vpmm::{Pool, Stream};

const VA_PAGES: u64 = 64;

struct Outcome {
    layout: String,
    mapped_pages: u64,
    n_defrag: u64,
    n_grow: u64,
}

fn run_case(initial_pages: u64, stream: Stream) -> Outcome {
    let config = host_config(VA_PAGES).initial_pages(initial_pages).max_handle_size(PAGE);
    let pool = Pool::new(&config).unwrap();
    assert_eq!(pool.stats().mapped_bytes, initial_pages * PAGE);

    let a10 = pool.alloc_on(10 * PAGE, stream).unwrap();
    let mut a1 = pool.alloc_on(PAGE, stream).unwrap();
    unsafe { a1.host_slice_mut() }.copy_from_slice(&pattern(1, PAGE as usize));
    drop(a10);
    let mut a4 = pool.alloc_on(4 * PAGE, stream).unwrap();
    unsafe { a4.host_slice_mut() }.copy_from_slice(&pattern(4, 4 * PAGE as usize));
    pool.check().unwrap();
    let mut a11 = pool.alloc_on(11 * PAGE, stream).unwrap();
    // Every page of the new allocation is writable.
    unsafe { a11.host_slice_mut() }.copy_from_slice(&pattern(11, 11 * PAGE as usize));
    pool.check().unwrap();

    assert_eq!(unsafe { a1.host_slice() }, &pattern(1, PAGE as usize)[..]);
    assert_eq!(unsafe { a4.host_slice() }, &pattern(4, 4 * PAGE as usize)[..]);
    assert_eq!(unsafe { a11.host_slice() }, &pattern(11, 11 * PAGE as usize)[..]);
    let stats = pool.stats();
    assert_eq!(stats.live_bytes, 16 * PAGE);
    assert_eq!(stats.requested_bytes, 16 * PAGE);
    let out = Outcome {
        layout: layout(&pool),
        mapped_pages: stats.mapped_bytes / PAGE,
        n_defrag: stats.n_defrag,
        n_grow: stats.n_grow,
    };
    drop((a1, a4, a11));
    assert_eq!(pool.stats().live_bytes, 0);
    pool.check().unwrap();
    out
}

#[test]
fn case_a_22_pages_best_fit_no_defrag() {
    let o = run_case(22, Stream::DEFAULT);
    assert_eq!(o.layout, "[4][-6][1][11][*42]");
    assert_eq!(o.mapped_pages, 22);
    assert_eq!((o.n_defrag, o.n_grow), (0, 0));
}

#[test]
fn case_b_18_pages_defragment_without_growth() {
    let o = run_case(18, Stream::DEFAULT);
    assert_eq!(o.layout, "[*10][1][4][11][-2][*36]");
    assert_eq!(o.mapped_pages, 18);
    assert_eq!((o.n_defrag, o.n_grow), (1, 0));
}

#[test]
fn case_c_15_pages_defragment_then_grow_one_page() {
    let o = run_case(15, Stream::DEFAULT);
    assert_eq!(o.layout, "[*10][1][4][11][*38]");
    assert_eq!(o.mapped_pages, 16);
    assert_eq!((o.n_defrag, o.n_grow), (1, 1));
}

#[test]
fn case_d_12_pages_defragment_leftover_and_grow() {
    let o = run_case(12, Stream::DEFAULT);
    assert_eq!(o.layout, "[4][*6][1][11][*42]");
    assert_eq!(o.mapped_pages, 16);
    assert_eq!((o.n_defrag, o.n_grow), (1, 1));
}

#[test]
fn cases_on_a_host_stream_match_the_default_stream() {
    let stream = vpmm::HostStream::new().unwrap();
    for initial in [22, 18, 15, 12] {
        let a = run_case(initial, Stream::DEFAULT);
        let b = run_case(initial, stream.stream());
        assert_eq!(a.layout, b.layout);
        assert_eq!(a.mapped_pages, b.mapped_pages);
    }
}
