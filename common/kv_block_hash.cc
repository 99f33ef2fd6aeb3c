#include "common/kv_block_hash.h"

#include <openssl/sha.h>

#include <algorithm>

namespace tandem {
namespace {

void PutLittleEndian(uint64_t v, int bytes, unsigned char* out) {
  for (int i = 0; i < bytes; ++i) out[i] = static_cast<unsigned char>(v >> (8 * i));
}

}  // namespace

uint64_t KvBlockHash(uint64_t parent, std::span<const int32_t> block_tokens) {
  std::vector<unsigned char> message(8 + 4 * block_tokens.size());
  PutLittleEndian(parent, 8, message.data());
  for (size_t i = 0; i < block_tokens.size(); ++i) {
    PutLittleEndian(static_cast<uint32_t>(block_tokens[i]), 4, message.data() + 8 + 4 * i);
  }
  unsigned char digest[SHA256_DIGEST_LENGTH];
  SHA256(message.data(), message.size(), digest);
  uint64_t h = 0;
  for (int i = 7; i >= 0; --i) h = (h << 8) | digest[i];
  return h;
}

std::vector<uint64_t> KvBlockHashChain(std::span<const int32_t> tokens, int32_t block_size,
                                       int64_t max_blocks) {
  std::vector<uint64_t> chain;
  if (block_size < 1) return chain;
  int64_t n = static_cast<int64_t>(tokens.size()) / block_size;
  if (max_blocks >= 0) n = std::min(n, max_blocks);
  chain.reserve(static_cast<size_t>(n));
  uint64_t h = kKvBlockHashSeed;
  for (int64_t i = 0; i < n; ++i) {
    h = KvBlockHash(
        h, tokens.subspan(static_cast<size_t>(i * block_size), static_cast<size_t>(block_size)));
    chain.push_back(h);
  }
  return chain;
}

}  // namespace tandem
