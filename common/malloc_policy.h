#pragma once

// How pstrain's processes use glibc's malloc.
//
// A step allocates the same large blocks every time: each message ZeroMQ
// receives, the pieces of a large one, a script's gradients in backward.
// glibc maps a block over its mmap threshold (128 KiB, rising as such
// blocks are freed to at most 32 MiB) from fresh pages and unmaps it when
// freed, and gives free memory at the top of the heap back to the kernel
// past its trim threshold: each step then faults the same pages in again,
// one kernel entry per 4 KiB page. On a VM whose page faults are slow (2
// vCPUs under Firecracker: 125 ms to fault in 44.7 MB, 1-2 ms to write the
// same bytes again) that was half of a 44.7 MB PUSH_PULL's round trip.
//
// KeepFreedMemoryForReuse() has blocks up to kHeapBlockBytes served from
// the heap and keeps up to kKeptFreeBytes of free memory at its top for
// the next step's blocks, so a process's resident memory stays near its
// peak instead of following each step down and up. Threads other than the
// main one (ZeroMQ's I/O threads) allocate from heaps of at most 64 MiB
// each: there a block that does not fit one is mapped afresh as before.
// glibc takes these settings from 2.35 on (older ones refuse a threshold
// over 32 MiB: the policy then says so once and leaves malloc as it is).
//
// It does nothing where the user set malloc's tunables (GLIBC_TUNABLES
// with a glibc.malloc tunable, or a MALLOC_*_ variable): to keep glibc's
// own behaviour, GLIBC_TUNABLES=glibc.malloc.check=0 (a tunable that
// changes nothing itself). ASan's allocator ignores it; under TSan glibc
// takes it and TSan's allocator does not use glibc's.

#include <cstddef>

namespace pstrain {

// Blocks up to this size come from the heap: more than a message piece
// (transport/pieces.h) or a state's part (64 MiB), so a step's own are.
inline constexpr size_t kHeapBlockBytes = size_t{96} << 20;
// Free memory kept at the top of a heap for reuse.
inline constexpr size_t kKeptFreeBytes = size_t{256} << 20;

// Applies the policy to this process, once (later calls return the first's
// answer); true when glibc took it. Call at a process's start, or where a
// library begins its work in someone else's (the C API's worker).
bool KeepFreedMemoryForReuse();

// Whether the environment sets malloc's tunables: `tunables` is
// GLIBC_TUNABLES's value (null: unset); `malloc_variable` whether one of
// glibc's MALLOC_MMAP_THRESHOLD_, MALLOC_TRIM_THRESHOLD_, MALLOC_TOP_PAD_,
// MALLOC_MMAP_MAX_ is set.
bool UserSetsMalloc(const char* tunables, bool malloc_variable);
// The same for this process's environment.
bool EnvironmentSetsMalloc();

}  // namespace pstrain
