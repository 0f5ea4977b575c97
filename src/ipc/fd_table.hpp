// Room in this process's file descriptor table before an export or import
// takes many descriptors at once (docs/ipc.md, "The descriptor table").
//
// Why: the kernel grows a process's table by doubling it, and a process with
// more than one thread (every PyTorch process) waits for an RCU grace period
// at each doubling (expand_fdtable's synchronize_rcu): 6-24 ms each on the
// machines measured. An export or import of N handles holds 2N descriptors
// (the one kept per handle and the one sent or taken), so a process's first
// send of 816 handles crossed 256, 512, 1024 and 2048 and paid four grace
// periods (about 55 ms on the exporter and 60 ms on the importer of an H200
// pair), where PyTorch's CUDA IPC makes no descriptors. Growing the table in
// one step to what the call needs pays at most one; growing it ahead, when
// the process's first pool is made, pays none in the send. Ahead is done on
// the creating thread, not on one of its own: the descriptor it holds while
// the kernel waits would otherwise show in the process for tens of
// milliseconds after vpmm_pool_create returned (a program counting its open
// descriptors around a pool's life would count it).
#pragma once

#include <cstddef>

namespace vpmm {
namespace ipc {

// Grows the table, if it is smaller, to hold `more` descriptors above the
// lowest free number, in one step (bounded by RLIMIT_NOFILE). An importer
// passes a count another process sent: a hostile descriptor of N handle
// records grows this process's table (which never shrinks) to at most
// min(2N, RLIMIT_NOFILE) entries, about 8 bytes each, against the N
// records of about 24 bytes it had to send and we to read. Best effort:
// a failure leaves the table as it was, and the call that needs the
// descriptors reports its own EMFILE. Thread safe; creates and closes one
// descriptor of its own (a high number for an instant: a thread that dup2s
// onto that very number at that instant races with it, as with any open).
void make_descriptor_room(size_t more);

// Grows the table to `entries` (as make_descriptor_room does) the first time
// it is called in the process; later calls return at once. 0 = nothing. For
// a process's first pool.
void make_descriptor_table_once(size_t entries);

}  // namespace ipc
}  // namespace vpmm
