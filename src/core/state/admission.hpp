// Admission: the narrow interface through which the pool asks something
// outside itself (a ledger shared with other processes, src/ledger/) before
// it creates physical memory, and tells it when that memory goes. The pool
// holds at most one; without one nothing is asked.
//
// PoolState calls admit before every backend create and give_back after
// every backend release that succeeded; reserve_credit and
// give_back_credit bracket a reservation (vpmm_pool_reserve), whose bytes
// count as admitted until growths draw on them or it is released. Every
// method is thread safe: create_handles runs without the pool mutex.
#pragma once

#include <cstdint>

#include "vpmm.h"

namespace vpmm {

class Admission {
 public:
  virtual ~Admission() = default;
  // OUT_OF_MEMORY (the message names who holds what) when `bytes` more
  // would pass the budget; nothing is admitted then.
  virtual vpmm_status admit(uint64_t bytes) = 0;
  virtual void give_back(uint64_t bytes) = 0;
  virtual vpmm_status reserve_credit(uint64_t bytes) = 0;
  // `bytes`: the reservation's unused part; gives back at most what is
  // left of the credit.
  virtual void give_back_credit(uint64_t bytes) = 0;
};

}  // namespace vpmm
