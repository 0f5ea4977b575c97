// vpmm_get_api: the one symbol a run-time loader looks up (include/vpmm_loader.h).
// The table is built once from the exported functions themselves, so an entry
// can never point anywhere else; tests/api/check_api_table.py checks that it
// holds every exported vpmm_* function and nothing but them.
#include <cstddef>
#include <cstring>

#include "common/status.hpp"
#include "vpmm.h"
#include "vpmm_host_streams.h"
#include "vpmm_version.h"

namespace {

// Every slot after the two header words is a function pointer: the coverage
// test walks the table as an array of pointers, which this layout allows.
static_assert(offsetof(vpmm_api, version) == 8, "vpmm_api: the entries start after two uint32_t");
static_assert((sizeof(vpmm_api) - offsetof(vpmm_api, version)) % sizeof(void (*)(void)) == 0,
              "vpmm_api: only function pointers after the header");
// 95 functions in ABI 1's table (every exported function but
// vpmm_get_api). Appending one means changing this count, and the test of the
// exported symbols then checks the new entry.
static_assert((sizeof(vpmm_api) - offsetof(vpmm_api, version)) / sizeof(void (*)(void)) == 95,
              "vpmm_api: an exported function was added without a table entry (or vice versa)");

vpmm_api make_table() {
  vpmm_api t;
  std::memset(&t, 0, sizeof t);
  t.struct_size = sizeof t;
  t.abi_version = VPMM_ABI_VERSION;
  t.version = vpmm_version;
  t.abi_version_fn = vpmm_abi_version;
  t.status_string = vpmm_status_string;
  t.last_error = vpmm_last_error;
  t.last_error_copy = vpmm_last_error_copy;
  t.config_init = vpmm_config_init;
  t.config_init_defaults = vpmm_config_init_defaults;
  t.pool_create = vpmm_pool_create;
  t.pool_destroy = vpmm_pool_destroy;
  t.pool_malloc = vpmm_pool_malloc;
  t.pool_free = vpmm_pool_free;
  t.pool_lookup = vpmm_pool_lookup;
  t.pool_stream_synchronize = vpmm_pool_stream_synchronize;
  t.pool_stream_create = vpmm_pool_stream_create;
  t.pool_stream_destroy = vpmm_pool_stream_destroy;
  t.pool_stream_retire = vpmm_pool_stream_retire;
  t.pool_malloc_ex = vpmm_pool_malloc_ex;
  t.region_push = vpmm_region_push;
  t.region_pop = vpmm_region_pop;
  t.pool_pause = vpmm_pool_pause;
  t.pool_pause_ex = vpmm_pool_pause_ex;
  t.pool_resume = vpmm_pool_resume;
  t.pool_resume_ex = vpmm_pool_resume_ex;
  t.pool_trim = vpmm_pool_trim;
  t.pool_tag_stats = vpmm_pool_tag_stats;
  t.pool_reserve = vpmm_pool_reserve;
  t.pool_reserve_ex = vpmm_pool_reserve_ex;
  t.reservation_info = vpmm_reservation_info;
  t.reservation_release = vpmm_reservation_release;
  t.pool_set_limit = vpmm_pool_set_limit;
  t.pool_set_oom_callback = vpmm_pool_set_oom_callback;
  t.pool_set_pressure_callback = vpmm_pool_set_pressure_callback;
  t.pool_stats = vpmm_pool_stats;
  t.pool_dump = vpmm_pool_dump;
  t.pool_visit = vpmm_pool_visit;
  t.pool_dump_text = vpmm_pool_dump_text;
  t.pool_check = vpmm_pool_check;
  t.pool_get_config = vpmm_pool_get_config;
  t.pool_backend_name = vpmm_pool_backend_name;
  t.default_pool = vpmm_default_pool;
  t.torch_malloc = vpmm_torch_malloc;
  t.torch_free = vpmm_torch_free;
  t.option_count = vpmm_option_count;
  t.option_get = vpmm_option_get;
  t.option_find = vpmm_option_find;
  t.struct_layout = vpmm_struct_layout;
  t.struct_field = vpmm_struct_field;
  t.host_stream_create = vpmm_host_stream_create;
  t.host_stream_destroy = vpmm_host_stream_destroy;
  t.host_stream_hold = vpmm_host_stream_hold;
  t.host_stream_release = vpmm_host_stream_release;
  t.host_stream_launch = vpmm_host_stream_launch;
  t.host_stream_synchronize = vpmm_host_stream_synchronize;
  t.pool_layout = vpmm_pool_layout;
  t.pool_backup_lookup = vpmm_pool_backup_lookup;
  t.cupy_malloc = vpmm_cupy_malloc;
  t.cupy_free = vpmm_cupy_free;
  t.backend_info = vpmm_backend_info;
  t.pool_prepare_backups = vpmm_pool_prepare_backups;
  t.tag_scope_push = vpmm_tag_scope_push;
  t.tag_scope_pop = vpmm_tag_scope_pop;
  t.tag_scope_push_ex = vpmm_tag_scope_push_ex;
  t.pool_pause_flags = vpmm_pool_pause_flags;
  t.pool_set_backup_dir = vpmm_pool_set_backup_dir;
  t.pool_export = vpmm_pool_export;
  t.pool_export_tag = vpmm_pool_export_tag;
  t.export_entry = vpmm_export_entry;
  t.export_descriptor = vpmm_export_descriptor;
  t.export_send = vpmm_export_send;
  t.export_state = vpmm_export_state;
  t.export_close = vpmm_export_close;
  t.pool_import = vpmm_pool_import;
  t.import_entry = vpmm_import_entry;
  t.import_state = vpmm_import_state;
  t.import_close = vpmm_import_close;
  t.ipc_send = vpmm_ipc_send;
  t.ipc_recv = vpmm_ipc_recv;
  t.pool_ipc_stats = vpmm_pool_ipc_stats;
  t.pool_resume_flags = vpmm_pool_resume_flags;
  t.pool_export_many = vpmm_pool_export_many;
  t.pool_prepare_export = vpmm_pool_prepare_export;
  t.config_init_sized = vpmm_config_init_sized;
  t.torch_record_stream = vpmm_torch_record_stream;
  t.pool_driver_profile = vpmm_pool_driver_profile;
  t.pool_create_ledger = vpmm_pool_create_ledger;
  t.ledger_read = vpmm_ledger_read;
  t.ledger_set_budget = vpmm_ledger_set_budget;
  t.ledger_remove = vpmm_ledger_remove;
  t.pool_ledger_evictable = vpmm_pool_ledger_evictable;
  t.backend_kind_name = vpmm_backend_kind_name;
  t.backup_store_name = vpmm_backup_store_name;
  t.option_parse = vpmm_option_parse;
  t.placement_name = vpmm_placement_name;
  t.pool_ledger_set_fallback = vpmm_pool_ledger_set_fallback;
  t.pool_mark_step = vpmm_pool_mark_step;
  return t;
}

}  // namespace

extern "C" {

/* See vpmm.h. A function-local static: built on first use, thread safe
 * (C++11 guarantees one initialisation), never destroyed before callers that
 * may still hold it at exit read it (a trivially destructible struct). */
VPMM_API const vpmm_api* vpmm_get_api(uint32_t abi_version) {
  static const vpmm_api table = make_table();
  if (abi_version != static_cast<uint32_t>(VPMM_ABI_VERSION)) {
    vpmm::fail(VPMM_ERR_UNSUPPORTED,
               "vpmm_get_api: ABI version %u is not provided by libvpmm %s, which implements "
               "ABI version %d only",
               abi_version, VPMM_VERSION_STRING, VPMM_ABI_VERSION);
    return nullptr;
  }
  return &table;
}

}  // extern "C"
