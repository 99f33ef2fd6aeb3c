#include "common/ordered_json.h"

#include <cstddef>
#include <iterator>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "absl/container/flat_hash_set.h"
#include "absl/hash/hash.h"

namespace tandem {
namespace {

using Ordered = nlohmann::ordered_json;

// An object's index holds member positions, hashed and compared by the members' own keys, so no
// key is stored twice. `members` is the object's heap-held member vector, which stays put while
// the json holding it is moved.
struct MemberKey {
  const Ordered::object_t* members;
  std::string_view operator()(size_t i) const {
    return std::next(members->begin(), static_cast<std::ptrdiff_t>(i))->first;
  }
  std::string_view operator()(std::string_view key) const { return key; }
};
struct MemberHash {
  using is_transparent = void;
  MemberKey key;
  template <class K>
  size_t operator()(const K& k) const {
    return absl::Hash<std::string_view>()(key(k));
  }
};
struct MemberEq {
  using is_transparent = void;
  MemberKey key;
  template <class A, class B>
  bool operator()(const A& a, const B& b) const {
    return key(a) == key(b);
  }
};
using MemberIndex = absl::flat_hash_set<size_t, MemberHash, MemberEq>;

// nlohmann's SAX interface, building the value with a hash index of each open object's members.
class OrderedBuilder {
 public:
  bool null() { return Put(Ordered(nullptr)); }
  bool boolean(bool value) { return Put(Ordered(value)); }
  bool number_integer(Ordered::number_integer_t value) { return Put(Ordered(value)); }
  bool number_unsigned(Ordered::number_unsigned_t value) { return Put(Ordered(value)); }
  bool number_float(Ordered::number_float_t value, const Ordered::string_t& /*text*/) {
    return Put(Ordered(value));
  }
  bool string(Ordered::string_t& value) { return Put(Ordered(std::move(value))); }
  bool binary(Ordered::binary_t& value) { return Put(Ordered::binary(std::move(value))); }
  bool start_object(std::size_t /*elements*/) { return Open(Ordered::object()); }
  bool key(Ordered::string_t& key) {
    open_.back().key = std::move(key);
    return true;
  }
  bool end_object() { return Close(); }
  bool start_array(std::size_t /*elements*/) { return Open(Ordered::array()); }
  bool end_array() { return Close(); }
  template <class Exception>
  bool parse_error(std::size_t /*position*/, const std::string& /*last_token*/,
                   const Exception& error) {
    throw error;
  }

  Ordered Take() { return std::move(root_); }

 private:
  struct Container {
    Ordered value;
    MemberIndex index;  // objects: the members' positions, by key
    std::string key;    // objects: the key of the next value
  };

  bool Put(Ordered value) {
    if (open_.empty()) {
      root_ = std::move(value);
      return true;
    }
    Container& parent = open_.back();
    if (parent.value.is_array()) {
      parent.value.get_ref<Ordered::array_t&>().push_back(std::move(value));
      return true;
    }
    Ordered::object_t& members = parent.value.get_ref<Ordered::object_t&>();
    const auto at = parent.index.find(std::string_view(parent.key));
    if (at != parent.index.end()) {  // a repeated key: the last value wins, in the first's place
      std::next(members.begin(), static_cast<std::ptrdiff_t>(*at))->second = std::move(value);
      return true;
    }
    // ordered_map is a vector of members: appended here without its search for the key.
    members.emplace_back(std::move(parent.key), std::move(value));
    parent.index.insert(members.size() - 1);
    return true;
  }
  bool Open(Ordered value) {
    const MemberKey key{value.is_object() ? &value.get_ref<const Ordered::object_t&>() : nullptr};
    open_.push_back({std::move(value), MemberIndex(0, MemberHash{key}, MemberEq{key}), {}});
    return true;
  }
  bool Close() {
    Ordered value = std::move(open_.back().value);
    open_.pop_back();
    return Put(std::move(value));
  }

  std::vector<Container> open_;
  Ordered root_;
};

}  // namespace

nlohmann::ordered_json ParseOrderedJson(std::string_view text) {
  OrderedBuilder builder;
  Ordered::sax_parse(text.begin(), text.end(), &builder);
  return builder.Take();
}

std::string JsonErrorText(std::string_view what) {
  constexpr size_t kMaxQuotedBytes = 64;
  if (what.starts_with("[json.exception.")) {
    const size_t tag_end = what.find("] ");
    if (tag_end != std::string_view::npos) what.remove_prefix(tag_end + 2);
  }
  const size_t quote = what.find('\'');
  if (quote == std::string_view::npos) return std::string(what);
  std::string out(what.substr(0, quote + 1));
  std::string_view quoted = what.substr(quote + 1);
  size_t end = quoted.size();
  if (end > kMaxQuotedBytes) {
    end = kMaxQuotedBytes;
    // Back off to the start of a UTF-8 sequence so the cut leaves no partial character.
    while (end > 0 && (static_cast<unsigned char>(quoted[end]) & 0xc0) == 0x80) --end;
  }
  for (size_t i = 0; i < end; ++i) {
    const auto c = static_cast<unsigned char>(quoted[i]);
    out.push_back(c < 0x20 || c == 0x7f ? '?' : quoted[i]);
  }
  if (end < quoted.size()) out += "...";
  return out;
}

}  // namespace tandem
