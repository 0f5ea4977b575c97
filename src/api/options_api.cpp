// The option table and the public structs' layouts through the C ABI
// (vpmm_option_*, vpmm_struct_*), so that bindings and tools read names,
// defaults, field offsets and sizes from the library instead of copying them.
// Concern: exporting facts only; the table itself lives in config/config.cpp and
// the layouts come from offsetof/sizeof of this build. Nothing here allocates
// or keeps state: every function is thread safe.
//
// Invariant: each struct's field list names every field of its declaration
// in vpmm.h, in order; a static_assert below checks that the fields tile the
// struct (each starts where alignment puts it after the previous one), and so
// does tests/unit/test_options.cpp through the ABI. vpmm_config's list is not
// written here: it comes from config/option_list.hpp, so that check is also
// the proof that every field of vpmm_config is an option of the list.
#include <algorithm>
#include <array>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <iterator>
#include <type_traits>

#include "config/config.hpp"
#include "config/defaults.hpp"
#include "common/status.hpp"
#include "vpmm.h"

namespace vpmm {
namespace {

struct FieldDef {
  const char* name;
  int32_t kind;
  uint32_t offset, size;
};
#define VPMM_F_(type, kind, field)                                                       \
  FieldDef {                                                                             \
    #field, VPMM_FIELD_##kind, static_cast<uint32_t>(offsetof(type, field)),            \
        static_cast<uint32_t>(sizeof(static_cast<type*>(nullptr)->field))                \
  }

// The VPMM_FIELD_* of a field's C type.
template <typename T>
constexpr int32_t field_kind() {
  static_assert(std::is_same_v<T, uint64_t> || std::is_same_v<T, double> || std::is_same_v<T, int32_t> ||
                    std::is_same_v<T, uint32_t> || std::is_same_v<T, const char*>,
                "a vpmm_config field of a type vpmm_field_info has no kind for");
  if constexpr (std::is_same_v<T, const char*>) return VPMM_FIELD_PTR;
  if constexpr (std::is_same_v<T, uint64_t>) return VPMM_FIELD_U64;
  if constexpr (std::is_same_v<T, double>) return VPMM_FIELD_F64;
  if constexpr (std::is_same_v<T, int32_t>) return VPMM_FIELD_I32;
  return VPMM_FIELD_U32;
}

// vpmm_config's fields: its two header fields, and one per option of
// config/option_list.hpp that has a field, sorted into the struct's order
// below (the list is in the option table's order, which is ABI too).
constexpr FieldDef kConfigFields[] = {
    VPMM_F_(vpmm_config, U32, struct_size),
    VPMM_F_(vpmm_config, I32, config_error),
#define VPMM_POOL_OPTION(name, ...)                                                             \
  FieldDef{#name, field_kind<decltype(vpmm_config::name)>(),                                    \
           static_cast<uint32_t>(offsetof(vpmm_config, name)), static_cast<uint32_t>(sizeof(vpmm_config::name))},
#define VPMM_FIELD_OPTION VPMM_POOL_OPTION
#define VPMM_SETTING_OPTION(...)
#include "config/option_list.hpp"
#undef VPMM_POOL_OPTION
#undef VPMM_FIELD_OPTION
#undef VPMM_SETTING_OPTION
};

template <size_t N>
constexpr std::array<FieldDef, N> by_offset(const FieldDef (&rows)[N]) {
  std::array<FieldDef, N> a{};
  for (size_t i = 0; i < N; ++i) a[i] = rows[i];
  for (size_t i = 1; i < N; ++i)
    for (size_t j = i; j > 0 && a[j - 1].offset > a[j].offset; --j) {
      const FieldDef t = a[j];
      a[j] = a[j - 1];
      a[j - 1] = t;
    }
  return a;
}
constexpr std::array<FieldDef, std::size(kConfigFields)> k_vpmm_config = by_offset(kConfigFields);
constexpr FieldDef k_vpmm_alloc_attrs[] = {
    VPMM_F_(vpmm_alloc_attrs, U32, struct_size),
    VPMM_F_(vpmm_alloc_attrs, U32, flags),
    VPMM_F_(vpmm_alloc_attrs, PTR, tag),
    VPMM_F_(vpmm_alloc_attrs, PTR, reservation),
    VPMM_F_(vpmm_alloc_attrs, PTR, backup_dir),
};
constexpr FieldDef k_vpmm_tag_stats[] = {
    VPMM_F_(vpmm_tag_stats, U32, struct_size),
    VPMM_F_(vpmm_tag_stats, U32, reserved0),
    VPMM_F_(vpmm_tag_stats, U64, live_bytes),
    VPMM_F_(vpmm_tag_stats, U64, paused_bytes),
    VPMM_F_(vpmm_tag_stats, U64, backup_bytes),
    VPMM_F_(vpmm_tag_stats, U64, n_live),
    VPMM_F_(vpmm_tag_stats, U64, n_paused),
    VPMM_F_(vpmm_tag_stats, U64, retained_bytes),
};
constexpr FieldDef k_vpmm_stats[] = {
    VPMM_F_(vpmm_stats, U32, struct_size),
    VPMM_F_(vpmm_stats, U32, reserved0),
    VPMM_F_(vpmm_stats, U64, mapped_bytes),
    VPMM_F_(vpmm_stats, U64, reserved_va_bytes),
    VPMM_F_(vpmm_stats, U64, live_bytes),
    VPMM_F_(vpmm_stats, U64, requested_bytes),
    VPMM_F_(vpmm_stats, U64, free_bytes),
    VPMM_F_(vpmm_stats, U64, hole_bytes),
    VPMM_F_(vpmm_stats, U64, zombie_bytes),
    VPMM_F_(vpmm_stats, U64, peak_mapped_bytes),
    VPMM_F_(vpmm_stats, U64, peak_live_bytes),
    VPMM_F_(vpmm_stats, U64, n_malloc),
    VPMM_F_(vpmm_stats, U64, n_free),
    VPMM_F_(vpmm_stats, U64, n_defrag),
    VPMM_F_(vpmm_stats, U64, n_grow),
    VPMM_F_(vpmm_stats, U64, pages_created),
    VPMM_F_(vpmm_stats, U64, bytes_remapped),
    VPMM_F_(vpmm_stats, U64, page_size),
    VPMM_F_(vpmm_stats, U64, handles),
    VPMM_F_(vpmm_stats, U64, handles_created),
    VPMM_F_(vpmm_stats, U64, va_chunks),
    VPMM_F_(vpmm_stats, U64, largest_free_bytes),
    VPMM_F_(vpmm_stats, U64, small_bytes),
    VPMM_F_(vpmm_stats, U64, small_live_bytes),
    VPMM_F_(vpmm_stats, U64, n_small_malloc),
    VPMM_F_(vpmm_stats, U64, n_cross_stream_reuse),
    VPMM_F_(vpmm_stats, U64, n_stream_waits),
    VPMM_F_(vpmm_stats, U64, n_events_recorded),
    VPMM_F_(vpmm_stats, U64, n_zombies_reaped),
    VPMM_F_(vpmm_stats, U64, n_live),
    VPMM_F_(vpmm_stats, U64, paused_bytes),
    VPMM_F_(vpmm_stats, U64, backup_bytes),
    VPMM_F_(vpmm_stats, U64, backup_cache_bytes),
    VPMM_F_(vpmm_stats, U64, n_pause),
    VPMM_F_(vpmm_stats, U64, n_resume),
    VPMM_F_(vpmm_stats, U64, n_trim),
    VPMM_F_(vpmm_stats, U64, bytes_trimmed),
    VPMM_F_(vpmm_stats, U64, capacity_bytes),
    VPMM_F_(vpmm_stats, U64, reserved_bytes),
    VPMM_F_(vpmm_stats, U64, reservation_used_bytes),
    VPMM_F_(vpmm_stats, U64, available_bytes),
    VPMM_F_(vpmm_stats, U64, watermark_trigger_bytes),
    VPMM_F_(vpmm_stats, U64, watermark_stop_bytes),
    VPMM_F_(vpmm_stats, U64, under_pressure),
    VPMM_F_(vpmm_stats, U64, n_oom),
    VPMM_F_(vpmm_stats, U64, n_oom_recovered),
    VPMM_F_(vpmm_stats, U64, backup_pinned_bytes),
    VPMM_F_(vpmm_stats, U64, backup_pageable_bytes),
    VPMM_F_(vpmm_stats, U64, driver_ns),
    VPMM_F_(vpmm_stats, U64, driver_calls),
    VPMM_F_(vpmm_stats, U64, backup_mmap_bytes),
    VPMM_F_(vpmm_stats, U64, backup_disk_bytes),
    VPMM_F_(vpmm_stats, U64, backup_retained_bytes),
    VPMM_F_(vpmm_stats, U64, backup_skipped_bytes),
    VPMM_F_(vpmm_stats, U64, lent_bytes),
    VPMM_F_(vpmm_stats, U64, n_views),
    VPMM_F_(vpmm_stats, U64, view_va_bytes),
    VPMM_F_(vpmm_stats, U64, n_view_malloc),
    VPMM_F_(vpmm_stats, U64, n_view_reuse),
    VPMM_F_(vpmm_stats, U64, handles_moved),
    VPMM_F_(vpmm_stats, U64, n_budget_grow),
    VPMM_F_(vpmm_stats, U64, bytes_budget_grown),
    VPMM_F_(vpmm_stats, U64, n_steps),
    VPMM_F_(vpmm_stats, U64, last_step_ns),
    VPMM_F_(vpmm_stats, U64, last_step_driver_ns),
    VPMM_F_(vpmm_stats, U64, steps_ns),
    VPMM_F_(vpmm_stats, U64, steps_driver_ns),
};
constexpr FieldDef k_vpmm_region_info[] = {
    VPMM_F_(vpmm_region_info, U32, struct_size),
    VPMM_F_(vpmm_region_info, I32, kind),
    VPMM_F_(vpmm_region_info, U64, va),
    VPMM_F_(vpmm_region_info, U64, size),
    VPMM_F_(vpmm_region_info, U64, chunk_offset),
    VPMM_F_(vpmm_region_info, U32, chunk),
    VPMM_F_(vpmm_region_info, U32, handles),
    VPMM_F_(vpmm_region_info, I32, event_pending),
    VPMM_F_(vpmm_region_info, U32, reserved0),
    VPMM_F_(vpmm_region_info, U64, id),
    VPMM_F_(vpmm_region_info, U64, requested),
    VPMM_F_(vpmm_region_info, PTR, stream),
};
constexpr FieldDef k_vpmm_api[] = {
    VPMM_F_(vpmm_api, U32, struct_size),
    VPMM_F_(vpmm_api, U32, abi_version),
    VPMM_F_(vpmm_api, PTR, version),
    VPMM_F_(vpmm_api, PTR, abi_version_fn),
    VPMM_F_(vpmm_api, PTR, status_string),
    VPMM_F_(vpmm_api, PTR, last_error),
    VPMM_F_(vpmm_api, PTR, last_error_copy),
    VPMM_F_(vpmm_api, PTR, config_init),
    VPMM_F_(vpmm_api, PTR, config_init_defaults),
    VPMM_F_(vpmm_api, PTR, pool_create),
    VPMM_F_(vpmm_api, PTR, pool_destroy),
    VPMM_F_(vpmm_api, PTR, pool_malloc),
    VPMM_F_(vpmm_api, PTR, pool_free),
    VPMM_F_(vpmm_api, PTR, pool_lookup),
    VPMM_F_(vpmm_api, PTR, pool_stream_synchronize),
    VPMM_F_(vpmm_api, PTR, pool_stream_create),
    VPMM_F_(vpmm_api, PTR, pool_stream_destroy),
    VPMM_F_(vpmm_api, PTR, pool_stream_retire),
    VPMM_F_(vpmm_api, PTR, pool_malloc_ex),
    VPMM_F_(vpmm_api, PTR, region_push),
    VPMM_F_(vpmm_api, PTR, region_pop),
    VPMM_F_(vpmm_api, PTR, pool_pause),
    VPMM_F_(vpmm_api, PTR, pool_pause_ex),
    VPMM_F_(vpmm_api, PTR, pool_resume),
    VPMM_F_(vpmm_api, PTR, pool_resume_ex),
    VPMM_F_(vpmm_api, PTR, pool_trim),
    VPMM_F_(vpmm_api, PTR, pool_tag_stats),
    VPMM_F_(vpmm_api, PTR, pool_reserve),
    VPMM_F_(vpmm_api, PTR, pool_reserve_ex),
    VPMM_F_(vpmm_api, PTR, reservation_info),
    VPMM_F_(vpmm_api, PTR, reservation_release),
    VPMM_F_(vpmm_api, PTR, pool_set_limit),
    VPMM_F_(vpmm_api, PTR, pool_set_oom_callback),
    VPMM_F_(vpmm_api, PTR, pool_set_pressure_callback),
    VPMM_F_(vpmm_api, PTR, pool_stats),
    VPMM_F_(vpmm_api, PTR, pool_dump),
    VPMM_F_(vpmm_api, PTR, pool_visit),
    VPMM_F_(vpmm_api, PTR, pool_dump_text),
    VPMM_F_(vpmm_api, PTR, pool_check),
    VPMM_F_(vpmm_api, PTR, pool_get_config),
    VPMM_F_(vpmm_api, PTR, pool_backend_name),
    VPMM_F_(vpmm_api, PTR, default_pool),
    VPMM_F_(vpmm_api, PTR, torch_malloc),
    VPMM_F_(vpmm_api, PTR, torch_free),
    VPMM_F_(vpmm_api, PTR, option_count),
    VPMM_F_(vpmm_api, PTR, option_get),
    VPMM_F_(vpmm_api, PTR, option_find),
    VPMM_F_(vpmm_api, PTR, struct_layout),
    VPMM_F_(vpmm_api, PTR, struct_field),
    VPMM_F_(vpmm_api, PTR, host_stream_create),
    VPMM_F_(vpmm_api, PTR, host_stream_destroy),
    VPMM_F_(vpmm_api, PTR, host_stream_hold),
    VPMM_F_(vpmm_api, PTR, host_stream_release),
    VPMM_F_(vpmm_api, PTR, host_stream_launch),
    VPMM_F_(vpmm_api, PTR, host_stream_synchronize),
    VPMM_F_(vpmm_api, PTR, pool_layout),
    VPMM_F_(vpmm_api, PTR, pool_backup_lookup),
    VPMM_F_(vpmm_api, PTR, cupy_malloc),
    VPMM_F_(vpmm_api, PTR, cupy_free),
    VPMM_F_(vpmm_api, PTR, backend_info),
    VPMM_F_(vpmm_api, PTR, pool_prepare_backups),
    VPMM_F_(vpmm_api, PTR, tag_scope_push),
    VPMM_F_(vpmm_api, PTR, tag_scope_pop),
    VPMM_F_(vpmm_api, PTR, tag_scope_push_ex),
    VPMM_F_(vpmm_api, PTR, pool_pause_flags),
    VPMM_F_(vpmm_api, PTR, pool_set_backup_dir),
    VPMM_F_(vpmm_api, PTR, pool_export),
    VPMM_F_(vpmm_api, PTR, pool_export_tag),
    VPMM_F_(vpmm_api, PTR, export_entry),
    VPMM_F_(vpmm_api, PTR, export_descriptor),
    VPMM_F_(vpmm_api, PTR, export_send),
    VPMM_F_(vpmm_api, PTR, export_state),
    VPMM_F_(vpmm_api, PTR, export_close),
    VPMM_F_(vpmm_api, PTR, pool_import),
    VPMM_F_(vpmm_api, PTR, import_entry),
    VPMM_F_(vpmm_api, PTR, import_state),
    VPMM_F_(vpmm_api, PTR, import_close),
    VPMM_F_(vpmm_api, PTR, ipc_send),
    VPMM_F_(vpmm_api, PTR, ipc_recv),
    VPMM_F_(vpmm_api, PTR, pool_ipc_stats),
    VPMM_F_(vpmm_api, PTR, pool_resume_flags),
    VPMM_F_(vpmm_api, PTR, pool_export_many),
    VPMM_F_(vpmm_api, PTR, pool_prepare_export),
    VPMM_F_(vpmm_api, PTR, config_init_sized),
    VPMM_F_(vpmm_api, PTR, torch_record_stream),
    VPMM_F_(vpmm_api, PTR, pool_driver_profile),
    VPMM_F_(vpmm_api, PTR, pool_create_ledger),
    VPMM_F_(vpmm_api, PTR, ledger_read),
    VPMM_F_(vpmm_api, PTR, ledger_set_budget),
    VPMM_F_(vpmm_api, PTR, ledger_remove),
    VPMM_F_(vpmm_api, PTR, pool_ledger_evictable),
    VPMM_F_(vpmm_api, PTR, backend_kind_name),
    VPMM_F_(vpmm_api, PTR, backup_store_name),
    VPMM_F_(vpmm_api, PTR, option_parse),
    VPMM_F_(vpmm_api, PTR, placement_name),
    VPMM_F_(vpmm_api, PTR, pool_ledger_set_fallback),
    VPMM_F_(vpmm_api, PTR, pool_mark_step),
};
constexpr FieldDef k_vpmm_ipc_entry[] = {
    VPMM_F_(vpmm_ipc_entry, U32, struct_size),
    VPMM_F_(vpmm_ipc_entry, U32, reserved0),
    VPMM_F_(vpmm_ipc_entry, U64, exporter_ptr),
    VPMM_F_(vpmm_ipc_entry, U64, size),
    VPMM_F_(vpmm_ipc_entry, PTR, ptr),
    VPMM_F_(vpmm_ipc_entry, U64, n_entries),
};
constexpr FieldDef k_vpmm_ipc_stats[] = {
    VPMM_F_(vpmm_ipc_stats, U32, struct_size),
    VPMM_F_(vpmm_ipc_stats, U32, reserved0),
    VPMM_F_(vpmm_ipc_stats, U64, exports),
    VPMM_F_(vpmm_ipc_stats, U64, exports_active),
    VPMM_F_(vpmm_ipc_stats, U64, exported_bytes),
    VPMM_F_(vpmm_ipc_stats, U64, importers),
    VPMM_F_(vpmm_ipc_stats, U64, held_by_importers_bytes),
    VPMM_F_(vpmm_ipc_stats, U64, imports),
    VPMM_F_(vpmm_ipc_stats, U64, imported_bytes),
    VPMM_F_(vpmm_ipc_stats, U64, n_exports),
    VPMM_F_(vpmm_ipc_stats, U64, n_imports),
};
constexpr FieldDef k_vpmm_driver_profile[] = {
    VPMM_F_(vpmm_driver_profile, U32, struct_size),
    VPMM_F_(vpmm_driver_profile, U32, reserved0),
    VPMM_F_(vpmm_driver_profile, U64, create_calls),
    VPMM_F_(vpmm_driver_profile, U64, create_ns),
    VPMM_F_(vpmm_driver_profile, U64, release_calls),
    VPMM_F_(vpmm_driver_profile, U64, release_ns),
    VPMM_F_(vpmm_driver_profile, U64, map_calls),
    VPMM_F_(vpmm_driver_profile, U64, map_ns),
    VPMM_F_(vpmm_driver_profile, U64, unmap_calls),
    VPMM_F_(vpmm_driver_profile, U64, unmap_ns),
    VPMM_F_(vpmm_driver_profile, U64, set_access_calls),
    VPMM_F_(vpmm_driver_profile, U64, set_access_ns),
    VPMM_F_(vpmm_driver_profile, U64, reserve_calls),
    VPMM_F_(vpmm_driver_profile, U64, reserve_ns),
    VPMM_F_(vpmm_driver_profile, U64, event_record_calls),
    VPMM_F_(vpmm_driver_profile, U64, event_record_ns),
    VPMM_F_(vpmm_driver_profile, U64, event_query_calls),
    VPMM_F_(vpmm_driver_profile, U64, event_query_ns),
    VPMM_F_(vpmm_driver_profile, U64, event_destroy_calls),
    VPMM_F_(vpmm_driver_profile, U64, event_destroy_ns),
    VPMM_F_(vpmm_driver_profile, U64, stream_wait_calls),
    VPMM_F_(vpmm_driver_profile, U64, stream_wait_ns),
};
constexpr FieldDef k_vpmm_ledger_member[] = {
    VPMM_F_(vpmm_ledger_member, U32, struct_size),
    VPMM_F_(vpmm_ledger_member, U32, slot),
    VPMM_F_(vpmm_ledger_member, I32, pid),
    VPMM_F_(vpmm_ledger_member, I32, device),
    VPMM_F_(vpmm_ledger_member, U32, corrupt),
    VPMM_F_(vpmm_ledger_member, U32, n_evictable_tags),
    VPMM_F_(vpmm_ledger_member, U64, admitted_bytes),
    VPMM_F_(vpmm_ledger_member, U64, mapped_bytes),
    VPMM_F_(vpmm_ledger_member, U64, reserved_bytes),
    VPMM_F_(vpmm_ledger_member, U64, backed_up_bytes),
    VPMM_F_(vpmm_ledger_member, U64, host_admitted_bytes),
    VPMM_F_(vpmm_ledger_member, U64, n_admissions),
    VPMM_F_(vpmm_ledger_member, U64, n_refused),
    VPMM_F_(vpmm_ledger_member, U64, admission_wait_ns),
    VPMM_F_(vpmm_ledger_member, U64, n_pressure_asked),
    VPMM_F_(vpmm_ledger_member, U64, n_pressure_answered),
    VPMM_F_(vpmm_ledger_member, I32, ordinal),
    VPMM_F_(vpmm_ledger_member, U32, device_id_state),
    VPMM_F_(vpmm_ledger_member, U64, device_id_hi),
    VPMM_F_(vpmm_ledger_member, U64, device_id_lo),
};
constexpr FieldDef k_vpmm_ledger_info[] = {
    VPMM_F_(vpmm_ledger_info, U32, struct_size),
    VPMM_F_(vpmm_ledger_info, I32, device),
    VPMM_F_(vpmm_ledger_info, U64, budget_bytes),
    VPMM_F_(vpmm_ledger_info, U64, admitted_bytes),
    VPMM_F_(vpmm_ledger_info, U64, host_budget_bytes),
    VPMM_F_(vpmm_ledger_info, U64, host_admitted_bytes),
    VPMM_F_(vpmm_ledger_info, U64, n_pressure_requests),
    VPMM_F_(vpmm_ledger_info, U32, n_members),
    VPMM_F_(vpmm_ledger_info, U32, n_corrupt),
    VPMM_F_(vpmm_ledger_info, U32, budget_corrupt),
    VPMM_F_(vpmm_ledger_info, U32, host_budget_corrupt),
    VPMM_F_(vpmm_ledger_info, U32, device_id_state),
    VPMM_F_(vpmm_ledger_info, U32, n_devices),
    VPMM_F_(vpmm_ledger_info, U64, device_id_hi),
    VPMM_F_(vpmm_ledger_info, U64, device_id_lo),
};
constexpr FieldDef k_vpmm_option_info[] = {
    VPMM_F_(vpmm_option_info, U32, struct_size),
    VPMM_F_(vpmm_option_info, I32, kind),
    VPMM_F_(vpmm_option_info, PTR, name),
    VPMM_F_(vpmm_option_info, PTR, env),
    VPMM_F_(vpmm_option_info, PTR, default_text),
    VPMM_F_(vpmm_option_info, PTR, help),
    VPMM_F_(vpmm_option_info, U32, field_offset),
    VPMM_F_(vpmm_option_info, U32, field_size),
};
constexpr FieldDef k_vpmm_field_info[] = {
    VPMM_F_(vpmm_field_info, U32, struct_size),
    VPMM_F_(vpmm_field_info, I32, kind),
    VPMM_F_(vpmm_field_info, PTR, name),
    VPMM_F_(vpmm_field_info, U32, offset),
    VPMM_F_(vpmm_field_info, U32, size),
};
#undef VPMM_F_

struct StructDef {
  const char* name;
  uint32_t size;
  const FieldDef* fields;
  uint32_t n;
};
#define VPMM_S_(type)                                                                                 \
  StructDef {                                                                                         \
    #type, static_cast<uint32_t>(sizeof(type)), std::data(k_##type), static_cast<uint32_t>(std::size(k_##type)) \
  }
constexpr StructDef kStructs[] = {
    VPMM_S_(vpmm_config),  VPMM_S_(vpmm_alloc_attrs), VPMM_S_(vpmm_tag_stats),
    VPMM_S_(vpmm_stats),   VPMM_S_(vpmm_region_info),   VPMM_S_(vpmm_option_info),
    VPMM_S_(vpmm_field_info), VPMM_S_(vpmm_api), VPMM_S_(vpmm_ipc_entry), VPMM_S_(vpmm_ipc_stats),
    VPMM_S_(vpmm_driver_profile), VPMM_S_(vpmm_ledger_member), VPMM_S_(vpmm_ledger_info),
};
#undef VPMM_S_

// Each field list names every field of its struct, in order: each field
// starts where alignment puts it after the one before, and the last ends
// where the struct does (tests/unit/test_options.cpp checks the same through
// the ABI). For vpmm_config this is the proof that vpmm.h and
// config/option_list.hpp agree: a field without a row leaves a gap, a row
// without a field does not compile.
constexpr uint32_t align_of_kind(int32_t kind) {
  return kind == VPMM_FIELD_U32 || kind == VPMM_FIELD_I32 ? 4
         : kind == VPMM_FIELD_PTR                         ? alignof(void*)
                                                          : alignof(uint64_t);
}
constexpr bool tiles(const StructDef& s) {
  uint32_t end = 0;
  for (uint32_t i = 0; i < s.n; ++i) {
    const uint32_t a = align_of_kind(s.fields[i].kind);
    if (s.fields[i].offset != (end + a - 1) / a * a) return false;
    end = s.fields[i].offset + s.fields[i].size;
  }
  return (end + alignof(uint64_t) - 1) / alignof(uint64_t) * alignof(uint64_t) == s.size;
}
static_assert(tiles(kStructs[0]),
              "vpmm_config has a field that config/option_list.hpp has no row for (every field but "
              "struct_size and config_error is an option)");
constexpr bool all_tile() {
  for (const StructDef& s : kStructs)
    if (!tiles(s)) return false;
  return true;
}
static_assert(all_tile(), "a public struct's field list in options_api.cpp misses one of its fields");

const StructDef* find_struct(const char* name) {
  if (!name) return nullptr;
  // Earlier headers listed vpmm_region_info as "vpmm_region": both names work.
  if (std::strcmp(name, "vpmm_region") == 0) name = "vpmm_region_info";
  for (const StructDef& s : kStructs)
    if (std::strcmp(s.name, name) == 0) return &s;
  return nullptr;
}

// The first field's end: a caller's struct must reach at least past kind
// (struct_size, kind) to be worth filling.
constexpr uint32_t kMinOptionInfo = offsetof(vpmm_option_info, name);
constexpr uint32_t kMinFieldInfo = offsetof(vpmm_field_info, name);

vpmm_status fill_option(const char* call, uint32_t i, vpmm_option_info* out) {
  if (!out) return fail(VPMM_ERR_INVALID_ARGUMENT, "%s: out is NULL", call);
  if (out->struct_size < kMinOptionInfo || out->struct_size > 65536)
    return fail(VPMM_ERR_INVALID_ARGUMENT,
                "%s: out->struct_size %u is not a vpmm_option_info size (expected %u)", call,
                out->struct_size, static_cast<unsigned>(sizeof(vpmm_option_info)));
  uint32_t n = 0;
  const OptionDef* t = options(&n);
  if (i >= n)
    return fail(VPMM_ERR_INVALID_ARGUMENT, "%s: option %u is out of range (%u options)", call, i, n);
  vpmm_option_info o;
  std::memset(&o, 0, sizeof o);
  o.struct_size = static_cast<uint32_t>(std::min<size_t>(out->struct_size, sizeof o));
  o.kind = t[i].kind;
  o.name = t[i].name;
  o.env = t[i].env;
  o.default_text = t[i].default_text;
  o.help = t[i].help;
  o.field_offset = t[i].offset;
  o.field_size = t[i].size;
  std::memcpy(out, &o, o.struct_size);
  return VPMM_OK;
}

}  // namespace
}  // namespace vpmm

