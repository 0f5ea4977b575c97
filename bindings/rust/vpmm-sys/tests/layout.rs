//! The layout of every struct in the checked-in bindings against the layout
//! the loaded library was built with (vpmm_struct_layout/vpmm_struct_field):
//! sizeof, and each field's name, offset and size in declaration order.
//! bindgen's own layout tests (in src/bindings.rs) check the Rust structs
//! against the header as clang saw it; this one checks the header the
//! bindings came from against the library, so a header changed without
//! regenerating the bindings (or a library built from another header) fails.
//! A completeness check makes sure every struct of src/bindings.rs is listed
//! here with all its fields.
use std::ffi::{CStr, CString};
use std::mem::{size_of, MaybeUninit};
use std::ptr::addr_of;
use vpmm_sys::*;

struct RustField {
    name: &'static str,
    offset: usize,
    size: usize,
}

fn pointee_size<T>(_: *const T) -> usize {
    size_of::<T>()
}

macro_rules! rust_layout {
    ($t:ident, [$($f:ident),*]) => {{
        let uninit = MaybeUninit::<$t>::uninit();
        let base = uninit.as_ptr();
        let fields: Vec<RustField> = vec![$(RustField {
            name: stringify!($f),
            // addr_of! never reads the uninitialised memory.
            offset: unsafe { addr_of!((*base).$f) as usize - base as usize },
            size: pointee_size(unsafe { addr_of!((*base).$f) }),
        }),*];
        (stringify!($t), size_of::<$t>(), fields)
    }};
}

fn library_layout(name: &str) -> (usize, Vec<(String, u32, u32)>) {
    let cname = CString::new(name).unwrap();
    let (mut size, mut n) = (0u32, 0u32);
    let st = unsafe { vpmm_struct_layout(cname.as_ptr(), &mut size, &mut n) };
    assert_eq!(st, VPMM_OK, "the library does not describe {}", name);
    let mut fields = Vec::new();
    for i in 0..n {
        let mut f: vpmm_field_info = unsafe { std::mem::zeroed() };
        f.struct_size = size_of::<vpmm_field_info>() as u32;
        assert_eq!(unsafe { vpmm_struct_field(cname.as_ptr(), i, &mut f) }, VPMM_OK);
        let fname = unsafe { CStr::from_ptr(f.name) }.to_str().unwrap().to_string();
        fields.push((fname, f.offset, f.size));
    }
    (size as usize, fields)
}

