// Metrics: counters, gauges and histograms with label sets, rendered in the Prometheus text
// exposition format 0.0.4 (what /metrics serves; see common/http_server.h).
//
//   MetricsRegistry registry;
//   auto& requests = registry.AddCounter("tandem_requests_total", "Requests received",
//                                        {"route", "code"});
//   Counter& ok = requests.WithLabels({"/v1/completions", "200"});  // look up once...
//   ok.Increment();                                                 // ...then lock-free
//   auto& ttft = registry.AddHistogram("tandem_ttft_seconds", "Time to first token", {});
//   ttft.Get().Observe(0.042);
//   std::string text = registry.Render();
//
// Thread-safety: everything is thread-safe. Increment/Set/Observe on a child are lock-free
// atomics; WithLabels takes the family's mutex (callers on a hot path keep the reference);
// Render takes each family's mutex briefly while it reads the children. Values read by Render
// while other threads update them are each atomic, not a consistent snapshot across children
// (a histogram's `_count` is computed from its buckets, so it always equals the `+Inf` bucket).
//
// Ownership: the registry owns its families and the families own their children; references
// returned by Add* and WithLabels stay valid for the registry's lifetime. Children are never
// removed, so label values must come from small, bounded sets (routes, worker URLs, status
// codes), never from request content.
//
// Names: metric names match [a-zA-Z_:][a-zA-Z0-9_:]* and label names [a-zA-Z_][a-zA-Z0-9_]*
// (not starting with "__", and not "le" on a histogram). Registering a bad name, or an existing
// name with a different type, help, label names or buckets, is a programming error and aborts;
// registering the same definition again returns the existing family.
#ifndef TANDEM_COMMON_METRICS_H_
#define TANDEM_COMMON_METRICS_H_

#include <atomic>
#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/synchronization/mutex.h"

namespace tandem {

// A value that only goes up (requests served, bytes moved).
class Counter {
 public:
  Counter() = default;
  Counter(const Counter&) = delete;
  Counter& operator=(const Counter&) = delete;

  // Adds `delta`; negative or NaN deltas are ignored (a counter never goes down).
  void Increment(double delta = 1.0);
  double Value() const { return value_.load(std::memory_order_relaxed); }

 private:
  std::atomic<double> value_{0.0};
};

// A value that goes up and down (running requests, free KV blocks).
class Gauge {
 public:
  Gauge() = default;
  Gauge(const Gauge&) = delete;
  Gauge& operator=(const Gauge&) = delete;

  void Set(double value) { value_.store(value, std::memory_order_relaxed); }
  void Increment(double delta = 1.0);
  void Decrement(double delta = 1.0) { Increment(-delta); }
  double Value() const { return value_.load(std::memory_order_relaxed); }

 private:
  std::atomic<double> value_{0.0};
};

// Observations counted into fixed buckets (upper bounds, ascending; +Inf is implicit).
class Histogram {
 public:
  // `bounds` is not owned; it belongs to the family and outlives the histogram.
  explicit Histogram(const std::vector<double>* bounds);
  Histogram(const Histogram&) = delete;
  Histogram& operator=(const Histogram&) = delete;

  // Counts `value` in the first bucket whose bound is >= value; NaN is ignored.
  void Observe(double value);

  struct Snapshot {
    std::vector<uint64_t> cumulative;  // [bounds.size() + 1]; the last one is the +Inf bucket
    double sum = 0;
    uint64_t count = 0;  // == cumulative.back()
  };
  Snapshot Read() const;

 private:
  const std::vector<double>* bounds_;
  std::unique_ptr<std::atomic<uint64_t>[]> counts_;  // [bounds.size() + 1], not cumulative
  std::atomic<double> sum_{0.0};
};

// The latency buckets used when a histogram family gives none, in seconds: 1 ms .. 60 s.
const std::vector<double>& DefaultLatencyBuckets();
// `count` bounds start, start*factor, start*factor^2, ... (start > 0, factor > 1).
std::vector<double> ExponentialBuckets(double start, double factor, int count);
// `count` bounds start, start+width, ... (width > 0).
std::vector<double> LinearBuckets(double start, double width, int count);

// One named metric with a fixed list of label names and one child per label-value tuple.
class MetricFamilyBase {
 public:
  enum class Type { kCounter, kGauge, kHistogram };
  MetricFamilyBase(std::string name, std::string help, Type type,
                   std::vector<std::string> label_names);
  virtual ~MetricFamilyBase() = default;
  MetricFamilyBase(const MetricFamilyBase&) = delete;
  MetricFamilyBase& operator=(const MetricFamilyBase&) = delete;

