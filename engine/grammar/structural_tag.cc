#include "engine/grammar/structural_tag.h"

#include <array>
#include <map>
#include <queue>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "common/json_depth.h"
#include "common/ordered_json.h"
#include "common/status.h"
#include "engine/grammar/json_schema_compiler.h"
#include "nlohmann/json.hpp"

namespace tandem::engine::grammar {
namespace {

// Ordered: a schema's properties keep the order the client wrote them in.
using json = nlohmann::ordered_json;

// The tag's own two levels above the schemas' limit (json_schema_compiler.cc).
constexpr int kMaxTagJsonDepth = 258;

absl::Status Error(std::string_view what) {
  return absl::InvalidArgumentError(absl::StrCat("structural_tag: ", std::string(what)));
}

struct Structure {
  std::string begin;
  std::string schema;  // JSON text
  std::string end;
};

struct Tag {
  std::vector<Structure> structures;
  std::vector<std::string> triggers;
};

absl::StatusOr<std::string> ReadString(const json& object, const char* key, const std::string& path,
                                       size_t max_bytes) {
  const auto it = object.find(key);
  if (it == object.end() || !it->is_string()) {
    return Error(absl::StrCat(path, key, " must be a string"));
  }
  std::string value = it->get<std::string>();
  if (value.size() > max_bytes) {
    return Error(
        absl::StrCat(path, key, " must be at most ", max_bytes, " bytes, got ", value.size()));
  }
  return value;
}

absl::StatusOr<Tag> ParseTag(std::string_view text) {
  if (JsonNestingDepth(text, kMaxTagJsonDepth) > kMaxTagJsonDepth) {
    return Error(absl::StrCat("nests JSON deeper than ", kMaxTagJsonDepth, " levels"));
  }
  json document;
  try {
    document = ParseOrderedJson(text);
  } catch (const json::exception& e) {
    return Error(absl::StrCat("not valid JSON: ", JsonErrorText(e.what())));
  }
  if (!document.is_object()) return Error("must be a JSON object");
  for (const auto& [key, value] : document.items()) {
    if (key == "type") {
      if (!value.is_string() || value.get<std::string>() != "structural_tag") {
        return Error("type must be \"structural_tag\"");
      }
    } else if (key != "structures" && key != "triggers") {
      return Error(absl::StrCat("unknown key '", key.substr(0, 64), "'"));
    }
  }
  Tag tag;
  const auto triggers = document.find("triggers");
  if (triggers == document.end() || !triggers->is_array() || triggers->empty() ||
      triggers->size() > kMaxTriggers) {
    return Error(absl::StrCat("triggers must be a list of 1 to ", kMaxTriggers, " strings"));
  }
  for (size_t i = 0; i < triggers->size(); ++i) {
    const json& trigger = (*triggers)[i];
    if (!trigger.is_string() || trigger.get<std::string>().empty() ||
        trigger.get<std::string>().size() > kMaxTriggerBytes) {
      return Error(
          absl::StrCat("triggers[", i, "] must be a string of 1 to ", kMaxTriggerBytes, " bytes"));
    }
    tag.triggers.push_back(trigger.get<std::string>());
  }
  for (size_t i = 0; i < tag.triggers.size(); ++i) {
    for (size_t j = 0; j < tag.triggers.size(); ++j) {
      if (i != j && tag.triggers[j].find(tag.triggers[i]) != std::string::npos) {
        return Error(absl::StrCat("triggers[", j, "] contains triggers[", i,
                                  "]: no trigger may occur within another"));
      }
    }
  }
  const auto structures = document.find("structures");
  if (structures == document.end() || !structures->is_array() || structures->empty() ||
      structures->size() > kMaxStructures) {
    return Error(absl::StrCat("structures must be a list of 1 to ", kMaxStructures, " objects"));
  }
  for (size_t i = 0; i < structures->size(); ++i) {
    const json& item = (*structures)[i];
    const std::string path = absl::StrCat("structures[", i, "].");
    if (!item.is_object()) return Error(absl::StrCat("structures[", i, "] must be an object"));
    for (const auto& [key, unused] : item.items()) {
      if (key != "begin" && key != "schema" && key != "end") {
        return Error(absl::StrCat(path, key.substr(0, 64), " is not a structure's key"));
      }
    }
    Structure structure;
    ASSIGN_OR_RETURN(structure.begin, ReadString(item, "begin", path, kMaxTagBytes));
    ASSIGN_OR_RETURN(structure.end, ReadString(item, "end", path, kMaxTagBytes));
    const auto schema = item.find("schema");
    if (schema == item.end() || schema->is_null()) {
      structure.schema = "true";
    } else if (schema->is_object() || schema->is_boolean()) {
      structure.schema = schema->dump();
    } else {
      return Error(absl::StrCat(path, "schema must be a JSON Schema object"));
    }
    bool triggered = false;
    for (const std::string& trigger : tag.triggers) {
      triggered = triggered || structure.begin.starts_with(trigger);
    }
    if (!triggered) return Error(absl::StrCat(path, "begin does not start with any trigger"));
    tag.structures.push_back(std::move(structure));
  }
  return tag;
}

// The Aho-Corasick automaton of a set of strings none of which occurs within another: node 0 is
// the empty prefix, every other node a longer prefix of some string; `next` folds in the failure
// links, so it is the automaton's full transition table. The nodes that spell a whole string are
// the only ones where a string completes (leaves: no string extends another).
struct Automaton {
  std::vector<std::array<int32_t, 256>> next;
  std::vector<int32_t> completes;  // per node: the string it spells, or -1