fn checked() -> Vec<(&'static str, usize, Vec<RustField>)> {
    vec![
        rust_layout!(vpmm_config, [struct_size, backend, device, config_error, page_size, va_size, initial_pages, host_capacity, max_handle_size, small_size, backup_cache_size, memory_limit, memory_limit_fraction, watermark_trigger, watermark_stop, backup_pinned_limit, hip_chunk_size, peer_devices, large_rounding, remap_slack, exportable, view_min_size, driver_budget, placement, budget_clock_us, ledger]),
        rust_layout!(vpmm_alloc_attrs, [struct_size, flags, tag, reservation, backup_dir]),
        rust_layout!(vpmm_tag_stats, [struct_size, reserved0, live_bytes, paused_bytes, backup_bytes, n_live, n_paused, retained_bytes]),
        rust_layout!(vpmm_stats, [struct_size, reserved0, mapped_bytes, reserved_va_bytes, live_bytes, requested_bytes, free_bytes, hole_bytes, zombie_bytes, peak_mapped_bytes, peak_live_bytes, n_malloc, n_free, n_defrag, n_grow, pages_created, bytes_remapped, page_size, handles, handles_created, va_chunks, largest_free_bytes, small_bytes, small_live_bytes, n_small_malloc, n_cross_stream_reuse, n_stream_waits, n_events_recorded, n_zombies_reaped, n_live, paused_bytes, backup_bytes, backup_cache_bytes, n_pause, n_resume, n_trim, bytes_trimmed, capacity_bytes, reserved_bytes, reservation_used_bytes, available_bytes, watermark_trigger_bytes, watermark_stop_bytes, under_pressure, n_oom, n_oom_recovered, backup_pinned_bytes, backup_pageable_bytes, driver_ns, driver_calls, backup_mmap_bytes, backup_disk_bytes, backup_retained_bytes, backup_skipped_bytes, lent_bytes, n_views, view_va_bytes, n_view_malloc, n_view_reuse, handles_moved, n_budget_grow, bytes_budget_grown, n_steps, last_step_ns, last_step_driver_ns, steps_ns, steps_driver_ns]),
        rust_layout!(vpmm_region_info, [struct_size, kind, va, size, chunk_offset, chunk, handles, event_pending, reserved0, id, requested, stream]),
        rust_layout!(vpmm_option_info, [struct_size, kind, name, env, default_text, help, field_offset, field_size]),
        rust_layout!(vpmm_field_info, [struct_size, kind, name, offset, size]),
        rust_layout!(vpmm_api, [struct_size, abi_version, version, abi_version_fn, status_string, last_error, last_error_copy, config_init, config_init_defaults, pool_create, pool_destroy, pool_malloc, pool_free, pool_lookup, pool_stream_synchronize, pool_stream_create, pool_stream_destroy, pool_stream_retire, pool_malloc_ex, region_push, region_pop, pool_pause, pool_pause_ex, pool_resume, pool_resume_ex, pool_trim, pool_tag_stats, pool_reserve, pool_reserve_ex, reservation_info, reservation_release, pool_set_limit, pool_set_oom_callback, pool_set_pressure_callback, pool_stats, pool_dump, pool_visit, pool_dump_text, pool_check, pool_get_config, pool_backend_name, default_pool, torch_malloc, torch_free, option_count, option_get, option_find, struct_layout, struct_field, host_stream_create, host_stream_destroy, host_stream_hold, host_stream_release, host_stream_launch, host_stream_synchronize, pool_layout, pool_backup_lookup, cupy_malloc, cupy_free, backend_info, pool_prepare_backups, tag_scope_push, tag_scope_pop, tag_scope_push_ex, pool_pause_flags, pool_set_backup_dir, pool_export, pool_export_tag, export_entry, export_descriptor, export_send, export_state, export_close, pool_import, import_entry, import_state, import_close, ipc_send, ipc_recv, pool_ipc_stats, pool_resume_flags, pool_export_many, pool_prepare_export, config_init_sized, torch_record_stream, pool_driver_profile, pool_create_ledger, ledger_read, ledger_set_budget, ledger_remove, pool_ledger_evictable, backend_kind_name, backup_store_name, option_parse, placement_name, pool_ledger_set_fallback, pool_mark_step]),
        rust_layout!(vpmm_ipc_entry, [struct_size, reserved0, exporter_ptr, size, ptr, n_entries]),
        rust_layout!(vpmm_ipc_stats, [struct_size, reserved0, exports, exports_active, exported_bytes, importers, held_by_importers_bytes, imports, imported_bytes, n_exports, n_imports]),
        rust_layout!(vpmm_driver_profile, [struct_size, reserved0, create_calls, create_ns, release_calls, release_ns, map_calls, map_ns, unmap_calls, unmap_ns, set_access_calls, set_access_ns, reserve_calls, reserve_ns, event_record_calls, event_record_ns, event_query_calls, event_query_ns, event_destroy_calls, event_destroy_ns, stream_wait_calls, stream_wait_ns]),
        rust_layout!(vpmm_ledger_member, [struct_size, slot, pid, device, corrupt, n_evictable_tags, admitted_bytes, mapped_bytes, reserved_bytes, backed_up_bytes, host_admitted_bytes, n_admissions, n_refused, admission_wait_ns, n_pressure_asked, n_pressure_answered, ordinal, device_id_state, device_id_hi, device_id_lo]),
        rust_layout!(vpmm_ledger_info, [struct_size, device, budget_bytes, admitted_bytes, host_budget_bytes, host_admitted_bytes, n_pressure_requests, n_members, n_corrupt, budget_corrupt, host_budget_corrupt, device_id_state, n_devices, device_id_hi, device_id_lo]),
    ]
}