  const std::string& name() const { return name_; }
  const std::string& help() const { return help_; }
  Type type() const { return type_; }
  const std::vector<std::string>& label_names() const { return label_names_; }

  // Appends this family in the text exposition format.
  virtual void Render(std::string* out) const = 0;

 protected:
  // Aborts unless `values` has one value per label name.
  void CheckArity(const std::vector<std::string>& values) const;
  // `{a="x",b="y"` plus `extra` (e.g. `le="0.5"`) and `}`; "" when there is nothing.
  std::string LabelText(const std::vector<std::string>& values, const std::string& extra) const;

 private:
  std::string name_;
  std::string help_;
  Type type_;
  std::vector<std::string> label_names_;
};

template <typename T>
class MetricFamily : public MetricFamilyBase {
 public:
  // The child for these label values, in the order of label_names(); created on first use.
  // Aborts if the number of values differs from the number of label names.
  T& WithLabels(const std::vector<std::string>& values) ABSL_LOCKS_EXCLUDED(mu_) {
    CheckArity(values);
    absl::MutexLock lock(&mu_);
    std::unique_ptr<T>& child = children_[values];
    if (child == nullptr) child = MakeChild();
    return *child;
  }
  // The child of a family without labels.
  T& Get() { return WithLabels({}); }

 protected:
  using MetricFamilyBase::MetricFamilyBase;
  virtual std::unique_ptr<T> MakeChild() const = 0;

  mutable absl::Mutex mu_;
  // Sorted by label values, so the rendering order is stable.
  std::map<std::vector<std::string>, std::unique_ptr<T>> children_ ABSL_GUARDED_BY(mu_);
};

class CounterFamily : public MetricFamily<Counter> {
 public:
  CounterFamily(std::string name, std::string help, std::vector<std::string> label_names);
  void Render(std::string* out) const override;

 protected:
  std::unique_ptr<Counter> MakeChild() const override { return std::make_unique<Counter>(); }
};

class GaugeFamily : public MetricFamily<Gauge> {
 public:
  GaugeFamily(std::string name, std::string help, std::vector<std::string> label_names);
  void Render(std::string* out) const override;

 protected:
  std::unique_ptr<Gauge> MakeChild() const override { return std::make_unique<Gauge>(); }
};

class HistogramFamily : public MetricFamily<Histogram> {
 public:
  // Aborts unless `bounds` is non-empty, finite and strictly ascending.
  HistogramFamily(std::string name, std::string help, std::vector<std::string> label_names,
                  std::vector<double> bounds);
  const std::vector<double>& bounds() const { return bounds_; }
  void Render(std::string* out) const override;

 protected:
  std::unique_ptr<Histogram> MakeChild() const override;

 private:
  std::vector<double> bounds_;
};

class MetricsRegistry {
 public:
  MetricsRegistry() = default;
  MetricsRegistry(const MetricsRegistry&) = delete;
  MetricsRegistry& operator=(const MetricsRegistry&) = delete;

  CounterFamily& AddCounter(const std::string& name, const std::string& help,
                            const std::vector<std::string>& label_names = {});
  GaugeFamily& AddGauge(const std::string& name, const std::string& help,
                        const std::vector<std::string>& label_names = {});
  HistogramFamily& AddHistogram(const std::string& name, const std::string& help,
                                const std::vector<std::string>& label_names = {},
                                const std::vector<double>& bounds = DefaultLatencyBuckets());

  // All families in registration order, in the text exposition format 0.0.4.
  std::string Render() const ABSL_LOCKS_EXCLUDED(mu_);

 private:
  // Returns the existing family named `name` after checking it matches, or nullptr.
  MetricFamilyBase* FindCompatible(const std::string& name, MetricFamilyBase::Type type,
                                   const std::string& help,
                                   const std::vector<std::string>& label_names) const
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  mutable absl::Mutex mu_;
  std::vector<std::unique_ptr<MetricFamilyBase>> families_ ABSL_GUARDED_BY(mu_);
};

// The content type of Render()'s output.
inline constexpr char kPrometheusContentType[] = "text/plain; version=0.0.4; charset=utf-8";

// Text-format helpers (exposed for tests and other exporters).
std::string EscapeLabelValue(const std::string& value);  // \ " and newline
std::string EscapeHelp(const std::string& help);         // \ and newline
std::string FormatMetricValue(double value);             // shortest round-trip, +Inf, NaN

}  // namespace tandem

#endif  // TANDEM_COMMON_METRICS_H_
