// THE list of options: one declaration per option, from which the build
// makes everything else that names one. An X-macro file: the includer
// defines the three row macros, includes this file, and gets one expansion
// per row, in order. Three includers, one concern each:
//   config/pool_options.hpp  PoolOptions: a member per VPMM_POOL_OPTION row
//   config/config.cpp        the option table (kOptions): every row, with its
//                            parser, check, resolve and show functions
//   api/options_api.cpp      vpmm_config's field list (vpmm_struct_field),
//                            checked at compile time to tile the struct
// and through the table: vpmm_option_get, `vpmm info`, the bindings' tests
// and docs/options.md (scripts/options-doc.py writes its table; the options
// test fails when it differs).
//
// Adding an option: append a vpmm_config field to include/vpmm.h (the ABI:
// written by hand, append only), append its row here, and write its parse,
// check, resolve or show function in config.cpp when the generic ones do not
// fit (a named default goes in defaults.hpp). The Go and Rust bindings each
// name the field once; their tests fail until they do.
//
// Invariant: order is ABI. vpmm_config.config_error is a row's index + 1 and
// the environment is applied in this order: append only, never reorder.
//
// The rows:
//   VPMM_POOL_OPTION(name, env, kind, pool_default, parse, default_text, help,
//                    check, resolve, show)
//       a vpmm_config field that the pool reads: PoolOptions gets a member of
//       the same name and type, initialised to pool_default.
//   VPMM_FIELD_OPTION(name, env, kind, parse, default_text, help, check,
//                     resolve, show)
//       a vpmm_config field the pool does not keep (the backend takes it
//       through BackendParams, or another option's rule applies it).
//   VPMM_SETTING_OPTION(setting, parse)
//       a process-wide setting of common/settings.hpp (no field): its name,
//       variable, default and help are defined there.
// Columns:
//   name          the vpmm_config field (and the option's name)
//   env           its VPMM_* variable, or nullptr when only the field sets it
//   kind          VPMM_OPTION_<kind>; config.cpp checks it against the
//                 field's C type
//   pool_default  PoolOptions' value before resolution (what 0 means for a
//                 generic resolve)
//   parse         reads the variable: bool(const char*, T* field, Refusal*)
//                 for one field, bool(const char*, vpmm_config*, Refusal*)
//                 when it needs the others (e.g. "Np" pages of page_size);
//                 a refusal says why and what the option accepts (config.hpp);
//                 nullptr: no variable, or one vpmm_config_init does not judge
//   default_text, help   what vpmm_option_get, `vpmm info` and the docs show
//   check         vpmm_status(const vpmm_config&, const char* call): the value
//                 alone, before any backend exists; nullptr: any value
//   resolve       vpmm_status(const vpmm_config&, Backend&, const char* call,
//                 PoolOptions*): the effective value against the backend, in
//                 table order (sizes first, then fractions)
//   show          void(const PoolOptions&, int32_t backend, vpmm_config*): the
//                 effective value vpmm_pool_get_config reports
// In a VPMM_POOL_OPTION row a nullptr resolve takes the caller's value, 0
// meaning pool_default, and a nullptr show reports the member as resolved.
// In a VPMM_FIELD_OPTION row nullptr means none: the caller's value is
// reported as given.
//
// No include guard: it is meant to be included once per expansion.

VPMM_FIELD_OPTION(backend, "VPMM_BACKEND", BACKEND, parse_backend, "auto",
                  "auto|cuda|hip|host: auto picks CUDA, else HIP, when a GPU is usable, else host",
                  check_backend, nullptr, show_backend)
VPMM_FIELD_OPTION(device, "VPMM_DEVICE", INT32, parse_int, "0",
                  "device ordinal (ignored by the host backend)", check_device, nullptr, nullptr)
VPMM_POOL_OPTION(page_size, "VPMM_PAGE_SIZE", SIZE, 0, parse_size,
                 "0 (the backend's granularity: 2 MiB on CUDA and host)",
                 "accounting unit in bytes, a multiple of the backend granularity",
                 nullptr, resolve_page_size, nullptr)
VPMM_POOL_OPTION(va_size, "VPMM_VA_SIZE", SIZE, 0, parse_size,
                 "0 (backend default: 8 TiB on CUDA, 64 GiB on host)",
                 "bytes of VA reserved per chunk (more chunks are reserved on demand)",
                 nullptr, resolve_va_size, nullptr)
