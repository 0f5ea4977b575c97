/*
 * libvpmm: the ledger, one memory budget for the pools of several processes
 * on one device (docs/ledger.md).
 *
 * Part of the public header: vpmm.h includes it, so a program includes
 * vpmm.h; including this file first works too (it includes vpmm.h). The
 * conventions of vpmm.h hold: statuses, vpmm_last_error() on failure, no
 * exception crosses the ABI, structs read and written only up to the
 * struct_size the caller set. Plain C99.
 *
 * A pool that joins a ledger asks it before it creates physical memory
 * (its initial pages, every growth, every resume) and gives the bytes back
 * when its handles go (free after trim, pause, destroy); vpmm_pool_reserve
 * counts as admitted. The members of one ledger, whatever processes they
 * live in, never hold more than the budget of their device together,
 * however they race. A member that dies (SIGKILL included) has its share
 * reclaimed by the next member that looks. Nothing is locked: a member
 * that stops anywhere holds only its own share.
 *
 * The ledger is the shared-memory segment /dev/shm/vpmm.ledger.NAME, made
 * by the first member with mode 0600: a process of another user cannot
 * open it, and a member refuses to join a segment that is not its own
 * user's with mode 0600 and the ledger's size, or whose header is corrupt.
 * What other members wrote is validated, never trusted: a corrupt slot
 * makes admission refuse (OUT_OF_MEMORY, naming it) rather than guess.
 *
 * Devices are keyed by identity, not ordinal: a member's device is the one
 * its backend names with the same 16 bytes in every process (CUDA:
 * cuDeviceGetUuid, HIP: hipDeviceGetUuid, host: the boot id with the
 * ordinal), so two processes that see one GPU under different ordinals
 * (CUDA_VISIBLE_DEVICES) share its budget. The ledger numbers its devices
 * 0-15 in the order they first joined; `device` below is that index. A
 * reader sees which device an index is by its identity (device_id_hi/lo)
 * and each member's own ordinal for it (`ordinal`).
 */
#ifndef VPMM_LEDGER_H
#define VPMM_LEDGER_H

#include "vpmm.h"

