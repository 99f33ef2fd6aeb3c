#include "tests/badinput/bad_input_cases.h"

#include <string>
#include <vector>

#include "absl/strings/str_cat.h"

namespace tandem::itest {
namespace {

const char kGen[] = "/generate";
const char kCmp[] = "/v1/completions";
const char kChat[] = "/v1/chat/completions";
const char kResp[] = "/v1/responses";

// A /generate body with `params` as its sampling_params (JSON object text without braces).
std::string Gen(const std::string& params) {
  return R"({"text":"Tell me a fortune.","sampling_params":{"max_new_tokens":4)" +
         (params.empty() ? std::string() : "," + params) + "}}";
}
// A /v1/completions body with `fields` added.
std::string Cmp(const std::string& fields) {
  return R"({"model":"tandem-tiny-english","prompt":"Tell me a fortune.","max_tokens":4)" +
         (fields.empty() ? std::string() : "," + fields) + "}";
}
// A /v1/chat/completions body with `fields` added to a valid one-message conversation.
std::string Chat(const std::string& fields) {
  return R"({"model":"tandem-tiny-english","messages":[{"role":"user","content":"Hi"}],)"
         R"("max_tokens":4)" +
         (fields.empty() ? std::string() : "," + fields) + "}";
}
// A /v1/responses body with `fields` added to a valid text input.
std::string Resp(const std::string& fields) {
  return R"({"model":"tandem-tiny-english","input":"Hi","max_output_tokens":4)" +
         (fields.empty() ? std::string() : "," + fields) + "}";
}
// A chat body whose messages are `messages` (JSON array text).
std::string ChatMessages(const std::string& messages) {
  return R"({"model":"tandem-tiny-english","max_tokens":4,"messages":)" + messages + "}";
}

std::string Repeat(const std::string& s, int n) {
  std::string out;
  for (int i = 0; i < n; ++i) out += s;
  return out;
}

// `n` comma-separated token ids, all inside the vocabulary.
std::string Ids(int n) {
  std::string out;
  for (int i = 0; i < n; ++i) absl::StrAppend(&out, i ? "," : "", 10 + (i * 37) % 3000);
  return out;
}

// `before`, a NUL byte, then `after`.
std::string WithNul(const std::string& before, const std::string& after) {
  return before + std::string(1, '\0') + after;
}

std::string StopList(int n) {
  std::string out = "[";
  for (int i = 0; i < n; ++i) out += (i ? ",\"s" : "\"s") + std::to_string(i) + "\"";
  return out + "]";
}

// A POST with a Content-Length body, as raw bytes.
std::string Post(const std::string& target, const std::string& body,
                 const std::string& headers = "") {
  return "POST " + target + " HTTP/1.1\r\nHost: t\r\nAuthorization: Bearer api_key\r\n" + headers +
         "Content-Length: " + std::to_string(body.size()) + "\r\nConnection: close\r\n\r\n" + body;
}

// A request line and `headers` announcing a 60000-byte body that is not sent.
std::string Announce(const std::string& request_line, const std::string& headers) {
  return request_line + " HTTP/1.1\r\nHost: t\r\n" + headers + "Content-Length: 60000\r\n\r\n";
}

// A chunked POST whose chunk section is `chunks` as given.
std::string Chunked(const std::string& chunks, const std::string& extra_headers = "") {
  return "POST /generate HTTP/1.1\r\nHost: t\r\nAuthorization: Bearer api_key\r\n" + extra_headers +
         "Transfer-Encoding: chunked\r\nConnection: close\r\n\r\n" + chunks;
}

std::string Hex(size_t n) {
  static const char kDigits[] = "0123456789abcdef";
  std::string out;
  do {
    out.insert(out.begin(), kDigits[n % 16]);
    n /= 16;
  } while (n != 0);
  return out;
}

}  // namespace

std::vector<BodyCase> BodyCases() {
  const std::string over_context_ids = "[" + Ids(kContextLength + 40) + "]";
  const std::string over_context_text = Repeat("The sea is calm tonight. ", 200);
  std::vector<BodyCase> c = {
      // Not JSON, or not an object.
      {"empty body", kGen, "", 400, "not valid JSON"},
      {"malformed JSON", kGen, "{nope", 400, "not valid JSON"},
      {"truncated JSON", kGen, R"({"text":"hi","sampling_params":{"max_new_tokens":)", 400,
       "not valid JSON"},
      {"truncated chat JSON", kChat, R"({"messages":[{"role":"user","content":"hi)", 400,
       "not valid JSON"},
      {"trailing garbage", kCmp, R"({"prompt":"a"} xyz)", 400, "not valid JSON"},
      {"JSON array", kGen, "[1,2,3]", 400, "must be a JSON object, got array"},
      {"JSON string", kCmp, R"("hello")", 400, "must be a JSON object, got string"},
      {"JSON null", kChat, "null", 400, "must be a JSON object, got null"},
      {"JSON number", kGen, "42", 400, "must be a JSON object, got integer"},
      {"nested too deep", kGen, R"({"text":"hi","x":)" + Repeat("[", 100) + Repeat("]", 100) + "}",
       400, "deeper than 64"},
      {"too many values for the payload size", kChat,
       Chat(R"("x":[)" + Repeat("{},", 20000) + "{}]"), 400, "too many JSON values"},
      {"number overflow", kGen, Gen(R"("temperature":1e999)"), 400, "number overflow"},
      // Invalid UTF-8 and escapes.
      {"invalid UTF-8 in text", kGen, "{\"text\":\"fortune \xff\xfe\"}", 400, "UTF-8"},
      {"invalid UTF-8 outside strings", kGen, "{\"text\":\"hi\"}\xc3", 400, "not valid JSON"},
      {"invalid UTF-8 in messages", kChat,
       ChatMessages("[{\"role\":\"user\",\"content\":\"caf\xc3\x28\"}]"), 400, "UTF-8"},
      {"invalid UTF-8 in role", kChat,
       ChatMessages("[{\"role\":\"us\xe2\x82\",\"content\":\"a\"}]"), 400, "UTF-8"},
      {"lone surrogate escape", kGen, R"({"text":"\ud800 fortune"})", 400, "surrogate"},
      // Wrong types, every kind of field.
      {"text is a number", kGen, R"({"text":42})", 400, "text must be a string"},
      {"input_ids is a string", kGen, R"({"input_ids":"1 2 3"})", 400, "input_ids"},
      {"input_ids holds a string", kGen, R"({"input_ids":[1,"x"]})", 400, "input_ids[1]"},
      {"input_ids negative", kGen, R"({"input_ids":[5,-1]})", 400, "input_ids[1]"},
      {"input_ids fraction", kGen, R"({"input_ids":[1.5]})", 400, "input_ids[0]"},
      {"sampling_params not an object", kGen, R"({"text":"hi","sampling_params":"greedy"})", 400,
       "sampling_params must be an object, got string"},
      {"string where int", kGen, Gen(R"("max_new_tokens":"many")"), 400,
       "sampling_params.max_new_tokens must be an integer, got string"},
      {"negative max_new_tokens", kGen, Gen(R"("max_new_tokens":-5)"), 400,
       "sampling_params.max_new_tokens must be an integer in [0, 2147483647]"},
      {"fractional max_new_tokens", kGen, Gen(R"("max_new_tokens":2.5)"), 400,
       "sampling_params.max_new_tokens must be an integer, got 2.5"},
      {"max_new_tokens beyond int32", kGen, Gen(R"("max_new_tokens":99999999999)"), 400,
       "sampling_params.max_new_tokens must be an integer in"},
      {"float where bool", kGen, Gen(R"("ignore_eos":1.0)"), 400,
       "sampling_params.ignore_eos must be a boolean, got number"},
      {"string where bool", kGen, R"({"text":"hi","stream":"yes"})", 400,
       "stream must be a boolean, got string"},
      {"int where bool", kGen, R"({"text":"hi","return_logprob":1})", 400,
       "return_logprob must be a boolean, got integer"},
      {"string where number", kGen, Gen(R"("temperature":"hot")"), 400,
       "sampling_params.temperature must be a number"},
      {"object where string", kGen, R"({"text":"hi","rid":{"a":1}})", 400, "rid must be a string"},
      {"completions max_tokens negative", kCmp, Cmp(R"("max_tokens":-1,"n":1)"), 400,
       "max_tokens must be an integer in [0"},
      {"completions max_tokens string", kCmp,
       R"({"model":"tandem-tiny-english","prompt":"a","max_tokens":"10"})", 400,
       "max_tokens must be an integer, got string"},
      {"completions prompt object", kCmp, R"({"prompt":{"text":"a"}})", 400,
       "prompt must be a string or an array of token ids, got object"},
      {"completions prompt missing", kCmp, R"({"model":"tandem-tiny-english"})", 400,
       "prompt is required"},
      {"stream_options not an object", kCmp, Cmp(R"("stream":true,"stream_options":3)"), 400,
       "stream_options must be an object, got integer"},
      {"include_usage not a bool", kCmp,
       Cmp(R"("stream":true,"stream_options":{"include_usage":"yes"})"), 400,
       "stream_options.include_usage must be a boolean"},
      {"user not a string", kChat, Chat(R"("user":7)"), 400, "user must be a string"},
      {"chat max_completion_tokens bool", kChat, Chat(R"("max_completion_tokens":true)"), 400,
       "max_completion_tokens must be an integer, got boolean"},
      {"chat logprobs int", kChat, Chat(R"("logprobs":1)"), 400,
       "logprobs must be a boolean, got integer"},
      // Messages.
      {"messages missing", kChat, R"({"model":"tandem-tiny-english"})", 400,
       "messages is required"},
      {"messages not an array", kChat, ChatMessages(R"("hello")"), 400,
       "messages must be an array, got string"},
      {"empty messages", kChat, ChatMessages("[]"), 400, "messages must not be empty"},
      {"message not an object", kChat, ChatMessages("[1]"), 400,
       "messages[0] must be an object, got integer"},
      {"message without content", kChat, ChatMessages(R"([{"role":"user"}])"), 400,
       "messages[0].content is required"},
      {"message without role", kChat, ChatMessages(R"([{"content":"hi"}])"), 400,
       "messages[0].role is required"},
      {"unknown role", kChat,
       ChatMessages(R"([{"role":"user","content":"a"},{"role":"wizard","content":"b"}])"), 400,
       "messages[1].role 'wizard' is not supported"},
      {"function role", kChat, ChatMessages(R"([{"role":"function","content":"42"}])"), 400,
       "messages[0].role 'function' is not supported"},
      {"content a number", kChat, ChatMessages(R"([{"role":"user","content":42}])"), 400,
       "messages[0].content must be a string or an array of text parts, got integer"},
      {"image content part", kChat,
       ChatMessages(
           R"([{"role":"user","content":[{"type":"image_url","image_url":{"url":"x"}}]}])"),
       400, "messages[0].content[0].type 'image_url' is not supported"},
      {"text part without text", kChat,
       ChatMessages(R"([{"role":"user","content":[{"type":"text"}]}])"), 400,
       "messages[0].content[0].text is required"},
      {"tool without a function", kChat, Chat(R"("tools":[{"type":"function"}])"), 400,
       "tools[0].function must be an object"},
      {"tool_choice naming an unknown function", kChat,
       Chat(R"("tools":[{"type":"function","function":{"name":"f"}}],)"
            R"("tool_choice":{"type":"function","function":{"name":"g"}})"),
       400, "tool_choice.function.name 'g' is not a function of tools"},
      {"audio output", kChat, Chat(R"("modalities":["text","audio"])"), 400,
       "modalities \"audio\" is not supported"},
      {"response_format of an unknown type", kChat, Chat(R"("response_format":{"type":"xml"})"),
       400,
       "response_format.type must be \"text\", \"json_object\", \"json_schema\" or "
       "\"structural_tag\""},
      {"response_format schema with an unsupported keyword", kChat,
       Chat(R"("response_format":{"type":"json_schema","json_schema":{"name":"x",)"
            R"("schema":{"type":"integer","multipleOf":2}}})"),
       400, "json_schema: unsupported keyword 'multipleOf'"},
      {"response_format structural tag without triggers", kChat,
       Chat(R"("response_format":{"type":"structural_tag","structures":[{"begin":"<a>",)"
            R"("schema":{"type":"integer"},"end":"</a>"}]})"),
       400, "response_format: structural_tag: triggers must be a list of 1 to 16 strings"},
      {"structural_tag that is not JSON", kGen, Gen(R"("structural_tag":"{structures")"), 400,
       "sampling_params.structural_tag: not valid JSON"},
      {"structural_tag with a begin no trigger starts", kGen,
       Gen(R"j("structural_tag":{"structures":[{"begin":"(a","end":")"}],"triggers":["<"]})j"), 400,
       "sampling_params.structural_tag: structures[0].begin does not start with "
       "any trigger"},
      {"structural_tag with a huge begin", kGen,
       Gen(R"("structural_tag":{"structures":[{"begin":"<)" + std::string(5000, 'a') +
           R"(","end":""}],"triggers":["<"]})"),
       400, "structures[0].begin must be at most 1024 bytes, got 5001"},
      // Unknown and unsupported fields.
      {"unknown sampling parameter", kGen, Gen(R"("temprature":0.5)"), 400,
       "sampling_params.temprature is not a known sampling parameter"},
      {"OpenAI name in sampling_params", kGen, Gen(R"("min_tokens":2)"), 400,
       "sampling_params.min_tokens is not a known sampling parameter"},
      {"regex constraint with lookahead", kGen, Gen(R"j("regex":"a(?=b)")j"), 400,
       "sampling_params.regex: group flags, lookaround"},
      {"ebnf without root", kGen, Gen(R"("ebnf":"start ::= \"a\"")"), 400,
       "sampling_params.ebnf: no rule named 'root'"},
      {"repetition_penalty a string", kGen, Gen(R"("repetition_penalty":"1.3")"), 400,
       "sampling_params.repetition_penalty must be a number"},
      {"image_data", kGen, R"({"text":"hi","image_data":"aGk="})", 400,
       "image_data is not supported"},
      {"completions suffix", kCmp, Cmp(R"("suffix":"end")"), 400, "suffix is not supported"},
      {"logit_bias key not a token id", kCmp, Cmp(R"("logit_bias":{"five":10})"), 400,
       "logit_bias keys must be token ids"},
      {"logit_bias over 100", kCmp, Cmp(R"("logit_bias":{"5":1000})"), 400,
       "logit_bias[\"5\"] must be a number in [-100, 100]"},
      {"logit_bias id outside the vocabulary", kCmp, Cmp(R"("logit_bias":{"999999":1})"), 400,
       "logit_bias: token id 999999 is outside the model's vocabulary (ids 0 to "},
      {"min_tokens over max_tokens", kCmp, Cmp(R"("min_tokens":9)"), 400,
       "min_new_tokens (min_tokens) is 9, more than the request's max_new_tokens"},
      {"unknown top-level field is ignored", kGen,
       R"({"text":"hi","sampling_params":{"max_new_tokens":2},"my_field":[1,2]})", 200, ""},
      // Sampling parameters out of range.
      {"temperature negative", kGen, Gen(R"("temperature":-0.1)"), 400,
       "sampling_params.temperature must be a number in [0"},
      {"temperature negative (OpenAI)", kCmp, Cmp(R"("temperature":-1)"), 400,
       "temperature must be a number in [0"},
      {"top_p zero", kGen, Gen(R"("top_p":0)"), 400, "sampling_params.top_p must be in (0, 1]"},
      {"top_p above one", kCmp, Cmp(R"("top_p":1.5)"), 400, "top_p must be a number in [0, 1]"},
      {"top_k below -1", kGen, Gen(R"("top_k":-2)"), 400,
       "sampling_params.top_k must be an integer in [-1"},
      {"stream_interval zero", kGen, Gen(R"("stream_interval":0)"), 400,
       "sampling_params.stream_interval must be an integer in [1"},
      {"min_p negative", kGen, Gen(R"("min_p":-0.5)"), 400,
       "sampling_params.min_p must be a number in [0, 1]"},
      {"min_p above one", kChat, Chat(R"("min_p":2)"), 400, "min_p must be a number in [0, 1]"},
      {"n above the cap", kCmp, Cmp(R"("n":129)"), 400, "n must be an integer in [1, 128]"},
      {"n zero", kChat, Chat(R"("n":0)"), 400, "n must be an integer in [1"},
      {"best_of above n", kCmp, Cmp(R"("best_of":2)"), 400,
       "best_of greater than n is not supported"},
      {"echo not a boolean", kCmp, Cmp(R"("echo":"yes")"), 400, "echo must be a boolean"},
      {"logprob_start_len past the prompt", kGen,
       R"({"input_ids":[1,2,3],"return_logprob":true,"logprob_start_len":3})", 400,
       "logprob_start_len (3) must be less than the number of input tokens (3)"},
      {"logprob_start_len below -1", kGen, R"({"text":"hi","logprob_start_len":-2})", 400,
       "logprob_start_len must be an integer in [-1"},
      {"completions logprobs 6", kCmp, Cmp(R"("logprobs":6)"), 400,
       "logprobs must be an integer in [0, 5]"},
      {"completions logprobs negative", kCmp, Cmp(R"("logprobs":-1)"), 400,
       "logprobs must be an integer in [0, 5]"},
      {"chat top_logprobs without logprobs", kChat, Chat(R"("top_logprobs":5)"), 400,
       "top_logprobs requires logprobs: true"},
      {"chat top_logprobs 50", kChat, Chat(R"("top_logprobs":50)"), 400,
       "top_logprobs must be an integer in [0, 20]"},
      {"top_logprobs_num 21", kGen, R"({"text":"hi","return_logprob":true,"top_logprobs_num":21})",
       400, "top_logprobs_num must be an integer in [0, 20]"},
      {"stop too many", kCmp, Cmp(R"("stop":)" + StopList(65)), 400,
       "stop has 65 entries; at most 64"},
      {"stop wrong type", kCmp, Cmp(R"("stop":5)"), 400,
       "stop must be a string or an array of strings"},
      {"stop entry wrong type", kGen, Gen(R"("stop":["a",3])"), 400, "sampling_params.stop[1]"},
      {"stop string over 256 bytes", kGen,
       Gen(R"("stop":["a",")" + std::string(300, 'b') + R"("])"), 400,
       "sampling_params.stop[1] is 300 bytes; a stop string is at most 256 bytes"},
      {"stop_token_ids negative", kGen, Gen(R"("stop_token_ids":[-1])"), 400,
       "sampling_params.stop_token_ids"},
      {"frequency_penalty", kCmp, Cmp(R"("frequency_penalty":3)"), 400,
       "frequency_penalty must be a number in [-2, 2]"},
      {"seed below int64", kCmp, Cmp(R"("seed":-1e19)"), 400,
       "seed must be an integer in [-9223372036854775808"},
      // Fields a client sends that would change the answer if ignored.
      {"legacy functions", kChat, Chat(R"("functions":[{"name":"f"}])"), 400,
       "functions is not supported by this server; send them as tools"},
      {"SGLang's stop_regex (OpenAI)", kCmp, Cmp(R"("stop_regex":"\\d")"), 400,
       "stop_regex is not supported by this server"},
      // Models.
      // A name that is not the served model's is a 404 (--any-model-name serves any, as SGLang).
      {"unknown model", kCmp, R"({"model":"gpt-4","prompt":"a","max_tokens":2})", 404,
       "the model 'gpt-4' does not exist; this server serves 'tandem-tiny-english'"},
      {"unknown model, chat", kChat,
       R"({"model":"gpt-4o","messages":[{"role":"user","content":"a"}]})", 404,
       "the model 'gpt-4o' does not exist"},
      {"model over 256 bytes", kCmp,
       R"({"model":")" + std::string(300, 'm') + R"(","prompt":"a","max_tokens":2})", 400,
       "model must be at most 256 bytes, got 300 bytes"},
      {"model not a string", kCmp, R"({"model":5,"prompt":"a"})", 400, "model must be a string"},
      // Prompts.
      {"neither text nor input_ids", kGen, R"({"sampling_params":{}})", 400,
       "one of text or input_ids is required"},
      {"both text and input_ids", kGen, R"({"text":"a","input_ids":[1]})", 400,
       "give either text or input_ids, not both"},
      {"empty text", kGen, R"({"text":""})", 400, "text is empty"},
      {"empty input_ids", kGen, R"({"input_ids":[]})", 400, "input_ids is empty"},
      {"batch over the cap", kGen, R"({"text":["a","b"],"sampling_params":{"n":65}})", 400,
       "choices; at most 128 are allowed per request"},
      {"batched prompt with an empty one", kCmp, R"({"prompt":["a",""]})", 400,
       "prompt[1]: prompt is empty"},
      {"rid listed twice in a batch", kGen, R"({"text":["a","b"],"rid":["r","r"]})", 400,
       "rid[1] 'r' repeats rid[0]"},
      {"token id outside the vocabulary", kGen, R"({"input_ids":[1,2,5000]})", 400,
       "input_ids[2] = 5000 is outside the vocabulary (size 3072)"},
      {"token id outside the vocabulary (completions)", kCmp,
       R"({"prompt":[1,2,3072],"max_tokens":2})", 400, "is outside the vocabulary (size 3072)"},
      {"input_ids over the context length", kGen, R"({"input_ids":)" + over_context_ids + "}", 400,
       "context length (512 tokens)"},
      {"text over the context length", kGen, R"({"text":")" + over_context_text + R"("})", 400,
       "context length (512 tokens)"},
      // The Responses API: its own fields, and what it shares with chat.
      {"responses without input", kResp, R"({"model":"tandem-tiny-english"})", 400,
       "input is required"},
      {"responses input is a number", kResp, R"({"input":7})", 400,
       "input must be a string or an array of input items, got integer"},
      {"responses item is a string", kResp, R"({"input":["hi"]})", 400,
       "input[0] must be an object, got string"},
      {"responses image part", kResp,
       R"({"input":[{"role":"user","content":[{"type":"input_image","image_url":"x"}]}]})", 400,
       "input[0].content[0].type 'input_image' is not supported"},
      {"responses built-in tool", kResp, Resp(R"("tools":[{"type":"web_search"}])"), 400,
       "tools[0].type 'web_search' is not supported"},
      {"responses call arguments not JSON", kResp,
       R"({"input":[{"type":"function_call","call_id":"c","name":"f","arguments":"{"}]})", 400,
       "input[0].arguments must be JSON text"},
      {"responses unknown previous response", kResp, Resp(R"("previous_response_id":"resp_0123")"),
       404, "previous_response_id 'resp_0123' names no stored response"},
      {"responses background", kResp, Resp(R"("background":true)"), 400,
       "background is not supported"},
      {"responses metadata value not a string", kResp, Resp(R"("metadata":{"k":[1]})"), 400,
       "metadata.k must be a string, got array"},
      {"responses max_output_tokens negative", kResp, Resp(R"("max_output_tokens":-1)"), 400,
       "max_output_tokens"},
      {"responses temperature a string", kResp, Resp(R"("temperature":"hot")"), 400, "temperature"},
      {"responses invalid UTF-8 in input", kResp, "{\"input\":\"caf\xc3\x28\"}", 400, "UTF-8"},
      {"responses over the context length", kResp, R"({"input":")" + over_context_text + R"("})",
       400, "context length (512 tokens)"},
      {"chat over the context length", kChat,
       ChatMessages(R"([{"role":"user","content":")" + over_context_text + R"("}])"), 400,
       "context length (512 tokens)"},
      // Client strings the router echoes (x-request-id, logs, error messages) are bounded.
      {"rid over 256 bytes", kGen, R"({"text":"hi","rid":")" + std::string(257, 'r') + R"("})", 400,
       "rid must be at most 256 bytes of printable ASCII, got 257 bytes"},
      {"rid of 60 KB", kGen, R"({"text":"hi","rid":")" + std::string(60000, 'r') + R"("})", 400,
       "rid must be at most 256 bytes of printable ASCII, got 60000 bytes"},
      {"rid with a line break", kGen, R"({"text":"hi","rid":"a\r\nSet-Cookie: x=1"})", 400,
       "rid must be at most 256 bytes of printable ASCII (no control characters"},
      {"rid with an escaped NUL", kGen, R"({"text":"hi","rid":"a\u0000b"})", 400,
       "rid must be at most 256 bytes of printable ASCII (no control characters"},
      {"rid not ASCII", kCmp, Cmp(R"("rid":"caf\u00e9")"), 400,
       "rid must be at most 256 bytes of printable ASCII"},
      {"x-request-id header over 256 bytes", kGen, Gen(""), 400,
       "the x-request-id header must be at most 256 bytes of printable ASCII, got 300 bytes",
       "X-Request-Id: " + std::string(300, 'h') + "\r\n"},
      {"x-correlation-id header not ASCII", kChat, Chat(""), 400,
       "the x-correlation-id header must be at most 256 bytes of printable ASCII",
       "X-Correlation-Id: caf\xc3\xa9\r\n"},
      {"model over 256 bytes", kCmp,
       R"({"model":")" + std::string(300, 'm') + R"(","prompt":"a","max_tokens":2})", 400,
       "model must be at most 256 bytes, got 300 bytes"},
      {"model with a control character", kChat,
       R"({"model":"tandem\u0007","messages":[{"role":"user","content":"a"}]})", 400,
       "model must not contain control characters"},
      {"user over 256 bytes", kChat, Chat(R"("user":")" + std::string(400, 'u') + R"(")"), 400,
       "user must be at most 256 bytes, got 400 bytes"},
      {"long role is cut in the message", kChat,
       ChatMessages(R"([{"role":")" + std::string(5000, 'x') + R"(","content":"a"}])"), 400,
       "xxx...' is not supported"},
      {"long unsupported value is cut in the message", kGen,
       Gen(R"("custom_params":")" + std::string(5000, 'a') + R"(")"), 400,
       "sampling_params.custom_params is not supported by this server (got \"aaaa"},
      // SGLang's SamplingParams.verify rules.
      {"top_k zero", kGen, Gen(R"("top_k":0)"), 400,
       "sampling_params.top_k must be -1 (disabled) or at least 1, got 0"},
      {"top_k zero (OpenAI)", kCmp, Cmp(R"("top_k":0)"), 400,
       "top_k must be -1 (disabled) or at least 1, got 0"},
      {"repetition_penalty zero", kGen, Gen(R"("repetition_penalty":0)"), 400,
       "sampling_params.repetition_penalty must be in (0, 2]"},
      {"repetition_penalty above two", kChat, Chat(R"("repetition_penalty":2.5)"), 400,
       "repetition_penalty must be a number in [0, 2]"},
      {"presence_penalty below -2", kChat, Chat(R"("presence_penalty":-2.5)"), 400,
       "presence_penalty must be a number in [-2, 2]"},
      {"min_new_tokens negative", kGen, Gen(R"("min_new_tokens":-1)"), 400,
       "sampling_params.min_new_tokens must be an integer in [0"},
      {"min_tokens negative (OpenAI)", kCmp, Cmp(R"("min_tokens":-3)"), 400,
       "min_tokens must be an integer in [0"},
      {"top_p negative", kChat, Chat(R"("top_p":-0.5)"), 400, "top_p must be a number in [0, 1]"},
      {"temperature huge", kGen, Gen(R"("temperature":1e39)"), 400,
       "sampling_params.temperature must be a number in [0"},
      // The body ends with the JSON: nothing but whitespace may follow it.
      {"NUL after the JSON", kGen, WithNul(R"({"text":"hi"})", R"({"rid":1})"), 400,
       "a NUL byte at offset 13"},
      {"NUL inside a string", kCmp, WithNul(R"({"prompt":"a)", R"(b"})"), 400,
       "a NUL byte at offset 12"},
      {"second JSON object after the first", kGen, R"({"text":"hi"}{"text":"x"})", 400,
       "not valid JSON"},
      {"whitespace after the JSON is fine", kGen,
       "{\"text\":\"hi\",\"sampling_params\":{\"max_new_tokens\":2}} \r\n\t ", 200, ""},
      // Prompts over the context are refused by the router, before tokenizing when the length
      // alone proves it, in SGLang's words.
      {"text certainly over the context (not tokenized)", kGen,
       R"({"text":")" + std::string(60000, 'a') + R"("})", 400, "The input (at least "},
      {"input_ids exactly the context length", kGen,
       R"({"input_ids":[)" + Ids(kContextLength) + "]}", 400,
       "The input (512 tokens) is longer than the model's context length (512 tokens)."},
      {"input_ids one under the context length", kGen,
       R"({"input_ids":[)" + Ids(kContextLength - 1) +
           R"(],"sampling_params":{"max_new_tokens":1}})",
       200, ""},
      // /tokenize and /detokenize: the router's tokenizer answers; bad bodies are 400s.
      {"tokenize not JSON", "/tokenize", "{nope", 400, "not valid JSON"},
      {"tokenize neither prompt nor messages", "/v1/tokenize", R"({"model":"m"})", 400,
       "give exactly one of prompt and messages"},
      {"tokenize prompt a number", "/tokenize", R"({"prompt":7})", 400,
       "prompt must be a string or an array of strings, got integer"},
      {"tokenize list over the cap", "/tokenize",
       std::string(R"({"prompt":[)") + Repeat(R"("a",)", 1024) + R"("a"]})", 400,
       "prompt has 1025 entries; at most 1024"},
      {"tokenize bad message", "/tokenize", R"({"messages":[{"role":"wizard","content":"x"}]})",
       400, "messages[0]"},
      {"detokenize id outside the vocabulary", "/detokenize", R"({"tokens":[1,3072]})", 400,
       "tokens[1] must be an integer in [0, 3071]"},
      {"detokenize nested wrong type", "/v1/detokenize", R"({"tokens":[[1],["x"]]})", 400,
       "tokens[1][0] must be an integer"},
      {"detokenize tokens missing", "/detokenize", R"({})", 400, "tokens is required"},
      {"tokenize without the API key", "/tokenize", R"({"prompt":"hi"})", 401, "missing API key",
       "", false},
      // /abort_request is parsed under the same nesting bound as the other routes.
      {"abort_request nested too deep", "/abort_request",
       R"({"rid":)" + Repeat("[", 100) + Repeat("]", 100) + "}", 400, "deeper than 64 levels"},
      // The API key.
      {"missing API key", kGen, Gen(""), 401, "missing API key", "", false},
      {"wrong API key", kGen, Gen(""), 401, "incorrect API key provided",
       "Authorization: Bearer wrong-key\r\n", false},
      {"Basic instead of Bearer", kChat, Chat(""), 401, "must be 'Bearer <API key>'",
       "Authorization: Basic YWxhZGRpbjpvcGVuc2VzYW1l\r\n", false},
  };
  return c;
}

