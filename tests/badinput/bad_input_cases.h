// The bad-input table: client mistakes and garbage sent to a real tandem-router over the wire,
// each with the status the router must answer and a piece of the error message that names the
// problem (the field, the limit, the model). The decided behaviours behind them are documented in
// router/api/request.h (request bodies) and common/http_server.h (the HTTP layer).
#ifndef TANDEM_TESTS_BADINPUT_BAD_INPUT_CASES_H_
#define TANDEM_TESTS_BADINPUT_BAD_INPUT_CASES_H_

#include <string>
#include <vector>

namespace tandem::itest {

// The limits the routers under test are started with (flags), so the cases can cross them.
inline constexpr int kMaxPayloadBytes = 64 << 10;   // --max-payload-size
inline constexpr int kHeaderLimitBytes = 16 << 10;  // the HTTP server's header limit
inline constexpr int kContextLength = 512;          // the shipped model's max_position_embeddings
inline constexpr int kVocabSize = 3072;

// One request body sent with `POST route` (Content-Type: application/json, the client API key
// unless `auth` is false, plus `headers`).
struct BodyCase {
  std::string name;
  std::string route;
  std::string body;
  int status;           // expected HTTP status
  std::string message;  // expected substring of the JSON error's message ("" for a 2xx)
  std::string headers = "";
  bool auth = true;
};

// Raw bytes written to a fresh connection as they are (malformed HTTP). `api_key` in the text
// is replaced by the client key. `status` 0 means the server must close the connection without
// an answer.
struct RawCase {
  std::string name;
  std::string bytes;
  int status;
  std::string message;  // expected substring of the response body
};

// Bodies for /generate, /v1/completions and /v1/chat/completions that the router must reject
// (plus a few it must accept as documented, e.g. unknown top-level fields).
std::vector<BodyCase> BodyCases();

// Malformed HTTP: request lines, headers, lengths, chunked encoding, limits, auth, routes.
std::vector<RawCase> RawCases();

}  // namespace tandem::itest

#endif  // TANDEM_TESTS_BADINPUT_BAD_INPUT_CASES_H_
