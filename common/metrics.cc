#include "common/metrics.h"

#include <algorithm>
#include <charconv>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "common/check.h"

namespace tandem {
namespace {

// Misuse of the metrics API is a bug in the calling code, found at start-up: fail loudly.
[[noreturn]] void Fatal(const std::string& message) {
  CheckFailure(__FILE__, __LINE__, "metrics API use", message);
}

bool IsMetricName(const std::string& name) {
  if (name.empty()) return false;
  for (size_t i = 0; i < name.size(); ++i) {
    const char c = name[i];
    const bool alpha = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || c == '_' || c == ':';
    if (!alpha && !(i > 0 && c >= '0' && c <= '9')) return false;
  }
  return true;
}

bool IsLabelName(const std::string& name) {
  if (name.empty() || name.rfind("__", 0) == 0) return false;
  for (size_t i = 0; i < name.size(); ++i) {
    const char c = name[i];
    const bool alpha = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || c == '_';
    if (!alpha && !(i > 0 && c >= '0' && c <= '9')) return false;
  }
  return true;
}

void AtomicAdd(std::atomic<double>* target, double delta) {
  target->fetch_add(delta, std::memory_order_relaxed);
}

const char* TypeName(MetricFamilyBase::Type type) {
  switch (type) {
    case MetricFamilyBase::Type::kCounter:
      return "counter";
    case MetricFamilyBase::Type::kGauge:
      return "gauge";
    case MetricFamilyBase::Type::kHistogram:
      return "histogram";
  }
  return "untyped";
}

void RenderHeader(const MetricFamilyBase& family, std::string* out) {
  absl::StrAppend(out, "# HELP ", family.name(), " ", EscapeHelp(family.help()), "\n");
  absl::StrAppend(out, "# TYPE ", family.name(), " ", TypeName(family.type()), "\n");
}

}  // namespace

std::string EscapeLabelValue(const std::string& value) {
  std::string out;
  out.reserve(value.size());
  for (char c : value) {
    if (c == '\\') {
      out += "\\\\";
    } else if (c == '"') {
      out += "\\\"";
    } else if (c == '\n') {
      out += "\\n";
    } else {
      out += c;
    }
  }
  return out;
}

std::string EscapeHelp(const std::string& help) {
  std::string out;
  out.reserve(help.size());
  for (char c : help) {
    if (c == '\\') {
      out += "\\\\";
    } else if (c == '\n') {
      out += "\\n";
    } else {
      out += c;
    }
  }
  return out;
}

std::string FormatMetricValue(double value) {
  if (std::isnan(value)) return "NaN";
  if (std::isinf(value)) return value > 0 ? "+Inf" : "-Inf";
  char buffer[64];
  auto [end, ec] = std::to_chars(buffer, buffer + sizeof(buffer), value);
  if (ec != std::errc()) return "NaN";  // cannot happen with 64 bytes
  return std::string(buffer, end);
}

void Counter::Increment(double delta) {
  if (!(delta >= 0)) return;  // negative or NaN
  AtomicAdd(&value_, delta);
}

void Gauge::Increment(double delta) { AtomicAdd(&value_, delta); }

Histogram::Histogram(const std::vector<double>* bounds)
    : bounds_(bounds), counts_(new std::atomic<uint64_t>[bounds->size() + 1]) {
  for (size_t i = 0; i <= bounds_->size(); ++i) counts_[i].store(0, std::memory_order_relaxed);
}

void Histogram::Observe(double value) {
  if (std::isnan(value)) return;
  const size_t bucket =
      std::lower_bound(bounds_->begin(), bounds_->end(), value) - bounds_->begin();
  counts_[bucket].fetch_add(1, std::memory_order_relaxed);
  AtomicAdd(&sum_, value);
}

Histogram::Snapshot Histogram::Read() const {
  Snapshot snapshot;
  snapshot.cumulative.resize(bounds_->size() + 1);
  uint64_t running = 0;
  for (size_t i = 0; i <= bounds_->size(); ++i) {
    running += counts_[i].load(std::memory_order_relaxed);
    snapshot.cumulative[i] = running;
  }
  snapshot.count = running;
  snapshot.sum = sum_.load(std::memory_order_relaxed);
  return snapshot;
}

const std::vector<double>& DefaultLatencyBuckets() {
  static const std::vector<double>* const kBuckets = new std::vector<double>{
      0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60};
  return *kBuckets;
}

std::vector<double> ExponentialBuckets(double start, double factor, int count) {
  if (!(start > 0) || !(factor > 1) || count < 1) {
    Fatal(absl::StrCat("ExponentialBuckets(", start, ", ", factor, ", ", count, "): bad bounds"));
  }
  std::vector<double> bounds;
  double bound = start;
  for (int i = 0; i < count; ++i, bound *= factor) bounds.push_back(bound);
  return bounds;
}

std::vector<double> LinearBuckets(double start, double width, int count) {
  if (!(width > 0) || count < 1) {
    Fatal(absl::StrCat("LinearBuckets(", start, ", ", width, ", ", count, "): bad bounds"));
  }
  std::vector<double> bounds;
  for (int i = 0; i < count; ++i) bounds.push_back(start + width * i);
  return bounds;
}

MetricFamilyBase::MetricFamilyBase(std::string name, std::string help, Type type,
                                   std::vector<std::string> label_names)
    : name_(std::move(name)),
      help_(std::move(help)),
      type_(type),
      label_names_(std::move(label_names)) {
  if (!IsMetricName(name_)) Fatal(absl::StrCat("invalid metric name '", name_, "'"));
  for (const std::string& label : label_names_) {
    if (!IsLabelName(label)) {
      Fatal(absl::StrCat("metric '", name_, "': invalid label name '", label, "'"));
    }
    if (type_ == Type::kHistogram && label == "le") {
      Fatal(absl::StrCat("histogram '", name_, "' cannot use the label name 'le'"));
    }
    if (std::count(label_names_.begin(), label_names_.end(), label) > 1) {
      Fatal(absl::StrCat("metric '", name_, "': label '", label, "' given twice"));
    }
  }
}

void MetricFamilyBase::CheckArity(const std::vector<std::string>& values) const {
  if (values.size() != label_names_.size()) {
    Fatal(absl::StrCat("metric '", name_, "' has ", label_names_.size(), " labels (",
                       absl::StrJoin(label_names_, ","), "), got ", values.size(), " values"));
  }
}

std::string MetricFamilyBase::LabelText(const std::vector<std::string>& values,
                                        const std::string& extra) const {
  if (values.empty() && extra.empty()) return "";
  std::string out = "{";
  for (size_t i = 0; i < values.size(); ++i) {
    if (i > 0) out += ",";
    absl::StrAppend(&out, label_names_[i], "=\"", EscapeLabelValue(values[i]), "\"");
  }
  if (!extra.empty()) absl::StrAppend(&out, values.empty() ? "" : ",", extra);
  out += "}";
  return out;
}

CounterFamily::CounterFamily(std::string name, std::string help,
                             std::vector<std::string> label_names)
    : MetricFamily(std::move(name), std::move(help), Type::kCounter, std::move(label_names)) {}

void CounterFamily::Render(std::string* out) const {
  RenderHeader(*this, out);
  absl::MutexLock lock(&mu_);
  for (const auto& [values, counter] : children_) {
    absl::StrAppend(out, name(), LabelText(values, ""), " ", FormatMetricValue(counter->Value()),
                    "\n");
  }
}

GaugeFamily::GaugeFamily(std::string name, std::string help, std::vector<std::string> label_names)
    : MetricFamily(std::move(name), std::move(help), Type::kGauge, std::move(label_names)) {}

void GaugeFamily::Render(std::string* out) const {
  RenderHeader(*this, out);
  absl::MutexLock lock(&mu_);
  for (const auto& [values, gauge] : children_) {
    absl::StrAppend(out, name(), LabelText(values, ""), " ", FormatMetricValue(gauge->Value()),
                    "\n");
  }
}

HistogramFamily::HistogramFamily(std::string name, std::string help,
                                 std::vector<std::string> label_names, std::vector<double> bounds)
    : MetricFamily(std::move(name), std::move(help), Type::kHistogram, std::move(label_names)),
      bounds_(std::move(bounds)) {
  if (bounds_.empty()) Fatal(absl::StrCat("histogram '", this->name(), "' has no buckets"));
  for (size_t i = 0; i < bounds_.size(); ++i) {
    if (!std::isfinite(bounds_[i]) || (i > 0 && !(bounds_[i] > bounds_[i - 1]))) {
      Fatal(absl::StrCat("histogram '", this->name(),
                         "': bucket bounds must be finite and strictly ascending"));
    }
  }
}

std::unique_ptr<Histogram> HistogramFamily::MakeChild() const {
  return std::make_unique<Histogram>(&bounds_);
}

void HistogramFamily::Render(std::string* out) const {
  RenderHeader(*this, out);
  absl::MutexLock lock(&mu_);
  for (const auto& [values, histogram] : children_) {
    const Histogram::Snapshot snapshot = histogram->Read();
    for (size_t i = 0; i <= bounds_.size(); ++i) {
      const std::string le = i < bounds_.size() ? FormatMetricValue(bounds_[i]) : "+Inf";
      absl::StrAppend(out, name(), "_bucket", LabelText(values, absl::StrCat("le=\"", le, "\"")),
                      " ", snapshot.cumulative[i], "\n");
    }
    const std::string labels = LabelText(values, "");
    absl::StrAppend(out, name(), "_sum", labels, " ", FormatMetricValue(snapshot.sum), "\n");
    absl::StrAppend(out, name(), "_count", labels, " ", snapshot.count, "\n");
  }
}

MetricFamilyBase* MetricsRegistry::FindCompatible(
    const std::string& name, MetricFamilyBase::Type type, const std::string& help,
    const std::vector<std::string>& label_names) const {
  for (const auto& family : families_) {
    if (family->name() != name) continue;
    if (family->type() != type || family->help() != help || family->label_names() != label_names) {
      Fatal(absl::StrCat("metric '", name, "' registered twice with different definitions"));
    }
    return family.get();
  }
  return nullptr;
}

CounterFamily& MetricsRegistry::AddCounter(const std::string& name, const std::string& help,
                                           const std::vector<std::string>& label_names) {
  absl::MutexLock lock(&mu_);
  if (auto* existing = FindCompatible(name, MetricFamilyBase::Type::kCounter, help, label_names)) {
    return *static_cast<CounterFamily*>(existing);
  }
  auto family = std::make_unique<CounterFamily>(name, help, label_names);
  CounterFamily& result = *family;
  if (label_names.empty()) result.Get();  // An unlabelled metric shows 0 from the start.
  families_.push_back(std::move(family));
  return result;
}

GaugeFamily& MetricsRegistry::AddGauge(const std::string& name, const std::string& help,
                                       const std::vector<std::string>& label_names) {
  absl::MutexLock lock(&mu_);
  if (auto* existing = FindCompatible(name, MetricFamilyBase::Type::kGauge, help, label_names)) {
    return *static_cast<GaugeFamily*>(existing);
  }
  auto family = std::make_unique<GaugeFamily>(name, help, label_names);
  GaugeFamily& result = *family;
  if (label_names.empty()) result.Get();
  families_.push_back(std::move(family));
  return result;
}

HistogramFamily& MetricsRegistry::AddHistogram(const std::string& name, const std::string& help,
                                               const std::vector<std::string>& label_names,
                                               const std::vector<double>& bounds) {
  absl::MutexLock lock(&mu_);
  if (auto* existing =
          FindCompatible(name, MetricFamilyBase::Type::kHistogram, help, label_names)) {
    auto* histogram = static_cast<HistogramFamily*>(existing);
    if (histogram->bounds() != bounds) {
      Fatal(absl::StrCat("histogram '", name, "' registered twice with different buckets"));
    }
    return *histogram;
  }
  auto family = std::make_unique<HistogramFamily>(name, help, label_names, bounds);
  HistogramFamily& result = *family;
  if (label_names.empty()) result.Get();
  families_.push_back(std::move(family));
  return result;
}

std::string MetricsRegistry::Render() const {
  std::string out;
  absl::MutexLock lock(&mu_);
  for (const auto& family : families_) family->Render(&out);
  return out;
}

}  // namespace tandem
