// Worker url parsing: the forms SGLang's router accepts, and clear errors for the rest.
#include <gtest/gtest.h>

#include "router/workers/worker_client.h"

namespace tandem::router {
namespace {

TEST(WorkerUrlTest, AcceptedForms) {
  struct Case {
    std::string url, host, target;
    int port;
  };
  for (const Case& c : std::vector<Case>{
           {"http://10.0.0.7:30001", "10.0.0.7", "10.0.0.7:30001", 30001},
           {"grpc://worker-3.local:8000", "worker-3.local", "worker-3.local:8000", 8000},
           {"127.0.0.1:1", "127.0.0.1", "127.0.0.1:1", 1},
           {"localhost:65535/", "localhost", "localhost:65535", 65535},
           {"[::1]:30001", "::1", "[::1]:30001", 30001},
           {"http://[fe80::1%eth0]:9000", "fe80::1%eth0", "[fe80::1%eth0]:9000", 9000},
       }) {
    auto a = ParseWorkerUrl(c.url);
    ASSERT_TRUE(a.ok()) << c.url << ": " << a.status();
    EXPECT_EQ(a->host, c.host) << c.url;
    EXPECT_EQ(a->port, c.port) << c.url;
    EXPECT_EQ(a->target, c.target) << c.url;
  }
}

TEST(WorkerUrlTest, RejectedFormsNameTheUrl) {
  for (const std::string url :
       {"", "http://", "https://h:1", "ftp://h:1", "h", "h:", ":80", "h:0", "h:65536", "h:80x",
        "h:-1", "http://h:80/generate", "::1:80", "[::1]", "[::1]80", "[1.2.3.4]:80", "[::1:80",
        "h h:80", "http://h:99999999999999999999"}) {
    auto a = ParseWorkerUrl(url);
    ASSERT_FALSE(a.ok()) << url;
    EXPECT_EQ(a.status().code(), absl::StatusCode::kInvalidArgument) << url;
    EXPECT_NE(std::string(a.status().message()).find("\"" + url + "\""), std::string::npos)
        << a.status();
  }
}

TEST(WorkerUrlTest, CreateKeepsTheUrlAndHost) {
  auto client = WorkerClient::Create("http://127.0.0.1:30001");
  ASSERT_TRUE(client.ok()) << client.status();
  EXPECT_EQ((*client)->url(), "http://127.0.0.1:30001");
  EXPECT_EQ((*client)->host(), "127.0.0.1");
  EXPECT_EQ((*client)->port(), 30001);
  EXPECT_FALSE(WorkerClient::Create("tcp://127.0.0.1:1").ok());
}

}  // namespace
}  // namespace tandem::router
