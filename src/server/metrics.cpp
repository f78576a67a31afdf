#include "server/metrics.h"

#include <unistd.h>

#include <cstdio>

#include <prometheus/text_serializer.h>

namespace chorus::server {

namespace {

double resident_bytes() {
  long pages = 0, resident = 0;
  if (FILE* f = std::fopen("/proc/self/statm", "r")) {
    if (std::fscanf(f, "%ld %ld", &pages, &resident) != 2) resident = 0;
    std::fclose(f);
  }
  return static_cast<double>(resident) * static_cast<double>(sysconf(_SC_PAGESIZE));
}

}  // namespace

Metrics::Metrics() : registry_(std::make_shared<prometheus::Registry>()) {
  using namespace prometheus;
  requests_ = &BuildCounter().Name("chorus_http_requests_total").Help("HTTP requests answered, by endpoint and status").Register(*registry_);
  refusals_ = &BuildCounter().Name("chorus_refusals_total").Help("Speech requests refused before synthesis, by reason").Register(*registry_);
  cancelled_ = &BuildCounter().Name("chorus_streams_cancelled_total").Help("Streams cancelled because the client left").Register(*registry_).Add({});
  audio_seconds_ = &BuildCounter().Name("chorus_audio_seconds_total").Help("Seconds of audio synthesized").Register(*registry_).Add({});
  active_ = &BuildGauge().Name("chorus_active_streams").Help("Speech responses in progress").Register(*registry_).Add({});
  auto& q = BuildGauge().Name("chorus_synthesizer_requests").Help("Synthesizer requests by state").Register(*registry_);
  queued_ = &q.Add({{"state", "queued"}});
  running_ = &q.Add({{"state", "running"}});
  auto& kv = BuildGauge().Name("chorus_kv_cache_pages").Help("Pages of the GPU KV caches by state (free: admission may reserve them)").Register(*registry_);
  kv_used_ = &kv.Add({{"state", "used"}});
  kv_available_ = &kv.Add({{"state", "free"}});
  kv_reserved_ = &kv.Add({{"state", "reserved"}});
  rss_ = &BuildGauge().Name("chorus_resident_memory_bytes").Help("Resident memory of the server process").Register(*registry_).Add({});
  connections_ = &BuildGauge().Name("chorus_http_connections").Help("Open HTTP connections, this scrape's own included").Register(*registry_).Add({});
  ttfa_ = &BuildHistogram().Name("chorus_time_to_first_audio_seconds").Help("From admission request to the first audio").Register(*registry_)
               .Add({}, Histogram::BucketBoundaries{0.025, 0.05, 0.1, 0.2, 0.3, 0.5, 0.75, 1, 1.5, 2, 3, 5, 10});
  rtf_ = &BuildHistogram().Name("chorus_real_time_factor").Help("Synthesis time over audio time per request").Register(*registry_)
              .Add({}, Histogram::BucketBoundaries{0.05, 0.1, 0.2, 0.3, 0.5, 0.75, 1, 1.5, 2, 5, 10});
  steps_ = &BuildHistogram()
                .Name("chorus_scheduler_step_seconds")
                .Help("A scheduler pass over a model's running streams (each gets a frame of 80 ms of audio)")
                .Register(*registry_);
}

prometheus::Histogram& Metrics::step_seconds(const std::string& model) {
  return steps_->Add({{"model", model}},
                     prometheus::Histogram::BucketBoundaries{0.005, 0.01, 0.02, 0.03, 0.04, 0.05, 0.06, 0.08, 0.1, 0.15,
                                                             0.25, 0.5, 1});
}

void Metrics::request(const std::string& endpoint, int status) {
  requests_->Add({{"endpoint", endpoint}, {"status", std::to_string(status)}}).Increment();
}
void Metrics::refusal(const std::string& reason) { refusals_->Add({{"reason", reason}}).Increment(); }
void Metrics::stream_started() { active_->Increment(); }
void Metrics::stream_ended(bool cancelled) {
  active_->Decrement();
  if (cancelled) cancelled_->Increment();
}
void Metrics::synthesis(double first_audio_s, double audio_s, double total_s) {
  if (first_audio_s > 0) ttfa_->Observe(first_audio_s);
  if (audio_s > 0) {
    audio_seconds_->Increment(audio_s);
    rtf_->Observe(total_s / audio_s);
  }
}
void Metrics::set_queued(int queued, int running) {
  queued_->Set(queued);
  running_->Set(running);
}
void Metrics::set_kv_pages(int64_t used, int64_t available, int64_t reserved) {
  kv_used_->Set(static_cast<double>(used));
  kv_available_->Set(static_cast<double>(available));
  kv_reserved_->Set(static_cast<double>(reserved));
}
int Metrics::active_streams() const { return static_cast<int>(active_->Value()); }

std::string Metrics::render() {
  rss_->Set(resident_bytes());
  if (connections_source_) connections_->Set(connections_source_());
  prometheus::TextSerializer s;
  return s.Serialize(registry_->Collect());
}

}  // namespace chorus::server
