// libFuzzer entry point: parses arbitrary bytes as a Jinja chat template and renders it with a
// small conversation (messages with tool calls, tools, special tokens), under tight render
// limits. Crashes, sanitizer reports, hangs and unbounded memory are findings; parse and render
// errors are expected outcomes. Build and run: scripts/fuzz.sh jinja_fuzz.
#include <cstdint>
#include <string_view>

#include "engine/jinja/template.h"
#include "nlohmann/json.hpp"

namespace {

const tandem::jinja::Dict& Variables() {
  static const tandem::jinja::Dict* vars = [] {
    const auto json = nlohmann::ordered_json::parse(R"({
      "messages": [
        {"role": "system", "content": "Be brief."},
        {"role": "user", "content": "Weather in Paris? é 😀"},
        {"role": "assistant", "content": "",
         "tool_calls": [{"type": "function",
                         "function": {"name": "get_weather", "arguments": {"city": "Paris"}}}]},
        {"role": "tool", "content": "{\"temp\": 21.5}"},
        {"role": "assistant", "content": "<think>\nok\n</think>\n\nSunny."}],
      "tools": [{"type": "function", "function": {"name": "get_weather",
                 "parameters": {"type": "object", "properties": {"city": {"type": "string"}}}}}],
      "documents": null, "add_generation_prompt": true, "bos_token": "<s>",
      "eos_token": "</s>", "enable_thinking": false})");
    return new tandem::jinja::Dict(tandem::jinja::Value::FromJson(json).AsDict());
  }();
  return *vars;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string_view source(reinterpret_cast<const char*>(data), size);
  auto parsed = tandem::jinja::Template::Parse(source);
  if (!parsed.ok()) return 0;
  tandem::jinja::RenderOptions options;
  options.limits.max_output_bytes = 1 << 20;
  options.limits.max_loop_iterations = 20000;
  options.clock = [] { return std::tm{}; };
  (void)(*parsed)->Render(Variables(), options);
  return 0;
}
