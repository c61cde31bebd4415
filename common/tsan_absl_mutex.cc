// Linked into every target of a ThreadSanitizer build
// (cmake/PstrainHelpers.cmake); not part of any other build.
//
// Why: Debian's libabsl is not built with TSan, so absl::Mutex's Lock and
// Unlock run uninstrumented atomics and futexes that TSan cannot see: it
// then reports every field an absl::Mutex guards (HeartbeatMonitor's status_,
// for one) as a data race between the threads that take turns under the
// lock. A TSan-built absl tells TSan about each lock and unlock itself
// (ABSL_TSAN_MUTEX_* in mutex.cc). These definitions do the same for the
// library we have: they take precedence over the shared library's for every
// call from our code (the executable's definition wins at link time), tell
// TSan what happens, and call the library's own function, found by dlsym.
// Only the members pstrain can call are covered; a project call to another
// locking member (Await, LockWhen, CondVar) would need one here too.

#include <dlfcn.h>
#include <sanitizer/tsan_interface.h>

#include <cstdio>
#include <cstdlib>
#include <string>

#include "absl/synchronization/mutex.h"

namespace {

using MutexFn = void (*)(absl::Mutex*);
using TryLockFn = bool (*)(absl::Mutex*);

#define PSTRAIN_STR2(x) #x
#define PSTRAIN_STR(x) PSTRAIN_STR2(x)
// Mangled names of absl::Mutex members inside absl's inline namespace.
#define PSTRAIN_ABSL_NS PSTRAIN_STR(ABSL_OPTION_INLINE_NAMESPACE_NAME)

template <typename Fn>
Fn Real(const char* member) {
  const std::string name = std::string("_ZN4absl") +
                           std::to_string(sizeof(PSTRAIN_ABSL_NS) - 1) + PSTRAIN_ABSL_NS +
                           "5Mutex" + member;
  void* fn = dlsym(RTLD_NEXT, name.c_str());
  if (fn == nullptr) {
    std::fprintf(stderr, "tsan_absl_mutex: %s not found in libabsl\n", name.c_str());
    std::abort();
  }
  return reinterpret_cast<Fn>(fn);
}

}  // namespace

namespace absl {
ABSL_NAMESPACE_BEGIN

Mutex::~Mutex() {
  static const MutexFn real = Real<MutexFn>("D2Ev");
  real(this);
  __tsan_mutex_destroy(this, 0);
}

void Mutex::Lock() {
  static const MutexFn real = Real<MutexFn>("4LockEv");
  __tsan_mutex_pre_lock(this, 0);
  real(this);
  __tsan_mutex_post_lock(this, 0, 0);
}

void Mutex::Unlock() {
  static const MutexFn real = Real<MutexFn>("6UnlockEv");
  __tsan_mutex_pre_unlock(this, 0);
  real(this);
  __tsan_mutex_post_unlock(this, 0);
}

bool Mutex::TryLock() {
  static const TryLockFn real = Real<TryLockFn>("7TryLockEv");
  __tsan_mutex_pre_lock(this, __tsan_mutex_try_lock);
  const bool locked = real(this);
  __tsan_mutex_post_lock(this, __tsan_mutex_try_lock | (locked ? 0 : __tsan_mutex_try_lock_failed), 0);
  return locked;
}

void Mutex::ReaderLock() {
  static const MutexFn real = Real<MutexFn>("10ReaderLockEv");
  __tsan_mutex_pre_lock(this, __tsan_mutex_read_lock);
  real(this);
  __tsan_mutex_post_lock(this, __tsan_mutex_read_lock, 0);
}

void Mutex::ReaderUnlock() {
  static const MutexFn real = Real<MutexFn>("12ReaderUnlockEv");
  __tsan_mutex_pre_unlock(this, __tsan_mutex_read_lock);
  real(this);
  __tsan_mutex_post_unlock(this, __tsan_mutex_read_lock);
}

ABSL_NAMESPACE_END
}  // namespace absl