  explicit Automaton(const std::vector<std::string>& strings) {
    AddNode();
    for (size_t i = 0; i < strings.size(); ++i) {
      int32_t node = 0;
      for (const char c : strings[i]) {
        const auto byte = static_cast<uint8_t>(c);
        if (next[node][byte] < 0) next[node][byte] = AddNode();
        node = next[node][byte];
      }
      completes[node] = static_cast<int32_t>(i);
    }
    std::vector<int32_t> fail(next.size(), 0);
    std::queue<int32_t> queue;
    for (auto& child : next[0]) {
      if (child < 0) {
        child = 0;
      } else {
        queue.push(child);
      }
    }
    while (!queue.empty()) {
      const int32_t node = queue.front();
      queue.pop();
      for (int byte = 0; byte < 256; ++byte) {
        int32_t& child = next[node][byte];
        if (child < 0) {
          child = next[fail[node]][byte];
        } else {
          fail[child] = next[fail[node]][byte];
          queue.push(child);
        }
      }
    }
  }

  int32_t AddNode() {
    next.emplace_back();
    next.back().fill(-1);
    completes.push_back(-1);
    return static_cast<int32_t>(next.size() - 1);
  }
};

// Text in which none of the automaton's strings occurs, except that where a byte completes
// string t, `after[t]` follows (when `after` is given; else that byte is not allowed there) and
// the text goes on from the empty prefix, or with `end_after` the output ends there. Left-linear,
// one rule per state: text_q derives the texts that leave the automaton in state q, so the
// recognizer keeps a constant number of items per byte; the text may end in any state.
Symbol AvoidingText(GrammarBuilder& builder, const Automaton& automaton,
                    const std::vector<Symbol>* after, bool end_after = false) {
  const size_t nodes = automaton.next.size();
  std::vector<int32_t> rule(nodes, -1);
  const int32_t done = end_after ? builder.NewRule("text_then_structure") : -1;
  for (size_t q = 0; q < nodes; ++q) {
    if (automaton.completes[q] < 0) rule[q] = builder.NewRule("text");
  }
  builder.AddAlternative(rule[0], {});
  for (size_t p = 0; p < nodes; ++p) {
    if (rule[p] < 0) continue;
    std::map<int32_t, ByteSet> bytes_to;  // target state -> the bytes that lead there
    for (int byte = 0; byte < 256; ++byte) bytes_to[automaton.next[p][byte]].set(byte);
    for (const auto& [target, bytes] : bytes_to) {
      const int32_t completed = automaton.completes[target];
      if (completed < 0) {
        builder.AddAlternative(rule[target], {rule[p], builder.Terminal(bytes)});
      } else if (after != nullptr) {
        builder.AddAlternative(end_after ? done : rule[0],
                               {rule[p], builder.Terminal(bytes), (*after)[completed]});
      }
    }
  }
  std::vector<Sequence> ends;
  for (size_t q = 0; q < nodes; ++q) {
    if (rule[q] >= 0) ends.push_back({rule[q]});
  }
  if (done >= 0) ends.push_back({done});
  return builder.Choice(std::move(ends));
}

}  // namespace

absl::StatusOr<GrammarPtr> CompileStructuralTag(std::string_view tag_json, StructuralTagForm form,
                                                bool allow_thinking, bool thinking_open,
                                                const GrammarLimits& limits) {
  ASSIGN_OR_RETURN(const Tag tag, ParseTag(tag_json));
  GrammarBuilder builder(limits);
  std::vector<Symbol> values;
  for (size_t i = 0; i < tag.structures.size(); ++i) {
    const std::string where = absl::StrCat("structures[", i, "]");
    ASSIGN_OR_RETURN(Sequence value,
                     CompileJsonSchemaInto(builder, tag.structures[i].schema, where + ".",
                                           kStructuralTagSchemaOptions),
                     absl::StrCat("structural_tag: ", where, ".schema: "));
    values.push_back(builder.Group(std::move(value)));
    if (builder.failed()) break;  // Build() reports the exceeded limit
  }
  // Structure i from its begin's byte `from` on.
  auto structure_from = [&](size_t i, size_t from) {
    const Structure& s = tag.structures[i];
    Sequence seq = builder.Literal(std::string_view(s.begin).substr(from));
    seq.push_back(values[i]);
    const Sequence end = builder.Literal(s.end);
    seq.insert(seq.end(), end.begin(), end.end());
    return seq;
  };

  Sequence body;
  if (builder.failed()) {
    // Nothing more to build: Build() returns the error.
  } else if (form == StructuralTagForm::kTriggered ||
             form == StructuralTagForm::kTriggeredAtMostOne) {
    std::vector<Symbol> after_trigger;
    for (const std::string& trigger : tag.triggers) {
      std::vector<Sequence> alternatives;
      for (size_t i = 0; i < tag.structures.size(); ++i) {
        if (tag.structures[i].begin.starts_with(trigger)) {
          alternatives.push_back(structure_from(i, trigger.size()));
        }
      }
      // A trigger no structure begins with is never completed (the text avoids it).
      after_trigger.push_back(alternatives.empty() ? builder.Terminal(ByteSet())
                                                   : builder.Choice(std::move(alternatives)));
    }
    body.push_back(AvoidingText(builder, Automaton(tag.triggers), &after_trigger,
                                form == StructuralTagForm::kTriggeredAtMostOne));
  } else {
    std::vector<Sequence> alternatives;
    for (size_t i = 0; i < tag.structures.size(); ++i) alternatives.push_back(structure_from(i, 0));
    const Symbol call = builder.Choice(std::move(alternatives));
    if (allow_thinking) {
      Sequence think;
      if (thinking_open) {
        think.push_back(builder.Optional(builder.Literal("<think>")));
      } else {
        think = builder.Literal("<think>");
      }
      think.push_back(AvoidingText(builder, Automaton({"</think>"}), nullptr));
      const Sequence close = builder.Literal("</think>");
      think.insert(think.end(), close.begin(), close.end());
      think.push_back(builder.Repeat({builder.Byte('\n')}, 0, 2));
      if (thinking_open) {
        body.insert(body.end(), think.begin(), think.end());
      } else {
        body.push_back(builder.Optional(think));
      }
    }
    body.push_back(call);
    if (form == StructuralTagForm::kOneOrMore)
      body.push_back(builder.Star({builder.Byte('\n'), call}));
  }
  const int32_t root = builder.NewRule("root");
  builder.AddAlternative(root, std::move(body));
  return builder.Build(root);
}

}  // namespace tandem::engine::grammar
