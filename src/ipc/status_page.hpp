// The status page of an export: one page of a memfd, mapped by the exporter
// and by every importer, so that an importer learns without a round trip
// whether the export still describes the exporter's memory.
//
//   magic, version, pid, nonce   who made it (the descriptor names the nonce:
//                                a recycled descriptor number cannot pass for it)
//   word                         state (VPMM_EXPORT_*) | generation << 8; only
//                                the exporter writes it, only to leave ACTIVE
//
// An importer is another process, perhaps a hostile one, and receives the
// memfd itself. So the page is sealed before it is ever sent: it cannot
// shrink or grow (a shrunk page would fault the exporter at its next read),
// nobody can write it any more but through the exporter's own mapping
// (F_SEAL_FUTURE_WRITE: no writable mapping, write or hole punch elsewhere),
// and no further seal can be added. Importers map it read-only. The
// exporter never trusts the page for its own state: it keeps what it
// published in its own memory.
//
// Imports made so far are counted in a second memfd of one page, the
// counter page, which importers map writable (sealed against resizing
// only): what it says is what importers report, which the exporter only
// passes on (vpmm_export_state's `imports`) and never acts on.
//
// Whether the exporter lives is asked of the exporter's process itself: the
// page (sealed, written by the exporter only) names it by pid, start time
// (field 22 of /proc/PID/stat: a recycled pid starts later) and pid
// namespace. An importer in the same namespace takes a pidfd of it when it
// opens the page, checked against the start time (kernels without pidfds
// read the start time at each look instead): once that process has exited,
// every importer reads EXITED, whatever any importer does with the page.
// In another pid namespace, or with a page of an earlier library, the locks
// below alone tell, as before.
//
// Liveness is also kept in open-file-description locks on the status page, which
// the kernel drops when their holder closes or dies, pid reuse or not: the
// exporter locks byte 0 and each importer one byte of 1..4095. An importer
// holds the page's memfd and could lock byte 0 itself once the exporter is
// gone: the lock counts only where the process check cannot be made. Each process
// locks through a description of its own (the memfd reopened through
// /proc/self/fd), never the one it shares, so a lock lives exactly as long
// as its process holds it. Where /proc is missing the page works without
// them: importers then cannot tell an exited exporter, nor the exporter its
// importers. Locks are all an importer can add to the page, and the
// exporter's count of them is bounded by the page's 4095 slots.
#pragma once

#include <atomic>
#include <cstdint>
#include <memory>

#include "vpmm.h"

namespace vpmm {
namespace ipc {

class StatusPage {
 public:
  ~StatusPage();
  StatusPage(const StatusPage&) = delete;
  StatusPage& operator=(const StatusPage&) = delete;

  // The exporter's: a new sealed page, ACTIVE, with a random nonce, the
  // exporter's lock taken, and its counter page. `who` names the call in
  // messages.
  static vpmm_status create(const char* who, std::unique_ptr<StatusPage>* out);
  // An importer's: maps the page behind fd read-only and the counter page
  // behind counter_fd writable (the caller keeps both descriptors), after
  // checking that each is a sealed memfd of one page and that the status
  // page is the one the descriptor names (magic, version, nonce).
  static vpmm_status open(const char* who, int fd, int counter_fd, uint64_t nonce, std::unique_ptr<StatusPage>* out);

  int fd() const { return fd_; }                  // exporter: the status page's memfd (sent)
  int counter_fd() const { return counter_fd_; }  // exporter: the counter page's memfd (sent)
  uint64_t nonce() const { return nonce_; }
  int32_t pid() const { return pid_; }

  // Exporter: leaves ACTIVE for `state` (the first such call wins).
  void publish(int32_t state);
  // The exporter's: what it published. An importer's: what the page says;
  // an ACTIVE page whose exporter holds no lock any more reads
  // VPMM_EXPORT_EXITED.
  int32_t state() const;
  uint64_t word() const;
  // Imports made so far, as importers reported them.
  uint64_t imports() const;
  // Exporter: how many other descriptions hold locks on the page now.
  uint32_t live_importers() const;
  // Importer: take a slot (best effort) and count the import.
  void attach();
  // Drops this process's locks and descriptors; the mappings stay until
  // destruction, so concurrent readers never touch unmapped memory.
  void close_locks();

 private:
  StatusPage() = default;
  // Importer: identifies the exporter's process (see above).
  void watch_exporter();
  // Importer: whether the exporter's process is known to have exited.
  bool exporter_gone() const;
  struct Layout;
  const Layout* page_ = nullptr;           // read-only in importers
  Layout* own_ = nullptr;                  // exporter: the same page, writable
  std::atomic<uint64_t>* counter_ = nullptr;  // the counter page's first word
  uint64_t nonce_ = 0;
  int32_t pid_ = 0;
  std::atomic<int32_t> published_{VPMM_EXPORT_ACTIVE};  // exporter: what it published
  int fd_ = -1;          // exporter: the memfd; importer: -1 (the caller's)
  int counter_fd_ = -1;  // likewise
  int lock_fd_ = -1;     // this process's own description, for the locks
  int pidfd_ = -1;       // importer: the exporter's process, when identified
  bool identified_ = false;  // importer: the exporter's pid names it here
  mutable std::atomic<bool> exited_{false};  // importer: seen exited (it never comes back)
  bool exporter_ = false;
};

}  // namespace ipc
}  // namespace vpmm
