//! The ledger from Rust (docs/ledger.md): pools joined through
//! `Config::ledger`, read and budgeted through `Ledger`, a refusal naming
//! who holds what, a pressure round trip (one member's evictable tag paused
//! to admit another, its bytes intact after) and the host budget's disk
//! fallback, on the host backend.
mod common;

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;

use common::{host_config, pattern, PAGE};
use vpmm::{AllocAttrs, Config, DeviceId, Ledger, LedgerFallback, Pool, Recorded, Status, Stream};

/// A fresh ledger name of this process, removed when dropped.
struct Name(String);
impl Name {
    fn new(what: &str) -> Name {
        let n = Name(format!("rs-ledger-{}-{}", std::process::id(), what));
        let _ = Ledger::new(&n.0).unwrap().remove();
        n
    }
}
impl Drop for Name {
    fn drop(&mut self) {
        let _ = Ledger::new(&self.0).unwrap().remove();
    }
}

fn member(name: &str) -> Pool {
    Pool::new(&host_config(256).ledger(name).unwrap()).expect("a member pool")
}

#[test]
fn members_share_the_budget_and_a_refusal_names_the_holder() {
    let name = Name::new("budget");
    let a = member(&name.0);
    let b = member(&name.0);
    assert_eq!(a.config().unwrap().get_ledger().as_deref(), Some(name.0.as_str()));
    let ledger = Ledger::new(&name.0).unwrap();
    ledger.set_budget(0, 16 * PAGE).unwrap();
    let held = a.alloc(10 * PAGE).unwrap();
    let info = ledger.read(0).unwrap();
    assert_eq!((info.budget_bytes, info.admitted_bytes, info.n_members), (16 * PAGE, 10 * PAGE, 2));
    let pid = std::process::id() as i32;
    assert!(info.members.iter().all(|m| m.pid == pid && m.device == 0 && !m.corrupt));
    assert_eq!(info.members.iter().map(|m| m.mapped_bytes).sum::<u64>(), 10 * PAGE);

    let e = b.alloc(8 * PAGE).unwrap_err();
    assert_eq!(e.status(), Status::OutOfMemory);
    assert!(e.message().contains(&format!("pid {}", pid)), "{}", e.message());
    let info = ledger.read(0).unwrap();
    assert_eq!(info.admitted_bytes, 10 * PAGE, "nothing over the budget");
    let asker = info.members.iter().find(|m| m.n_refused > 0).expect("the refused member");
    assert!(asker.n_pressure_asked >= 1, "it asked the other member: {:?}", asker);
    assert!(info.n_pressure_requests >= 1);

    drop(held);
    a.trim(0).unwrap(); // the cached pages go back to the ledger
    let _now = b.alloc(8 * PAGE).unwrap();
    assert_eq!(ledger.read(0).unwrap().admitted_bytes, 8 * PAGE);
}

#[test]
fn pressure_pauses_an_evictable_tag_to_admit_another_member() {
    let name = Name::new("pressure");
    let trainer = member(&name.0);
    let engine = member(&name.0);
    let ledger = Ledger::new(&name.0).unwrap();
    ledger.set_budget(0, 16 * PAGE).unwrap();
    let heard = Arc::new(AtomicUsize::new(0));
    let h = heard.clone();
    trainer
        .set_pressure_callback(move |_, p| {
            if p.under_pressure {
                h.fetch_add(1, Ordering::SeqCst);
            }
        })
        .unwrap();
    let attrs = AllocAttrs::new().tag("weights").host_backup(true);
    let mut weights = trainer.alloc_with(12 * PAGE, Stream::DEFAULT, &attrs).unwrap();
    let want = pattern(3, (12 * PAGE) as usize);
    unsafe { weights.host_slice_mut() }.copy_from_slice(&want);
    trainer.set_ledger_evictable(&["weights"]).unwrap();
    assert_eq!(ledger.read(0).unwrap().members.iter().map(|m| m.n_evictable_tags).max(), Some(1));

    let mut kv = engine.alloc(10 * PAGE).unwrap(); // 12 + 10 > 16: the trainer's weights go
    unsafe { kv.host_slice_mut() }.copy_from_slice(&pattern(4, (10 * PAGE) as usize));
    assert!(heard.load(Ordering::SeqCst) >= 1, "the trainer heard of the pressure");
    assert_eq!(trainer.tag_stats(Some("weights")).unwrap().paused_bytes, 12 * PAGE);
    assert!(ledger.read(0).unwrap().admitted_bytes <= 16 * PAGE);

    assert_eq!(unsafe { kv.host_slice() }, &pattern(4, (10 * PAGE) as usize)[..]);
    drop(kv);
    engine.trim(0).unwrap();
    assert!(trainer.resume(Some("weights")).unwrap());
    assert_eq!(unsafe { weights.host_slice() }, &want[..]);
    assert!(trainer.set_ledger_evictable(&["bad,tag"]).is_err());
    trainer.set_ledger_evictable(&[]).unwrap();
}

