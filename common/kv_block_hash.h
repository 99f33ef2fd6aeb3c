// The KV block hash contract shared by workers (which publish the blocks their radix cache holds)
// and the router (which indexes them and predicts a prompt's cached prefix). docs/router.md
// "KV events" states it for operators.
//
// A block is `block_size` consecutive prompt token ids starting at a multiple of block_size; only
// full blocks are hashed (a radix cache never caches a partial block). Block i's hash covers the
// whole prefix tokens[0, (i+1)*block_size) as a chain:
//   h(-1) = kKvBlockHashSeed
//   h(i)  = first 8 bytes, read little-endian, of
//           SHA-256( h(i-1) as 8 bytes little-endian || tokens[i*bs .. (i+1)*bs) each as int32
//           little-endian )
// so two blocks hash alike only if their whole prefixes are equal (SHA-256 keeps a client from
// crafting colliding prompts; a collision could only misroute, never change an output, because
// the worker's cache itself compares tokens). The block size is not hashed: events and snapshots
// carry it, and the router compares hashes only from a worker whose block size it used.
//
// Thread-safety: pure functions.
#ifndef TANDEM_COMMON_KV_BLOCK_HASH_H_
#define TANDEM_COMMON_KV_BLOCK_HASH_H_

#include <cstdint>
#include <span>
#include <vector>

namespace tandem {

// "tandem" in ASCII, then the contract's version (1).
inline constexpr uint64_t kKvBlockHashSeed = 0x74616e64656d0001ULL;

// h(i) from h(i-1) = `parent` and block i's token ids (block_size of them).
uint64_t KvBlockHash(uint64_t parent, std::span<const int32_t> block_tokens);

// The chain hashes of the first min(tokens.size() / block_size, max_blocks) full blocks
// (max_blocks < 0: no limit). block_size < 1 yields nothing.
std::vector<uint64_t> KvBlockHashChain(std::span<const int32_t> tokens, int32_t block_size,
                                       int64_t max_blocks = -1);

}  // namespace tandem

#endif  // TANDEM_COMMON_KV_BLOCK_HASH_H_
