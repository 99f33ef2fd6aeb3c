// A real browser as the client: Debian's Chromium (headless, installed by scripts/install-deps.sh)
// loads tests/clients/browser/chat.html from a page server on its own origin, and the page calls
// tandem-router (PD mode, behind an API key) the way browser chat front ends do: fetch() with a
// JSON body and the key in Authorization, which makes the browser send a CORS preflight first.
// With the router's default --cors-allowed-origins (*) the page reads models, a chat completion,
// a stream and a keyless request's 401; the admin API stays closed to it. With CORS turned off
// the browser blocks every call, as it blocks SGLang-incompatible servers.
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <memory>
#include <sstream>
#include <string>
#include <vector>

#include "common/http_server.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/integration/process.h"
#include "tests/integration/router_process.h"
#include "tests/integration/worker_process.h"

namespace tandem::itest {
namespace {

using ::testing::HasSubstr;
using ::testing::MatchesRegex;

const char kApiKey[] = "browser-client-key-3";

std::string ReadFile(const std::string& path) {
  std::ifstream in(path);
  std::stringstream text;
  text << in.rdbuf();
  return text.str();
}

// Serves the page on 127.0.0.1 (an origin of its own: another port than the router's).
class PageServer {
 public:
  PageServer() : server_(HttpServerOptions{}) {
    const std::string page = ReadFile(SourcePath("tests/clients/browser/chat.html"));
    server_.Handle("GET", "/chat.html", [page](HttpRequest, HttpResponder responder) {
      HttpResponse response = HttpResponse::Text(200, page);
      response.content_type = "text/html; charset=utf-8";
      responder.Send(std::move(response));
    });
    started_ = server_.Start().ok() && !page.empty();
  }
  bool started() const { return started_; }
  uint16_t port() const { return server_.port(); }

 private:
  HttpServer server_;
  bool started_ = false;
};

// What the page wrote into #out after its calls to the router on `router_port`, one entry per
// line ("DONE" last once every call ended), read from Chromium's DOM dump.
std::vector<std::string> RunPage(const PageServer& pages, int router_port) {
  char profile[] = "/tmp/tandem-chromium-XXXXXX";
  if (mkdtemp(profile) == nullptr) return {"mkdtemp failed"};
  const std::string url = "http://127.0.0.1:" + std::to_string(pages.port()) +
                          "/chat.html?port=" + std::to_string(router_port) + "&key=" + kApiKey;
  const std::string command =
      "timeout 120 chromium --headless=new --no-sandbox --disable-gpu --no-first-run "
      "--user-data-dir=" +
      std::string(profile) + " --virtual-time-budget=60000 --dump-dom '" + url +
      "' 2>/dev/null; rm -rf " + profile;
  std::string dom;
  FILE* pipe = popen(command.c_str(), "r");
  if (pipe == nullptr) return {"popen failed"};
  char buffer[4096];
  size_t got;
  while ((got = fread(buffer, 1, sizeof(buffer), pipe)) > 0) dom.append(buffer, got);
  pclose(pipe);
  const size_t begin = dom.find("<pre id=\"out\">");
  const size_t end = dom.find("</pre>", begin);
  if (begin == std::string::npos || end == std::string::npos) return {"no #out in: " + dom};
  std::vector<std::string> lines;
  std::stringstream out(dom.substr(begin + 14, end - begin - 14));
  for (std::string line; std::getline(out, line);) lines.push_back(line);
  return lines;
}

class BrowserTest : public ::testing::Test {
 protected:
  void SetUp() override {
    if (std::system("command -v chromium >/dev/null 2>&1") != 0) {
      GTEST_FAIL() << "chromium is not installed: scripts/install-deps.sh installs it";
    }
    ASSERT_TRUE(pages_.started());
  }
  PageServer pages_;
};

TEST_F(BrowserTest, APageOnAnotherOriginUsesTheClientApiButNotTheAdminApi) {
  auto prefill = StartWorker("prefill");
  auto decode = StartWorker("decode");
  auto router = StartRouter({"--cluster-secret", kTestClusterSecret, "--pd-disaggregation",
                             "--prefill", prefill->url(), std::to_string(prefill->bootstrap_port),
                             "--decode", decode->url(), "--api-key", kApiKey});
  const std::vector<std::string> lines = RunPage(pages_, router->port);
  ASSERT_EQ(lines.size(), 6u) << ::testing::PrintToString(lines);
  EXPECT_EQ(lines[0], "models 200 tandem-tiny-english");
  EXPECT_EQ(lines[1], "chat 200 length 8");
  EXPECT_THAT(lines[2], MatchesRegex("stream 200 events [2-9] done"));
  EXPECT_EQ(lines[3], "keyless 401 authentication_error");
  // The admin API answers no preflight: the browser refuses to send the call.
  EXPECT_EQ(lines[4], "admin blocked: TypeError");
  EXPECT_EQ(lines[5], "DONE");

  // CORS off: the browser blocks every call of the page.
  auto closed =
      StartRouter({"--cluster-secret", kTestClusterSecret, "--pd-disaggregation", "--prefill",
                   prefill->url(), std::to_string(prefill->bootstrap_port), "--decode",
                   decode->url(), "--api-key", kApiKey, "--cors-allowed-origins", ""});
  const std::vector<std::string> blocked = RunPage(pages_, closed->port);
  ASSERT_EQ(blocked.size(), 6u) << ::testing::PrintToString(blocked);
  for (size_t i = 0; i < 5; ++i) EXPECT_THAT(blocked[i], HasSubstr("blocked: TypeError"));
}

}  // namespace
}  // namespace tandem::itest
