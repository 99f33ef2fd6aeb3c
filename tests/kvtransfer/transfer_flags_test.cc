// The operator-facing transfer flags (kvtransfer/transfer_flags.h): SGLang's backend names.
#include "kvtransfer/transfer_flags.h"

#include <gtest/gtest.h>

#include <optional>
#include <sstream>
#include <string>

namespace tandem::kv {
namespace {

struct Parsed {
  std::optional<int> exit_code;
  TransferFlags transfer;
  std::string error;
};

Parsed ParseBackend(const std::string& backend) {
  Parsed p;
  Flags flags("tandem-prefill", "transfer flags");
  std::ostringstream out, err;
  flags.SetOutput(&out, &err);
  RegisterTransferFlags(flags, &p.transfer);
  p.exit_code = flags.Parse({"--disaggregation-transfer-backend", backend});
  p.error = flags.error();
  return p;
}

TEST(TransferFlagsTest, SglangRdmaEngineNamesMeanRdma) {
  for (const std::string name : {"mooncake", "nixl"}) {
    const Parsed p = ParseBackend(name);
    ASSERT_EQ(p.exit_code, std::nullopt) << name << ": " << p.error;
    EXPECT_EQ(p.transfer.backend, "rdma") << name;
    EXPECT_EQ(p.transfer.backend_alias, name);
  }
  for (const std::string name : {"tcp", "rdma"}) {
    const Parsed p = ParseBackend(name);
    ASSERT_EQ(p.exit_code, std::nullopt) << name << ": " << p.error;
    EXPECT_EQ(p.transfer.backend, name);
    EXPECT_EQ(p.transfer.backend_alias, "");
  }
}

TEST(TransferFlagsTest, OtherBackendsAreRefusedByName) {
  for (const std::string name : {"ascend", "carrier-pigeon", "Mooncake", ""}) {
    const Parsed p = ParseBackend(name);
    EXPECT_EQ(p.exit_code, 2) << name;
    EXPECT_NE(p.error.find("--disaggregation-transfer-backend"), std::string::npos) << p.error;
  }
}

}  // namespace
}  // namespace tandem::kv