VPMM_POOL_OPTION(initial_pages, "VPMM_PAGES", COUNT, 0, parse_size, "0",
                 "pages mapped when the pool is created", nullptr, resolve_initial_pages, nullptr)
// Shown as the host backend's capacity; the other backends ignore it.
VPMM_FIELD_OPTION(host_capacity, "VPMM_HOST_CAPACITY", SIZE, parse_size, "0 (1 GiB)",
                  "host backend: physical bytes it may hand out", nullptr, nullptr, show_host_capacity)
VPMM_POOL_OPTION(max_handle_size, "VPMM_MAX_HANDLE_SIZE", HANDLE_SIZE, 0, parse_max_handle_size,
                 "0 (scaled handles: max(page_size, growth / 128))",
                 "handle policy: 0 = scaled, \"unlimited\" = one per growth, \"1p\" = page handles, or a cap",
                 nullptr, resolve_max_handle_size, nullptr)
VPMM_POOL_OPTION(small_size, "VPMM_SMALL_SIZE", SIZE, 0, parse_size, "0 (page_size / 2)",
                 "largest request served from shared pages (below 256 turns them off)", nullptr,
                 resolve_small_size, nullptr)
VPMM_POOL_OPTION(backup_cache_size, "VPMM_BACKUP_CACHE_SIZE", SIZE, 0, parse_size,
                 "0 (keep everything pinned so far)",
                 "pinned host bytes kept cached for pause backups after a resume", nullptr, nullptr, nullptr)
// Capped by memory_limit_fraction and rounded to pages by resolve_capacity
// (config.cpp), with the backend's memory.
VPMM_POOL_OPTION(memory_limit, "VPMM_MEMORY_LIMIT", LIMIT, 0, parse_limit, "0 (none)",
                 "hard cap on mapped bytes (\"8G\") or a share of device memory (\"80%\")", nullptr,
                 nullptr, nullptr)
VPMM_POOL_OPTION(backup_pinned_limit, "VPMM_BACKUP_PINNED_LIMIT", SIZE, 0, parse_size, "0 (no limit)",
                 "most pinned host bytes held for pause backups (beyond it: pageable memory)", nullptr,
                 nullptr, nullptr)
VPMM_SETTING_OPTION(kLog, parse_log)
// Reported as the caller set it: the cap it made is memory_limit's value.
VPMM_FIELD_OPTION(memory_limit_fraction, nullptr, FRACTION, nullptr, "0 (none)",
                  "cap as a fraction of the device's total memory; the smaller of the two caps wins",
                  nullptr, resolve_fraction, nullptr)
VPMM_POOL_OPTION(watermark_trigger, nullptr, FRACTION, kDefaultWatermarkTrigger, nullptr,
                 "0 (" VPMM_STR_(VPMM_DEFAULT_WATERMARK_TRIGGER_) ")",
                 "pressure starts when mapped >= trigger x capacity", nullptr, nullptr, nullptr)
VPMM_POOL_OPTION(watermark_stop, nullptr, FRACTION, kDefaultWatermarkStop, nullptr,
                 "0 (" VPMM_STR_(VPMM_DEFAULT_WATERMARK_STOP_) ")",
                 "pressure ends when mapped <= stop x capacity", nullptr, nullptr, nullptr)
// The HIP backend resolves it against the runtime's version (BackendParams).
VPMM_FIELD_OPTION(hip_chunk_size, "VPMM_HIP_CHUNK_SIZE", HANDLE_SIZE, parse_hip_chunk_size,
                  "0 (256 MiB below ROCm 7.0, none from 7.0)",
                  "HIP: largest hipMemCreate (chunked path); \"unlimited\" = never chunk", nullptr, nullptr,
                  nullptr)
// The backend checks it against its devices (BackendParams).
VPMM_FIELD_OPTION(peer_devices, "VPMM_PEER_DEVICES", DEVICE_LIST, parse_device_list,
                  "none (this device only)", "CUDA: devices given access to the pool's memory, e.g. \"1,3\"",
                  nullptr, nullptr, nullptr)
VPMM_POOL_OPTION(large_rounding, "VPMM_LARGE_ROUNDING", SIZE, 0, parse_size, "0 (page_size: whole pages)",
                 "what untagged requests above small_size round up to: a power of two from 256 to "
                 "page_size; below page_size neighbours share pages",
                 nullptr, resolve_large_rounding, nullptr)
