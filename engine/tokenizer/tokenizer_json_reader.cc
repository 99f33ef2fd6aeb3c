#include "engine/tokenizer/tokenizer_json_reader.h"

#include "absl/strings/str_cat.h"

namespace tandem::engine {
namespace {

using json_fields::Json;
using DomParser = nlohmann::detail::json_sax_dom_parser<Json>;

// Forwards every event to a DOM builder except those inside model.vocab / model.merges.
class Reader : public nlohmann::json_sax<Json> {
 public:
  Reader(Json* root, BpeTables* tables)
      : dom_(*root, /*allow_exceptions=*/false), tables_(tables) {}

  absl::Status status() const { return status_; }

  bool null() override {
    return Value([&] { return dom_.null(); }, "null");
  }
  bool boolean(bool v) override {
    return Value([&] { return dom_.boolean(v); }, "a boolean");
  }
  bool number_integer(number_integer_t v) override {
    if (mode_ == Mode::kVocab) return VocabId(v);
    return Value([&] { return dom_.number_integer(v); }, "a number");
  }
  bool number_unsigned(number_unsigned_t v) override {
    if (mode_ == Mode::kVocab) {
      return VocabId(v > static_cast<number_unsigned_t>(INT64_MAX) ? -1 : static_cast<int64_t>(v));
    }
    return Value([&] { return dom_.number_unsigned(v); }, "a number");
  }
  bool number_float(number_float_t v, const string_t& s) override {
    return Value([&] { return dom_.number_float(v, s); }, "a number");
  }
  bool string(string_t& v) override {
    if (mode_ == Mode::kMerges && merge_depth_ == 0) {
      tables_->merges.push_back({std::move(v), std::string(), true});
      return true;
    }
    if (mode_ == Mode::kMerges && merge_depth_ == 1 && merge_parts_ < 2) {
      auto& entry = tables_->merges.back();
      (merge_parts_++ == 0 ? entry.left : entry.right) = std::move(v);
      return true;
    }
    return Value([&] { return dom_.string(v); }, "a string");
  }
  bool binary(binary_t& v) override {
    return Value([&] { return dom_.binary(v); }, "binary");
  }

  bool start_object(std::size_t n) override {
    if (mode_ != Mode::kNone) return Fail("an object");
    if (InModelMember("vocab")) {
      mode_ = Mode::kVocab;
      tables_->has_vocab = true;
      return true;
    }
    frames_.push_back({true, {}});
    return dom_.start_object(n);
  }
  bool key(string_t& k) override {
    if (mode_ == Mode::kVocab) {
      vocab_key_ = std::move(k);
      return true;
    }
    frames_.back().key = k;
    return dom_.key(k);
  }
  bool end_object() override {
    if (mode_ == Mode::kVocab) {
      mode_ = Mode::kNone;
      return dom_.start_object(0) && dom_.end_object();  // empty placeholder
    }
    frames_.pop_back();
    return dom_.end_object();
  }
  bool start_array(std::size_t n) override {
    if (mode_ == Mode::kMerges && merge_depth_ == 0) {
      merge_depth_ = 1;
      merge_parts_ = 0;
      tables_->merges.push_back({});
      return true;
    }
    if (mode_ != Mode::kNone) return Fail("an array");
    if (InModelMember("merges")) {
      mode_ = Mode::kMerges;
      merge_depth_ = 0;
      tables_->has_merges = true;
      return true;
    }
    frames_.push_back({false, {}});
    return dom_.start_array(n);
  }
  bool end_array() override {
    if (mode_ == Mode::kMerges && merge_depth_ == 1) {
      merge_depth_ = 0;
      if (merge_parts_ != 2) return Fail("an array that is not two strings");
      return true;
    }
    if (mode_ == Mode::kMerges) {
      mode_ = Mode::kNone;
      return dom_.start_array(0) && dom_.end_array();  // empty placeholder
    }
    frames_.pop_back();
    return dom_.end_array();
  }
  bool parse_error(std::size_t position, const std::string&,
                   const nlohmann::detail::exception& e) override {
    status_ = absl::InvalidArgumentError(
        absl::StrCat("not valid JSON (at byte ", position, "): ", e.what()));
    return false;
  }

 private:
  enum class Mode { kNone, kVocab, kMerges };
  struct Frame {
    bool is_object;
    std::string key;
  };

  // True when the container being opened is root.model.<member>.
  bool InModelMember(const char* member) const {
    return frames_.size() == 2 && frames_[0].is_object && frames_[0].key == "model" &&
           frames_[1].is_object && frames_[1].key == member;
  }

  template <typename F>
  bool Value(F&& forward, const char* what) {
    if (mode_ != Mode::kNone) return Fail(what);
    return forward();
  }

  bool VocabId(int64_t id) {
    if (id < 0 || id > INT32_MAX - 1) return Fail("an out-of-range number");
    tables_->vocab.emplace_back(std::move(vocab_key_), id);
    return true;
  }

  bool Fail(const char* what) {
    if (mode_ == Mode::kVocab) {
      status_ =
          json_fields::FieldError(absl::StrCat("model.vocab[\"", vocab_key_, "\"]"),
                                  absl::StrCat("expected a non-negative integer id, got ", what));
    } else if (mode_ == Mode::kMerges) {
      status_ = json_fields::FieldError(
          json_fields::Index("model.merges", tables_->merges.size() - (merge_depth_ ? 1 : 0)),
          absl::StrCat("expected \"a b\" or [\"a\", \"b\"], got ", what));
    } else {
      status_ = absl::InvalidArgumentError(absl::StrCat("unexpected ", what));
    }
    return false;
  }

  DomParser dom_;
  BpeTables* tables_;
  std::vector<Frame> frames_;
  Mode mode_ = Mode::kNone;
  std::string vocab_key_;
  int merge_depth_ = 0;
  int merge_parts_ = 0;
  absl::Status status_;
};

}  // namespace

absl::StatusOr<Json> ReadTokenizerJson(std::string_view contents, BpeTables* tables) {
  Json root;
  Reader reader(&root, tables);
  bool ok = false;
  try {
    ok = Json::sax_parse(contents.begin(), contents.end(), &reader);
  } catch (const Json::exception& e) {
    return absl::InvalidArgumentError(absl::StrCat("not valid JSON: ", e.what()));
  }
  if (!ok) {
    if (!reader.status().ok()) return reader.status();
    return absl::InvalidArgumentError("not valid JSON");
  }
  return root;
}

}  // namespace tandem::engine
