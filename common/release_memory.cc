#include "common/release_memory.h"

#include <malloc.h>

namespace tandem {

void ReleaseFreedMemory() { malloc_trim(0); }

void MapLargeBlocksAlone() { mallopt(M_MMAP_THRESHOLD, static_cast<int>(kReleaseAfterBodyBytes)); }

}  // namespace tandem
