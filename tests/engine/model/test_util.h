// Test utilities: writing safetensors files and tiny random HF model directories.
#ifndef TANDEM_TESTS_ENGINE_MODEL_TEST_UTIL_H_
#define TANDEM_TESTS_ENGINE_MODEL_TEST_UTIL_H_

#include <cstdint>
#include <map>
#include <string>
#include <vector>

namespace tandem::engine::testing {

struct RawTensor {
  std::string dtype;  // "BF16", "F16", "F32", ...
  std::vector<int64_t> shape;
  std::string bytes;
};

// Serialises tensors (in name order, 8-byte aligned header) to safetensors bytes.
std::string SafetensorsBytes(const std::map<std::string, RawTensor>& tensors);
void WriteFile(const std::string& path, const std::string& bytes);

// A fresh empty directory under the test's temp dir.
std::string MakeTempDir(const std::string& name);

struct TinyModelSpec {
  std::string model_type = "llama";  // llama | qwen2 | qwen3
  int hidden = 64, layers = 2, heads = 4, kv_heads = 2, head_dim = 16, intermediate = 96;
  int vocab = 97, max_pos = 512;
  bool tie = false;
  std::string dtype = "BF16";  // storage dtype of every tensor: BF16, F16 or F32
  int shards = 1;
  bool llama3_rope = false;
  uint32_t seed = 1;
};

// Writes config.json + weights of a random model; returns the tensors written (fp32 values,
// before any storage rounding) keyed by name.
std::map<std::string, std::vector<float>> WriteTinyModel(const std::string& dir,
                                                         const TinyModelSpec& spec);

}  // namespace tandem::engine::testing

#endif  // TANDEM_TESTS_ENGINE_MODEL_TEST_UTIL_H_
