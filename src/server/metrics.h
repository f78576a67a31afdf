// The server's Prometheus metrics (prometheus-cpp), rendered in the text exposition format for
// GET /metrics: requests by endpoint and status, streams active and queued, refusals, cancels,
// time to first audio, real-time factor and scheduler step histograms, audio seconds made, resident
// memory, open connections, KV cache pages (GPU).
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <string>

#include <prometheus/counter.h>
#include <prometheus/family.h>
#include <prometheus/gauge.h>
#include <prometheus/histogram.h>
#include <prometheus/registry.h>

namespace chorus::server {

class Metrics {
 public:
  Metrics();
  void request(const std::string& endpoint, int status);
  void refusal(const std::string& reason);  // "queue_full", "draining"
  void stream_started();
  void stream_ended(bool cancelled);
  void synthesis(double first_audio_s, double audio_s, double total_s);
  // The histogram of a loaded model's scheduler passes (engine::SynthesizerOptions::on_step
  // observes it on the scheduler's thread): a pass longer than a frame of audio (80 ms) puts every
  // stream of the model behind.
  prometheus::Histogram& step_seconds(const std::string& model);
  // Set just before rendering.
  void set_queued(int queued, int running);
  // The GPU engines' paged KV caches, summed over the loaded models (pages in use, free to admit
  // new streams, free but reserved for running streams' growth).
  void set_kv_pages(int64_t used, int64_t available, int64_t reserved);
  // Read at each render: open HTTP connections (the metrics layer does not know the HTTP server).
  void count_connections(std::function<int()> f) { connections_source_ = std::move(f); }
  std::string render();
  int active_streams() const;

 private:
  std::shared_ptr<prometheus::Registry> registry_;
  prometheus::Family<prometheus::Counter>* requests_;
  prometheus::Family<prometheus::Counter>* refusals_;
  prometheus::Counter* cancelled_;
  prometheus::Counter* audio_seconds_;
  prometheus::Gauge* active_;
  prometheus::Gauge* queued_;
  prometheus::Gauge* running_;
  prometheus::Gauge *kv_used_, *kv_available_, *kv_reserved_;
  prometheus::Gauge* rss_;
  prometheus::Gauge* connections_;
  std::function<int()> connections_source_;
  prometheus::Histogram* ttfa_;
  prometheus::Histogram* rtf_;
  prometheus::Family<prometheus::Histogram>* steps_;
};

}  // namespace chorus::server