extern "C" {

VPMM_API uint32_t vpmm_option_count(void) {
  uint32_t n = 0;
  vpmm::options(&n);
  return n;
}

VPMM_API vpmm_status vpmm_option_get(uint32_t i, vpmm_option_info* out) {
  return vpmm::fill_option("vpmm_option_get", i, out);
}

VPMM_API vpmm_status vpmm_option_find(const char* name, vpmm_option_info* out, uint32_t* index) {
  const char* call = "vpmm_option_find";
  if (!name) return vpmm::fail(VPMM_ERR_INVALID_ARGUMENT, "%s: name is NULL", call);
  uint32_t i = 0;
  if (!vpmm::find_option(name, &i))
    return vpmm::fail(VPMM_ERR_INVALID_ARGUMENT, "%s: no option is named \"%.64s\"", call, name);
  vpmm_status st = vpmm::fill_option(call, i, out);
  if (st == VPMM_OK && index) *index = i;
  return st;
}

VPMM_API vpmm_status vpmm_option_parse(const char* name, const char* text, vpmm_config* config) {
  const char* call = "vpmm_option_parse";
  if (!name || !text || !config)
    return vpmm::fail(VPMM_ERR_INVALID_ARGUMENT, "%s: %s is NULL", call, !name ? "name" : !text ? "text" : "config");
  uint32_t i = 0;
  const vpmm::OptionDef* o = vpmm::find_option(name, &i);
  if (!o) return vpmm::fail(VPMM_ERR_INVALID_ARGUMENT, "%s: no option is named \"%.64s\"", call, name);
  if (!o->parse || o->offset == UINT32_MAX)
    return vpmm::fail(VPMM_ERR_INVALID_ARGUMENT, "%s: option \"%s\" has no vpmm_config field to parse into", call,
                      o->name);
  if (config->struct_size < o->offset + o->size)
    return vpmm::fail(VPMM_ERR_INVALID_ARGUMENT,
                      "%s: config->struct_size %u does not reach the field %s (set it: vpmm_config_init)", call,
                      config->struct_size, o->name);
  // Parsed into a whole struct of this library's size, then only the
  // field's bytes go back: a caller's shorter struct is never overrun.
  vpmm_config scratch;
  std::memset(&scratch, 0, sizeof scratch);
  std::memcpy(&scratch, config, std::min<size_t>(config->struct_size, sizeof scratch));
  vpmm::Refusal why;
  if (!o->parse(text, &scratch, &why))
    return vpmm::fail(VPMM_ERR_INVALID_ARGUMENT, "%s: %s = \"%.64s\": %s", call, o->env ? o->env : o->name, text,
                      why.text);
  std::memcpy(reinterpret_cast<char*>(config) + o->offset, reinterpret_cast<const char*>(&scratch) + o->offset,
              o->size);
  return VPMM_OK;
}

VPMM_API const char* vpmm_placement_name(int32_t placement) { return vpmm::placement_chain_name(placement); }

VPMM_API vpmm_status vpmm_struct_layout(const char* name, uint32_t* size, uint32_t* fields) {
  const vpmm::StructDef* s = vpmm::find_struct(name);
  if (!s)
    return vpmm::fail(VPMM_ERR_INVALID_ARGUMENT, "vpmm_struct_layout: %s%.64s%s is not a public struct",
                      name ? "\"" : "", name ? name : "name NULL", name ? "\"" : "");
  if (size) *size = s->size;
  if (fields) *fields = s->n;
  return VPMM_OK;
}

VPMM_API vpmm_status vpmm_struct_field(const char* name, uint32_t i, vpmm_field_info* out) {
  const char* call = "vpmm_struct_field";
  const vpmm::StructDef* s = vpmm::find_struct(name);
  if (!s)
    return vpmm::fail(VPMM_ERR_INVALID_ARGUMENT, "%s: %s%.64s%s is not a public struct", call,
                      name ? "\"" : "", name ? name : "name NULL", name ? "\"" : "");
  if (!out) return vpmm::fail(VPMM_ERR_INVALID_ARGUMENT, "%s: out is NULL", call);
  if (out->struct_size < vpmm::kMinFieldInfo || out->struct_size > 65536)
    return vpmm::fail(VPMM_ERR_INVALID_ARGUMENT,
                      "%s: out->struct_size %u is not a vpmm_field_info size (expected %u)", call,
                      out->struct_size, static_cast<unsigned>(sizeof(vpmm_field_info)));
  if (i >= s->n)
    return vpmm::fail(VPMM_ERR_INVALID_ARGUMENT, "%s: %s has %u fields, not %u", call, s->name, s->n,
                      i + 1);
  vpmm_field_info f;
  std::memset(&f, 0, sizeof f);
  f.struct_size = static_cast<uint32_t>(std::min<size_t>(out->struct_size, sizeof f));
  f.kind = s->fields[i].kind;
  f.name = s->fields[i].name;
  f.offset = s->fields[i].offset;
  f.size = s->fields[i].size;
  std::memcpy(out, &f, f.struct_size);
  return VPMM_OK;
}

}  // extern "C"