#[test]
fn every_struct_matches_the_library() {
    for (name, size, fields) in checked() {
        let (lib_size, lib_fields) = library_layout(name);
        assert_eq!(size, lib_size, "sizeof({}): Rust {} vs library {}", name, size, lib_size);
        let lib_names: Vec<&str> = lib_fields.iter().map(|f| f.0.as_str()).collect();
        let names: Vec<&str> = fields.iter().map(|f| f.name).collect();
        assert_eq!(names, lib_names, "fields of {} (Rust vs library)", name);
        for (f, (_, off, sz)) in fields.iter().zip(lib_fields.iter()) {
            assert_eq!(f.offset, *off as usize, "offsetof({}, {})", name, f.name);
            assert_eq!(f.size, *sz as usize, "sizeof({}.{})", name, f.name);
        }
    }
}

/// Every struct with fields in src/bindings.rs is checked above, with the
/// same fields: regenerating the bindings after the header grew makes this
/// fail until the list is updated.
#[test]
fn every_generated_struct_is_checked() {
    let src = include_str!("../src/bindings.rs");
    let listed = checked();
    let mut seen = 0;
    let mut rest = src;
    while let Some(at) = rest.find("pub struct ") {
        rest = &rest[at + "pub struct ".len()..];
        let name = rest.split(|c: char| !(c.is_alphanumeric() || c == '_')).next().unwrap();
        let body_end = rest.find("\n}").unwrap();
        let body = &rest[..body_end];
        let open = match body.find('{') {
            Some(i) => i,
            None => continue,
        };
        let fields: Vec<&str> = body[open + 1..]
            .lines()
            .filter_map(|l| l.trim().strip_prefix("pub "))
            .map(|l| l.split(':').next().unwrap().trim())
            .collect();
        if fields.is_empty() || fields == ["_unused"] {
            continue; // opaque handle (vpmm_pool, vpmm_reservation)
        }
        let entry = listed.iter().find(|e| e.0 == name);
        let entry = entry.unwrap_or_else(|| panic!("{} is not checked in tests/layout.rs", name));
        let names: Vec<&str> = entry.2.iter().map(|f| f.name).collect();
        assert_eq!(names, fields, "tests/layout.rs lists other fields of {}", name);
        seen += 1;
    }
    assert_eq!(seen, listed.len());
}

#[test]
fn hand_written_constants_match_the_library() {
    unsafe {
        let mut cfg: vpmm_config = std::mem::zeroed();
        vpmm_config_init_defaults(&mut cfg);
        cfg.backend = VPMM_BACKEND_HOST;
        cfg.max_handle_size = VPMM_HANDLE_SIZE_UNLIMITED;
        let mut pool: *mut vpmm_pool = std::ptr::null_mut();
        assert_eq!(vpmm_pool_create(&cfg, &mut pool), VPMM_OK);
        let mut got: vpmm_config = std::mem::zeroed();
        got.struct_size = size_of::<vpmm_config>() as u32;
        assert_eq!(vpmm_pool_get_config(pool, &mut got), VPMM_OK);
        assert_eq!(got.max_handle_size, u64::MAX);
        assert_eq!(vpmm_pool_destroy(pool), VPMM_OK);
    }
}

#[test]
fn constants_keep_their_c_types() {
    // Compiles only with the C types: int32_t statuses/kinds, uint32_t flags.
    let st: vpmm_status = VPMM_ERR_TIMEOUT;
    let backend: i32 = VPMM_BACKEND_HOST;
    let kind: i32 = VPMM_REGION_PAUSED;
    let mut attrs: vpmm_alloc_attrs = unsafe { std::mem::zeroed() };
    attrs.flags = VPMM_ALLOC_HOST_BACKUP;
    let reserve: u32 = VPMM_RESERVE_BLOCK | VPMM_RESERVE_OVERDRAFT_GROW;
    assert_eq!((st, backend, kind, attrs.flags, reserve), (8, 3, 6, 1, 33));
    assert_eq!(VPMM_TAG_MAX_BYTES, 63);
}