#[test]
fn the_host_budget_falls_back_to_disk_where_the_member_allowed_it() {
    let name = Name::new("fallback");
    let pool = member(&name.0);
    let ledger = Ledger::new(&name.0).unwrap();
    ledger.set_host_budget(2 * PAGE).unwrap();
    let attrs = AllocAttrs::new().tag("kv").host_backup(true);
    let mut kv = pool.alloc_with(4 * PAGE, Stream::DEFAULT, &attrs).unwrap();
    let want = pattern(9, (4 * PAGE) as usize);
    unsafe { kv.host_slice_mut() }.copy_from_slice(&want);
    let e = pool.pause(Some("kv")).unwrap_err();
    assert_eq!(e.status(), Status::OutOfMemory);
    assert!(e.message().contains("host budget"), "{}", e.message());

    let dir = std::env::temp_dir().join(format!("rs-ledger-disk-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let cdir = std::ffi::CString::new(dir.to_str().unwrap()).unwrap();
    // SAFETY: a valid pool and a NUL-terminated path (the library copies it).
    assert_eq!(unsafe { vpmm::sys::vpmm_pool_set_backup_dir(pool.as_raw(), cdir.as_ptr()) }, vpmm::sys::VPMM_OK);
    pool.set_ledger_fallback(LedgerFallback::Disk).unwrap();
    assert!(pool.pause(Some("kv")).unwrap());
    let st = pool.stats();
    assert_eq!(st.backup_disk_bytes, 4 * PAGE);
    assert_eq!(ledger.read(0).unwrap().host_admitted_bytes, 0);
    assert!(pool.resume(Some("kv")).unwrap());
    assert_eq!(unsafe { kv.host_slice() }, &want[..]);
    drop(kv);
    drop(pool);
    let _ = std::fs::remove_dir_all(&dir);

    let solo = Pool::new(&host_config(64)).unwrap();
    assert_eq!(solo.set_ledger_fallback(LedgerFallback::Disk).unwrap_err().status(), Status::WrongState);
    assert_eq!(solo.set_ledger_evictable(&["kv"]).unwrap_err().status(), Status::WrongState);
}

#[test]
fn bad_names_are_refused() {
    assert_eq!(Ledger::new("a\0b").unwrap_err().status(), Status::InvalidArgument);
    let missing = Ledger::new(&format!("rs-ledger-{}-none", std::process::id())).unwrap();
    assert_eq!(missing.read(0).unwrap_err().status(), Status::InvalidArgument);
    assert_eq!(Ledger::new("../etc").unwrap().read(0).unwrap_err().status(), Status::InvalidArgument);
    assert_eq!(Config::defaults().ledger("../etc").unwrap_err().status(), Status::InvalidArgument);
    assert_eq!(Config::defaults().ledger("").unwrap().get_ledger(), None);
}

#[test]
fn members_show_their_own_ordinal_and_their_device_identity() {
    let name = Name::new("ordinal");
    // The host backend's identity mixes the ordinal into the boot id:
    // ordinals 0 and 2 are two devices here (one GPU's UUID would be one).
    let a = member(&name.0);
    let b = Pool::new(&host_config(256).device(2).ledger(&name.0).unwrap()).unwrap();
    let ledger = Ledger::new(&name.0).unwrap();
    let info = ledger.read(0).unwrap();
    assert_eq!(info.n_devices, 2);
    let ordinals: Vec<_> = info.members.iter().map(|m| m.ordinal).collect();
    assert_eq!(ordinals, [Recorded::Known(0), Recorded::Known(2)]);
    let ids: Vec<DeviceId> = info.members.iter().map(|m| m.device_id.known().expect("an identity")).collect();
    assert_ne!(ids[0], ids[1]);
    assert_eq!(info.device_id, Some(Recorded::Known(ids[0])));
    assert_eq!(ledger.read(1).unwrap().device_id, Some(Recorded::Known(ids[1])));
    assert_eq!(ledger.read(5).unwrap().device_id, None, "no device has index 5");
    // Ordinal 0 leaves the boot id as it is; shown, it is the boot id's text.
    let boot = std::fs::read_to_string("/proc/sys/kernel/random/boot_id").unwrap();
    assert_eq!(ids[0].to_string(), boot.trim());
    let shown = DeviceId::from_words(0x0011_2233_4455_6677, 0x8899_aabb_ccdd_eeff).to_string();
    assert_eq!(shown, "00112233-4455-6677-8899-aabbccddeeff", "bytes 0-7 are hi's, big-endian");
    drop(b);
    drop(a);
}