std::vector<RawCase> RawCases() {
  const std::string ok_body = R"({"text":"hi","sampling_params":{"max_new_tokens":2}})";
  const std::string big_body = R"({"text":")" + std::string(kMaxPayloadBytes + 100, 'a') + R"("})";
  std::string many_headers;
  for (int i = 0; i < 2000; ++i) many_headers += "X-H" + std::to_string(i) + ": v\r\n";
  std::string chunks_over_limit;
  for (int i = 0; i < 20; ++i)
    chunks_over_limit += Hex(8192) + "\r\n" + std::string(8192, 'a') + "\r\n";
  chunks_over_limit += "0\r\n\r\n";
  std::vector<RawCase> c = {
      // Request lines.
      {"garbage request line", "\x01\x02\x03 garbage \xff\r\n\r\n", 400,
       "malformed HTTP request: bad method"},
      {"words, no version", "HELLO THERE\r\n\r\n", 400, "malformed HTTP request: bad target"},
      {"no target", "GET HTTP/1.1\r\nHost: t\r\n\r\n", 400, "malformed HTTP request: bad target"},
      {"TLS handshake on the plain port",
       std::string("\x16\x03\x01\x00\xa5\x01\x00\x00\xa1\x03\x03", 11) + "\r\n\r\n", 400,
       "malformed HTTP request: bad method"},
      {"HTTP/2 preface", "PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n", 400,
       "malformed HTTP request: bad version"},
      {"bad version", "GET /health HTTP/x.y\r\nHost: t\r\n\r\n", 400,
       "malformed HTTP request: bad version"},
      // Headers.
      {"header without colon", "GET /health HTTP/1.1\r\nHost t\r\n\r\n", 400,
       "malformed HTTP request: bad field"},
      {"NUL in a header value", std::string("GET /health HTTP/1.1\r\nX-A: a\0b\r\n\r\n", 34), 400,
       "malformed HTTP request: bad value"},
      {"one header over the limit",
       "GET /health HTTP/1.1\r\nX-Big: " + std::string(kHeaderLimitBytes + 1000, 'a') + "\r\n\r\n",
       431, "headers exceed the limit of 16384 bytes"},
      {"many headers over the limit", "GET /health HTTP/1.1\r\n" + many_headers + "\r\n", 431,
       "headers exceed the limit"},
      // Lengths and bodies.
      {"body over the limit", Post("/generate", big_body), 413,
       "body exceeds the limit of 65536 bytes"},
      {"declared length over the limit",
       "POST /generate HTTP/1.1\r\nHost: t\r\nContent-Length: 99999999999\r\n\r\n{", 413,
       "body exceeds the limit of 65536 bytes"},
      {"Content-Length not a number",
       "POST /generate HTTP/1.1\r\nHost: t\r\nContent-Length: ten\r\n\r\n{}", 400,
       "malformed HTTP request: bad Content-Length"},
      {"negative Content-Length",
       "POST /generate HTTP/1.1\r\nHost: t\r\nContent-Length: -5\r\n\r\n{}", 400,
       "malformed HTTP request: bad Content-Length"},
      {"two different Content-Lengths",
       "POST /generate HTTP/1.1\r\nHost: t\r\nContent-Length: 2\r\nContent-Length: 3\r\n\r\n{}}",
       400, "malformed HTTP request: bad Content-Length"},
      // Chunked encoding abuse.
      {"chunk size not hex", Chunked("zz\r\nabc\r\n0\r\n\r\n"), 400,
       "malformed HTTP request: bad chunk"},
      {"chunk size overflows", Chunked("fffffffffffffffffffff\r\nabc\r\n0\r\n\r\n"), 400,
       "malformed HTTP request: bad chunk"},
      {"chunk longer than its size", Chunked("2\r\nabcdef\r\n0\r\n\r\n"), 400,
       "malformed HTTP request: bad chunk"},
      {"chunks over the body limit", Chunked(chunks_over_limit), 413, "body exceeds the limit"},
      {"one chunk declared over the limit", Chunked("fffffff\r\nabc"), 413,
       "body exceeds the limit"},
      {"chunked and Content-Length", Chunked("2\r\n{}\r\n0\r\n\r\n", "Content-Length: 2\r\n"), 400,
       "malformed HTTP request: bad Transfer-Encoding"},
      {"unknown transfer coding",
       "POST /generate HTTP/1.1\r\nHost: t\r\nTransfer-Encoding: gzip\r\n\r\nxx", 400,
       "only the chunked Transfer-Encoding is supported"},
      {"chunked bad JSON inside", Chunked("3\r\n{no\r\n4\r\npe}}\r\n0\r\n\r\n"), 400,
       "not valid JSON"},
      {"chunked valid request",
       Chunked(Hex(ok_body.size() - 5) + "\r\n" + ok_body.substr(0, ok_body.size() - 5) +
               "\r\n5\r\n" + ok_body.substr(ok_body.size() - 5) + "\r\n0\r\n\r\n"),
       200, ""},
      // Methods and routes (before the API key is looked at).
      {"wrong method", "GET /generate HTTP/1.1\r\nHost: t\r\nConnection: close\r\n\r\n", 405,
       "method GET not allowed on /generate"},
      {"PUT chat", Post("/v1/chat/completions", "{}").replace(0, 4, "PUT"), 405,
       "method PUT not allowed on /v1/chat/completions"},
      {"unknown route", Post("/v1/embeddings", ok_body), 404, "no route for /v1/embeddings"},
      {"path traversal", "GET /../../etc/passwd HTTP/1.1\r\nHost: t\r\n\r\n", 404,
       "no route for /../../etc/passwd"},
      {"absolute-form target", "GET http://evil.example/v1/models HTTP/1.1\r\nHost: t\r\n\r\n", 400,
       "request target must be an absolute path"},
      {"models without API key", "GET /v1/models HTTP/1.1\r\nHost: t\r\n\r\n", 401,
       "missing API key"},
      {"stored response without API key", "GET /v1/responses/resp_1 HTTP/1.1\r\nHost: t\r\n\r\n",
       401, "missing API key"},
      {"unknown stored response",
       "GET /v1/responses/resp_1 HTTP/1.1\r\nHost: t\r\nAuthorization: Bearer api_key\r\n\r\n", 404,
       "no stored response has the id 'resp_1'"},
      {"delete an unknown stored response",
       "DELETE /v1/responses/resp_1 HTTP/1.1\r\nHost: t\r\nAuthorization: Bearer api_key\r\n\r\n",
       404, "no stored response has the id 'resp_1'"},
      {"stored responses listed", "GET /v1/responses/ HTTP/1.1\r\nHost: t\r\n\r\n", 404,
       "no route for /v1/responses/"},

      {"health_generate without the API key", "GET /health_generate HTTP/1.1\r\nHost: t\r\n\r\n",
       401, "missing API key"},
      {"health_generate with a wrong key",
       "GET /health_generate HTTP/1.1\r\nHost: t\r\nAuthorization: Bearer nope\r\n\r\n", 401,
       "incorrect API key provided"},
      {"health_generate with the API key",
       "GET /health_generate HTTP/1.1\r\nHost: t\r\nAuthorization: Bearer api_key\r\n"
       "Connection: close\r\n\r\n",
       200, ""},
      {"NUL after the JSON (raw)", Post("/generate", ok_body + std::string(1, '\0') + "junk"), 400,
       "a NUL byte at offset"},
      {"admin route with the client key",
       "GET /list_workers HTTP/1.1\r\nHost: t\r\nAuthorization: Bearer api_key\r\n\r\n", 401,
       "incorrect admin key provided"},
      // A body is read only for a request its head lets through: these announce one and never
      // send it, so each answer must come from the head alone (the read timeout would close
      // them unanswered). Without it, a stranger could make the router buffer a full
      // --max-payload-size per connection.
      {"body announced without the API key", Announce("POST /generate", ""), 401,
       "missing API key"},
      {"body announced with a wrong API key",
       Announce("POST /v1/chat/completions", "Authorization: Bearer wrong\r\n"), 401,
       "incorrect API key provided"},
      {"Expect: 100-continue without the API key",
       Announce("POST /v1/completions", "Expect: 100-continue\r\n"), 401, "missing API key"},
      {"chunked body without the API key",
       "POST /generate HTTP/1.1\r\nHost: t\r\nTransfer-Encoding: chunked\r\n\r\n", 401,
       "missing API key"},
      {"abort_request body without a key", Announce("POST /abort_request", ""), 401,
       "missing API key"},
      {"admin body with the client key",
       Announce("POST /workers", "Authorization: Bearer api_key\r\n"), 401,
       "incorrect admin key provided"},
      {"body announced to an unknown route", Announce("POST /v1/embeddings", ""), 404,
       "no route for /v1/embeddings"},
      {"body announced with a wrong method", Announce("PATCH /generate", ""), 405,
       "method PATCH not allowed on /generate"},
  };
  return c;
}

}  // namespace tandem::itest
