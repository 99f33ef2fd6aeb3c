// Where tandemctl finds the admin key (tools/tandemctl/admin_key.h): flag or environment first,
// then a key file, then a run directory, then the local cluster's default run directory only
// for the router that cluster runs.
#include "tools/tandemctl/admin_key.h"

#include <filesystem>
#include <fstream>
#include <string>

#include "gtest/gtest.h"

namespace tandem::ctl {
namespace {

namespace fs = std::filesystem;

class AdminKeyTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = fs::path(::testing::TempDir()) / "tandemctl-admin-key-test";
    fs::remove_all(dir_);
    fs::create_directories(dir_ / "run");
    Write(dir_ / "run" / "admin-key", "  key-from-the-run-dir \n");
    Write(dir_ / "run" / "router.url", "http://127.0.0.1:30000\n");
    Write(dir_ / "key-file", "key-from-the-file\nignored\n");
  }
  void TearDown() override { fs::remove_all(dir_); }
  static void Write(const fs::path& path, const std::string& text) { std::ofstream(path) << text; }

  fs::path dir_;
};

TEST_F(AdminKeyTest, FlagOrEnvironmentThenFileThenRunDirectory) {
  AdminKeySources s;
  s.router = "http://127.0.0.1:30000";
  s.key = "from-the-flag";
  s.key_file = (dir_ / "key-file").string();
  s.run_dir = (dir_ / "run").string();
  EXPECT_EQ(*ResolveAdminKey(s), "from-the-flag");
  s.key.clear();
  EXPECT_EQ(*ResolveAdminKey(s), "key-from-the-file");
  s.key_file.clear();
  EXPECT_EQ(*ResolveAdminKey(s), "key-from-the-run-dir");
  s.run_dir.clear();
  EXPECT_EQ(*ResolveAdminKey(s), "");
}

TEST_F(AdminKeyTest, TheDefaultRunDirectoryServesOnlyItsOwnRouter) {
  AdminKeySources s;
  s.default_run_dirs = {(dir_ / "missing").string(), (dir_ / "run").string()};
  s.router = "http://127.0.0.1:30000/";
  EXPECT_EQ(*ResolveAdminKey(s), "key-from-the-run-dir");
  // Another router never receives the local cluster's key.
  s.router = "http://10.0.0.9:30000";
  EXPECT_EQ(*ResolveAdminKey(s), "");
}

TEST_F(AdminKeyTest, UnreadableSourcesAreNamed) {
  AdminKeySources s;
  s.key_file = (dir_ / "nope").string();
  absl::StatusOr<std::string> key = ResolveAdminKey(s);
  ASSERT_FALSE(key.ok());
  EXPECT_NE(key.status().message().find(s.key_file), std::string::npos) << key.status();
  s.key_file.clear();
  s.run_dir = (dir_ / "missing").string();
  key = ResolveAdminKey(s);
  ASSERT_FALSE(key.ok());
  EXPECT_NE(key.status().message().find("admin-key"), std::string::npos) << key.status();
}

}  // namespace
}  // namespace tandem::ctl