VPMM_SETTING_OPTION(kHipLibrary, nullptr)
VPMM_SETTING_OPTION(kHipVaRecycle, nullptr)
VPMM_SETTING_OPTION(kHipPageFloor, nullptr)
VPMM_SETTING_OPTION(kPreloadLog, nullptr)
VPMM_SETTING_OPTION(kPreloadTag, nullptr)
VPMM_SETTING_OPTION(kPreloadHostBackup, nullptr)
VPMM_SETTING_OPTION(kPreloadCtl, nullptr)
VPMM_POOL_OPTION(remap_slack, "VPMM_REMAP_SLACK", FRACTION, kDefaultRemapSlack, parse_remap_slack,
                 "0 (" VPMM_STR_(VPMM_DEFAULT_REMAP_SLACK_) ")",
                 "grow instead of remapping pages while mapped stays within (1 + slack) x the bytes asked "
                 "for; a value up to 1, a percentage, or \"exact\" (a negative value: always remap)",
                 check_remap_slack, resolve_remap_slack, show_remap_slack)
VPMM_SETTING_OPTION(kBackupDir, nullptr)
// The backend honours it (BackendParams): it decides how handles are made.
VPMM_FIELD_OPTION(exportable, "VPMM_EXPORTABLE", COUNT, parse_exportable, "0 (not exportable)",
                  "1 = every handle can be shared with other processes (vpmm_pool_export); see "
                  "docs/ipc.md for the cost",
                  check_exportable, nullptr, nullptr)
VPMM_POOL_OPTION(view_min_size, "VPMM_VIEW_MIN_SIZE", SIZE, 0, parse_view_min_size,
                 "0 (" VPMM_DEFAULT_VIEW_MIN_SIZE_TEXT_ " in the views chain, none in the others)",
                 "smallest request a view may serve (free handles mapped where they lie at a VA of its "
                 "own, kept for the next request of its size); a size adds views to any chain, "
                 "\"off\" = never",
                 nullptr, resolve_view_min_size, show_view_min_size)
VPMM_SETTING_OPTION(kPendingReuse, nullptr)
VPMM_POOL_OPTION(driver_budget, "VPMM_DRIVER_BUDGET", FRACTION, kDefaultDriverBudget, parse_driver_budget,
                 "0 (" VPMM_STR_(VPMM_DEFAULT_DRIVER_BUDGET_) ")",
                 "share of elapsed time the pool may spend moving pages; past it a malloc grows "
                 "instead (within the limit and 1.1x the bytes asked for): a fraction up to 1, a "
                 "percentage, \"never\" (or 0: move only at the limit) or \"exact\" (no budget)",
                 check_driver_budget, resolve_driver_budget, show_driver_budget)
VPMM_POOL_OPTION(placement, "VPMM_PLACEMENT", INT32, VPMM_PLACEMENT_DEFAULT, parse_placement, "default",
                 "the placement chain: default (reap, best fit, grow within the driver budget, remap), "
                 "exact (reap, best fit, remap), views (reap, best fit, views, remap), pending "
                 "(default with other streams' pending frees reused whole)",
                 check_placement, nullptr, nullptr)
VPMM_POOL_OPTION(budget_clock_us, "VPMM_BUDGET_CLOCK_US", INT32, 0, parse_budget_clock, "0 (the wall clock)",
                 "what the driver budget counts by: 0 = wall clock and measured driver time; N = every "
                 "malloc and free stands for N us of work and each handle operation for its H100 cost "
                 "(deterministic replays)",
                 nullptr, nullptr, nullptr)
// The ledger (src/ledger/, docs/ledger.md) was a process-wide setting at
// this row before it became a field: the row kept its place (order is ABI).
VPMM_FIELD_OPTION(ledger, "VPMM_LEDGER", TEXT, parse_ledger, "unset (none)",
                  "the ledger the pool joins: one memory budget shared with the pools of other processes on "
                  "the device (docs/ledger.md); 1-64 characters of [A-Za-z0-9_.-]",
                  check_ledger, nullptr, nullptr)
VPMM_SETTING_OPTION(kLedgerBudget, nullptr)
VPMM_SETTING_OPTION(kFdTableAhead, parse_fd_table_ahead_option)