#ifdef __cplusplus
extern "C" {
#endif

/* The most distinct devices (the ledger's indices 0-15) and members (pools)
 * a ledger holds. */
#define VPMM_LEDGER_DEVICES 16
#define VPMM_LEDGER_MEMBERS 64
/* vpmm_ledger_set_budget's device for the host budget (backups). */
#define VPMM_LEDGER_HOST (-1)

/* Like vpmm_pool_create, with the pool a member of ledger `ledger` (created
 * if it does not exist; NULL or "" = config->ledger's, and none when that is
 * NULL or ""). A name is 1-64 characters of [A-Za-z0-9_.-], not starting
 * with '.'. The device's budget is set by whoever first joins for that
 * device: VPMM_LEDGER_BUDGET ("8G", or "80%" of the device), else the
 * device's memory (the host backend's: host_capacity). vpmm_pool_create
 * joins config->ledger's ledger the same way (the pool option whose
 * variable is VPMM_LEDGER: vpmm_config_init reads it, _init_defaults not).
 * Errors: those of vpmm_pool_create; INVALID_ARGUMENT (a bad name, a
 * malformed VPMM_LEDGER_BUDGET); WRONG_STATE (a segment of another user, of
 * a mode other than 0600, of the wrong size or with a corrupt header);
 * OUT_OF_MEMORY (the initial pages do not fit the budget, or all 64 slots are
 * taken by live members); UNSUPPORTED (16 other devices joined the ledger
 * already, or the backend cannot tell the device's identity); WRONG_STATE
 * also for a device table entry that fails its check.
 * Thread safe. *out is NULL on failure. */
VPMM_API vpmm_status vpmm_pool_create_ledger(const vpmm_config* config, const char* ledger, vpmm_pool** out);

/* One member as vpmm_ledger_read sees it. */
typedef struct vpmm_ledger_member {
  uint32_t struct_size;         /* set by the caller in members[0]: every element's size */
  uint32_t slot;                /* its slot, 0-63 */
  int32_t pid;                  /* the process */
  int32_t device;               /* the ledger's index of its device (16: unreadable) */
  uint32_t corrupt;             /* 1: the slot fails its checks; its figures are not to be believed */
  uint32_t n_evictable_tags;    /* tags it declared evictable (vpmm_pool_ledger_evictable): what other members' pressure may pause */
  uint64_t admitted_bytes;      /* what the ledger admitted it (mapped + reserved, in 4 KiB units) */
  uint64_t mapped_bytes;        /* physical bytes its pool holds */
  uint64_t reserved_bytes;      /* admitted for its reservations, not yet drawn on */
  uint64_t backed_up_bytes;     /* bytes of its pause backups, as of its last pause, resume or trim */
  uint64_t host_admitted_bytes; /* host bytes its backups hold (pinned, cached included, pageable, mmap) */
  uint64_t n_admissions;        /* admissions granted */
  uint64_t n_refused;           /* admissions refused */
  uint64_t admission_wait_ns;   /* time its admissions took, retries included */
  uint64_t n_pressure_asked;    /* pressure requests it posted */
  uint64_t n_pressure_answered; /* pressure requests it answered */
  /* Appended (a caller's older, shorter struct gets none of them): */
  int32_t ordinal;              /* its device's ordinal in its own process (its vpmm_config.device, as
                                 * CUDA_VISIBLE_DEVICES numbers devices there), or
                                 * VPMM_LEDGER_ORDINAL_NOT_RECORDED / _UNREADABLE */
  uint32_t device_id_state;     /* VPMM_LEDGER_ID_*: whether device_id_hi/lo are its device's identity */
  uint64_t device_id_hi;        /* its device's 16-byte identity (the ledger's key of the device): bytes */
  uint64_t device_id_lo;        /* 0-7 in hi, 8-15 in lo, big-endian (printed "%016" PRIx64 "%016" PRIx64,
                                 * hi then lo, it reads as the bytes do: CUDA's UUID, nvidia-smi -L's
                                 * GPU-... without the dashes); both 0 unless VPMM_LEDGER_ID_OK */
} vpmm_ledger_member;

/* The ledger as a whole, and one device's budget. */
typedef struct vpmm_ledger_info {
  uint32_t struct_size;     /* = sizeof(vpmm_ledger_info), set by the caller */
  int32_t device;           /* the ledger's device index of budget_bytes and admitted_bytes (vpmm_ledger_read's) */
  uint64_t budget_bytes;    /* that device's budget; 0 = not set (no member of it yet) */
  uint64_t admitted_bytes;  /* bytes admitted to that device's members */
  uint64_t host_budget_bytes;   /* 0 = not set */
  uint64_t host_admitted_bytes; /* host bytes admitted */
  uint64_t n_pressure_requests; /* pressure requests posted so far */
  uint32_t n_members;       /* members in use, every device (live, or corrupt) */
  uint32_t n_corrupt;       /* slots that fail their checks (admission refuses while any does) */
  uint32_t budget_corrupt;  /* 1: the device's budget word fails its check (admission refuses) */
  uint32_t host_budget_corrupt; /* 1: the host budget's word fails its check */
  /* Appended (a caller's older, shorter struct gets none of them): */
  uint32_t device_id_state; /* VPMM_LEDGER_ID_* of device_id_hi/lo: the identity of `device` */
  uint32_t n_devices;       /* device indices taken so far (they are taken in order: 0 to n_devices-1) */
  uint64_t device_id_hi;    /* `device`'s identity, as vpmm_ledger_member's device_id_hi/lo */
  uint64_t device_id_lo;
} vpmm_ledger_info;

/* vpmm_ledger_member.ordinal when it is not a number to show: */
#define VPMM_LEDGER_ORDINAL_NOT_RECORDED (-1) /* the member's libvpmm predates the field */
#define VPMM_LEDGER_ORDINAL_UNREADABLE (-2)   /* its word fails its check (garbage: not to be believed) */
/* device_id_state: */
#define VPMM_LEDGER_ID_OK 0           /* device_id_hi/lo are the identity */
#define VPMM_LEDGER_ID_NOT_RECORDED 1 /* not written: the device joined through an earlier libvpmm (its
                                       * next member of this libvpmm writes it), or is joining now */
#define VPMM_LEDGER_ID_UNREADABLE 2   /* the device table entry or its identity fails its check (garbage) */
#define VPMM_LEDGER_ID_NO_DEVICE 3    /* no device took this index yet */

/* Reads ledger `name`: *info (may be NULL) for `device` (the ledger's index
 * 0-15: 0 is the first device that joined; its identity tells which GPU
 * that is), and up to
 * `capacity` members of every device into members[] (may be NULL when
 * capacity is 0), each of members[0].struct_size bytes; *n_members (may be
 * NULL) receives how many there are, which may exceed capacity. Slots of
 * dead processes are reclaimed on the way (reading is looking). Does not
 * join. Errors: INVALID_ARGUMENT (a bad name or device, no such ledger, a
 * struct_size that is not a size of the struct, members NULL with
 * capacity > 0); WRONG_STATE (as vpmm_pool_create_ledger). Thread safe. */
