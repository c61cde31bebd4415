#pragma once

// How pstrain's processes use glibc's malloc.
//
// A step allocates the same large blocks every time: each message ZeroMQ
// receives, the pieces of a large one, a script's gradients in backward.
// glibc maps a block over its mmap threshold (128 KiB, rising as such
// blocks are freed to at most 32 MiB) from fresh pages and unmaps it when
// freed, and gives free memory at the top of a heap back to the kernel
// past its trim threshold: each step then faults the same pages in again,
// one kernel entry per 4 KiB page. On a VM whose page faults are slow (2
// vCPUs under Firecracker: 125 ms to fault in 44.7 MB, 1-2 ms to touch the
// same bytes again) that was half of a 44.7 MB PUSH_PULL's round trip.
//
// KeepFreedMemoryForReuse() has blocks up to kHeapBlockBytes served from
// the heap and keeps up to kKeptFreeBytes of free heap for the next step's
// blocks: a process's resident memory then stays near its peak (what it
// used, never more) instead of following each step down and up. It does
// nothing where the process's GLIBC_TUNABLES sets a glibc.malloc tunable:
// the user's own choice, and the way to leave glibc's defaults
// (GLIBC_TUNABLES=glibc.malloc.mmap_threshold=131072), nor under a
// sanitizer, whose allocator ignores mallopt.

#include <cstddef>

namespace pstrain {

// Blocks up to this size come from the heap: more than a message piece
// (transport/pieces.h) or a state's part (64 MiB), so a step's own are.
inline constexpr size_t kHeapBlockBytes = size_t{96} << 20;
// Free heap kept for reuse, per heap (glibc has one per arena).
inline constexpr size_t kKeptFreeBytes = size_t{256} << 20;

// Applies the policy to this process, once (later calls return the first's
// answer); true when glibc took it. Call at a process's start, or where a
// library begins its work in someone else's (the C API's worker).
bool KeepFreedMemoryForReuse();

// Whether `tunables` (GLIBC_TUNABLES's value; null: unset) sets any of
// glibc's malloc tunables.
bool TunablesSetMalloc(const char* tunables);

}  // namespace pstrain
