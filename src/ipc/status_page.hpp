// The status page of an export: one page of a memfd, mapped by the exporter
// and by every importer, so that an importer learns without a round trip
// whether the export still describes the exporter's memory.
//
//   magic, version, pid, nonce   who made it (the descriptor names the nonce:
//                                a recycled descriptor number cannot pass for it)
//   word                         state (VPMM_EXPORT_*) | generation << 8; only
//                                the exporter writes it, only to leave ACTIVE
//   imports                      imports made so far (importers add to it)
//
// Liveness is kept in open-file-description locks on the memfd, which the
// kernel drops when their holder closes or dies, pid reuse or not: the
// exporter locks byte 0 and each importer one byte of 1..4095. Each process
// locks through a description of its own (the memfd reopened through
// /proc/self/fd), never the one it shares, so a lock lives exactly as long
// as its process holds it. Where /proc is missing the page works without
// them: importers then cannot tell an exited exporter, nor the exporter its
// importers.
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

  // The exporter's: a new page, ACTIVE, with a random nonce, the exporter's
  // lock taken. `who` names the call in messages.
  static vpmm_status create(const char* who, std::unique_ptr<StatusPage>* out);
  // An importer's: maps the page behind fd (the caller keeps fd) and checks
  // it is the one the descriptor names (magic, version, nonce).
  static vpmm_status open(const char* who, int fd, uint64_t nonce, std::unique_ptr<StatusPage>* out);

  int fd() const { return fd_; }  // the shared memfd (the exporter sends it)
  uint64_t nonce() const;
  int32_t pid() const;

  // Exporter: leaves ACTIVE for `state` (the first such call wins).
  void publish(int32_t state);
  // The published state; for an importer an ACTIVE page whose exporter holds
  // no lock any more reads VPMM_EXPORT_EXITED.
  int32_t state() const;
  uint64_t word() const;
  uint64_t imports() const;
  // Exporter: how many importers hold a lock now.
  uint32_t live_importers() const;
  // Importer: take a slot (best effort) and count the import.
  void attach();
  // Drops this process's locks and descriptors; the mapping stays until
  // destruction, so concurrent readers never touch unmapped memory.
  void close_locks();

 private:
  StatusPage() = default;
  struct Layout;
  Layout* page_ = nullptr;
  int fd_ = -1;       // exporter: the memfd; importer: -1 (the caller's)
  int lock_fd_ = -1;  // this process's own description, for the locks
  bool exporter_ = false;
};

}  // namespace ipc
}  // namespace vpmm
