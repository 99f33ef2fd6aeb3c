// Giving freed heap memory back to the system after a request that made a lot of it.
//
// glibc's malloc keeps what a thread freed in its arena for reuse, and gives back only the top of
// the heap. A large request leaves the process that much larger for good: a 17 MB JSON body of
// token ids peaks near 160 MB while it is parsed, and left the router ~25 MB larger after one
// request and ~60 MB after a few (measured on tandem-router, Debian 12's glibc 2.36).
// ReleaseFreedMemory() returns the arenas' free pages (malloc_trim). Its cost is the pages it
// gives back: ~70 ms after ~200 MB of small blocks were freed (a parse of that size takes ~7x as
// long), microseconds when there is nothing to give. Thread-safe.
#ifndef TANDEM_COMMON_RELEASE_MEMORY_H_
#define TANDEM_COMMON_RELEASE_MEMORY_H_

#include <cstddef>

namespace tandem {

// Requests whose body is at least this large are worth a release once they are handled.
inline constexpr size_t kReleaseAfterBodyBytes = size_t{1} << 20;

// Returns every arena's free pages to the system. Call it off I/O threads, with no lock held.
void ReleaseFreedMemory();

// Blocks of kReleaseAfterBodyBytes or more (request bodies, read buffers) are mapped on their own
// from now on, so freeing one gives it back at once. glibc's default threshold (128 KiB) rises to
// the size of the first such block freed, up to 32 MiB, and later ones then come from an arena
// and stay there; freed after a ReleaseFreedMemory (a connection's buffers are, once its answer
// is written), they stay. For processes whose large blocks are per request (the router), not
// per step: a worker's step buffers would be mapped and unmapped every step. Call first thing in
// main(), before threads start.
void MapLargeBlocksAlone();

}  // namespace tandem

#endif  // TANDEM_COMMON_RELEASE_MEMORY_H_