VPMM_API vpmm_status vpmm_ledger_read(const char* name, int32_t device, vpmm_ledger_info* info,
                                      vpmm_ledger_member* members, uint32_t capacity, uint32_t* n_members);

/* Sets the budget of `device` (the ledger's index 0-15; a budget set for an
 * index no device took yet goes to the next new device), or with
 * VPMM_LEDGER_HOST the host
 * budget, to `bytes` (rounded down to 4 KiB), while the ledger runs. The
 * host budget bounds what the members' backups hold in host memory (pinned,
 * cached pinned buffers included, pageable and mmap; disk backups are not
 * host memory): a vpmm_pool_pause whose backups would pass it fails with
 * OUT_OF_MEMORY before anything is paused (the estimate is the tag's live
 * bytes less its retained backups: it may refuse a pause that would have
 * fit, never admit one that does not). Unset (0, the default): no bound. A
 * lower budget takes nothing from anyone: it admits nothing new until the
 * members hold less. A member may allow its pauses the disk instead of a
 * refusal (vpmm_pool_ledger_set_fallback). Any process of the ledger's user
 * may call it.
 * Errors: INVALID_ARGUMENT (a bad name or device, no such ledger);
 * WRONG_STATE (as vpmm_pool_create_ledger). Thread safe. */
VPMM_API vpmm_status vpmm_ledger_set_budget(const char* name, int32_t device, uint64_t bytes);

/* The tags of `pool` that other members' pressure may pause, in the order
 * to pause them (replacing any earlier list; n 0 clears it). When another
 * member of the ledger cannot be admitted, it posts a request and waits;
 * this pool's watcher thread sees it within a few milliseconds, marks it
 * taken, calls the pool's pressure callback (under_pressure 1), trims the
 * pool's cached free memory, then pauses these tags one by one (with their
 * backups, as vpmm_pool_pause does) until the bytes asked for went back. A
 * member that has not taken the request within 1 s (stopped, busy, gone) is
 * not waited for; one that took it is waited for until it answers, at most
 * 30 s. If the memory is still short the asking call then fails with
 * OUT_OF_MEMORY. Resume the tags when the memory is back (the
 * resume is admitted like any growth). Tags are copied (at most 64, each
 * 1-63 bytes, no comma). Errors: INVALID_ARGUMENT (a bad pool or tag),
 * WRONG_STATE (the pool is in no ledger). Thread safe. */
VPMM_API vpmm_status vpmm_pool_ledger_evictable(vpmm_pool* pool, const char* const* tags, size_t n);

/* Flags of vpmm_pool_ledger_set_fallback: the stores a pause of the pool
 * may fall back on when the ledger's host budget refuses its backups. */
#define VPMM_LEDGER_FALLBACK_DISK 1u /* the disk store, in the pool's backup directory */

/* What a pause of `pool` does when the ledger's host budget refuses its
 * backups (vpmm_ledger_set_budget with VPMM_LEDGER_HOST). 0 (the default):
 * the pause fails with OUT_OF_MEMORY and nothing is paused.
 * VPMM_LEDGER_FALLBACK_DISK: the pause goes on with every backup it takes
 * new in the disk store, as files in the pool's backup directory
 * (vpmm_pool_set_backup_dir, else VPMM_BACKUP_DIR), whatever store the
 * allocations chose; backups they already hold (retained ones, the files
 * of an earlier pause) are written in place as always, and a file stays
 * with its allocation after the resume (the disk store keeps it for the
 * next pause). Disk backups hold no host memory, so the host budget is not
 * asked for them. With no backup directory the refusal stands
 * (OUT_OF_MEMORY, saying so). It holds for every pause of the pool: its
 * own vpmm_pool_pause* calls and those the pressure of other members makes
 * (vpmm_pool_ledger_evictable). vpmm_stats.backup_disk_bytes shows what went
 * to disk. Errors: INVALID_ARGUMENT (a bad pool, unknown flags),
 * WRONG_STATE (the pool is in no ledger). Thread safe. */
VPMM_API vpmm_status vpmm_pool_ledger_set_fallback(vpmm_pool* pool, uint32_t flags);

/* Removes the name of ledger `name` (shm_unlink): processes that joined it
 * keep theirs; the next pool to join makes a new one. For a ledger whose
 * segment was corrupted or whose creator died while making it.
 * Errors: INVALID_ARGUMENT (a bad name, no such ledger). Thread safe. */
VPMM_API vpmm_status vpmm_ledger_remove(const char* name);

#ifdef __cplusplus
}
#endif
#endif /* VPMM_LEDGER_H */
