#include "engine/output_processor.h"

#include <algorithm>
#include <utility>

namespace tandem::engine {

OutputProcessor::OutputProcessor(const Tokenizer& tokenizer, const SamplingParams& params,
                                 std::vector<int32_t> eos_token_ids)
    : max_new_tokens_(params.max_new_tokens),
      min_new_tokens_(params.min_new_tokens),
      stop_(params.stop),
      stop_ids_(params.stop_token_ids),
      no_stop_trim_(params.no_stop_trim),
      detok_(tokenizer, params.skip_special_tokens) {
  // Validated params have no empty stop string; drop any anyway, it would match everywhere.
  std::erase_if(stop_, [](const std::string& s) { return s.empty(); });
  if (!params.ignore_eos) {
    stop_ids_.insert(stop_ids_.end(), eos_token_ids.begin(), eos_token_ids.end());
  }
  std::sort(stop_ids_.begin(), stop_ids_.end());
  stop_ids_.erase(std::unique(stop_ids_.begin(), stop_ids_.end()), stop_ids_.end());
}

bool OutputProcessor::IsStopToken(int32_t token) const {
  return std::binary_search(stop_ids_.begin(), stop_ids_.end(), token);
}

size_t OutputProcessor::HoldBackLength() const {
  size_t hold = 0;
  for (const std::string& s : stop_) {
    for (size_t k = std::min(s.size() - 1, pending_.size()); k > hold; --k) {
      if (pending_.compare(pending_.size() - k, k, s, 0, k) == 0) {
        hold = k;
        break;
      }
    }
  }
  return hold;
}

std::string OutputProcessor::Release(size_t n) {
  std::string out = pending_.substr(0, n);
  pending_.erase(0, n);
  text_ += out;
  return out;
}

OutputProcessor::Update OutputProcessor::Finish(std::string text, FinishReason reason) {
  finish_ = std::move(reason);
  return Update{std::move(text), finish_};
}

OutputProcessor::Update OutputProcessor::Push(int32_t token) {
  if (finish_) return Update{std::string(), finish_};
  ++num_tokens_;

  if (num_tokens_ > min_new_tokens_ && IsStopToken(token)) {
    pending_ += detok_.Finish();
    return Finish(Release(pending_.size()), FinishReason::StopToken(token));
  }

  pending_ += detok_.Push(token);
  const bool last = num_tokens_ >= max_new_tokens_;
  if (last) pending_ += detok_.Finish();

  if (!stop_.empty() && num_tokens_ >= min_new_tokens_) {
    size_t best = 0;
    size_t best_pos = std::string::npos;
    size_t best_end = std::string::npos;
    for (size_t i = 0; i < stop_.size(); ++i) {
      const size_t pos = pending_.find(stop_[i]);
      if (pos == std::string::npos) continue;
      const size_t end = pos + stop_[i].size();
      if (end < best_end || (end == best_end && pos < best_pos)) {
        best = i;
        best_pos = pos;
        best_end = end;
      }
    }
    if (best_pos != std::string::npos) {
      std::string text = Release(no_stop_trim_ ? best_end : best_pos);
      pending_.clear();
      detok_.Finish();  // bytes after the match are dropped
      return Finish(std::move(text), FinishReason::StopString(stop_[best]));
    }
  }

  if (last) return Finish(Release(pending_.size()), FinishReason::Length(num_tokens_));
  return Update{Release(pending_.size() - HoldBackLength()), std::nullopt};
}

std::string OutputProcessor::Flush() {
  pending_ += detok_.Finish();
  return Release(pending_.size());
}

}  // namespace tandem::engine
