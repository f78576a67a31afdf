// chorus._chorus: the Python extension, a thin layer over the C API (include/chorus/chorus.h), so
// Python sees exactly what C, Go or Rust callers see. Synthesis runs with the GIL released; chunk
// callbacks (on chorus's scheduler thread) only copy samples into a queue and never touch Python,
// so any number of Python threads can synthesize at once without contending for the GIL.
#include <pybind11/numpy.h>
#include <pybind11/pybind11.h>
#include <pybind11/stl.h>

#include <chrono>
#include <condition_variable>
#include <cstring>
#include <deque>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <vector>

#include "chorus/chorus.h"

namespace py = pybind11;

namespace {

// Raises the Python exception for a failed status, with chorus's message for this thread.
[[noreturn]] void raise_status(chorus_status s) {
  const std::string msg = chorus_last_error();
  switch (s) {
    case CHORUS_INVALID_ARGUMENT:
    case CHORUS_OUT_OF_RANGE:
      throw py::value_error(msg);
    case CHORUS_NOT_FOUND:
      PyErr_SetString(PyExc_FileNotFoundError, msg.c_str());
      throw py::error_already_set();
    default:
      throw std::runtime_error(msg.empty() ? chorus_status_name(s) : msg);
  }
}

void check(chorus_status s) {
  if (s != CHORUS_OK) raise_status(s);
}

py::array_t<float> to_array(std::vector<float>&& v) {
  auto* heap = new std::vector<float>(std::move(v));
  py::capsule owner(heap, [](void* p) { delete static_cast<std::vector<float>*>(p); });
  return py::array_t<float>({static_cast<py::ssize_t>(heap->size())}, {sizeof(float)}, heap->data(), owner);
}

py::dict stats_dict(const chorus_stats& s) {
  static const char* reasons[] = {"running", "eos", "max-frames", "cancelled"};
  py::dict d;
  d["stop"] = (s.stop_reason >= 0 && s.stop_reason <= 3) ? reasons[s.stop_reason] : "unknown";
  d["frames"] = s.frames;
  d["max_frames"] = s.max_frames;
  d["text_tokens"] = s.text_tokens;
  d["audio_s"] = s.audio_s;
  d["first_audio_s"] = s.first_audio_s;
  d["total_s"] = s.total_s;
  return d;
}

chorus_stats empty_stats() {
  chorus_stats s;
  std::memset(&s, 0, sizeof(s));
  s.size = sizeof(s);
  return s;
}

struct Voice {
  chorus_voice* v = nullptr;
  explicit Voice(chorus_voice* p) : v(p) {}
  ~Voice() { chorus_voice_free(v); }
  Voice(const Voice&) = delete;
  Voice& operator=(const Voice&) = delete;
};

struct Model {
  chorus_model* m = nullptr;
  explicit Model(chorus_model* p) : m(p) {}
  ~Model() {
    py::gil_scoped_release nogil;  // freeing cancels and joins running requests
    chorus_model_free(m);
  }
  Model(const Model&) = delete;
  Model& operator=(const Model&) = delete;
};

// A request's values, holding the strings the C struct points into.
struct Request {
  std::string text, instructions, speaker, language = "auto", ref_text;
  bool has_instructions = false, has_speaker = false, has_ref_text = false;
  std::shared_ptr<Voice> voice;
  chorus_request r{};

  const chorus_request& c() {
    r.text = text.c_str();
    r.instructions = has_instructions ? instructions.c_str() : nullptr;
    r.speaker = has_speaker ? speaker.c_str() : nullptr;
    r.language = language.c_str();
    r.ref_text = has_ref_text ? ref_text.c_str() : nullptr;
    r.voice = voice ? voice->v : nullptr;
    return r;
  }
};

float opt_float(const std::optional<double>& v, const char* name) {
  if (!v) return CHORUS_DEFAULT;
  if (!(*v >= 0)) throw py::value_error(std::string(name) + " must be >= 0 (None: the checkpoint's default)");
  return static_cast<float>(*v);
}

int32_t opt_int(const std::optional<int64_t>& v, const char* name) {
  if (!v) return CHORUS_DEFAULT;
  if (*v < 0 || *v > INT32_MAX) throw py::value_error(std::string(name) + " must be >= 0 (None: the checkpoint's default)");
  return static_cast<int32_t>(*v);
}

int opt_bool(const std::optional<bool>& v) { return v ? (*v ? 1 : 0) : CHORUS_DEFAULT; }

std::shared_ptr<Request> make_request(const std::string& text, std::optional<std::string> instructions,
                                      std::optional<std::string> speaker, std::optional<std::string> language,
                                      std::shared_ptr<Voice> voice, std::optional<std::string> ref_text,
                                      bool xvector_only, const std::string& text_layout, py::object seed,
                                      int64_t rng_stream, std::optional<bool> greedy, std::optional<double> temperature,
                                      std::optional<int64_t> top_k, std::optional<double> top_p,
                                      std::optional<double> repetition_penalty, std::optional<bool> subtalker_greedy,
                                      std::optional<double> subtalker_temperature,
                                      std::optional<int64_t> subtalker_top_k, std::optional<double> subtalker_top_p,
                                      std::optional<int64_t> max_frames, std::optional<int64_t> min_frames,
                                      std::optional<double> cfg_scale, bool codes_only) {
  auto q = std::make_shared<Request>();
  chorus_request_init(&q->r);
  q->text = text;
  if (instructions && !instructions->empty()) q->instructions = *instructions, q->has_instructions = true;
  if (speaker && !speaker->empty()) q->speaker = *speaker, q->has_speaker = true;
  if (language && !language->empty()) q->language = *language;
  if (ref_text && !ref_text->empty()) q->ref_text = *ref_text, q->has_ref_text = true;
  q->voice = std::move(voice);
  q->r.xvector_only = xvector_only ? 1 : 0;
  if (text_layout == "default") q->r.text_layout = CHORUS_TEXT_MODEL_DEFAULT;
  else if (text_layout == "streaming") q->r.text_layout = CHORUS_TEXT_STREAMING;
  else if (text_layout == "full") q->r.text_layout = CHORUS_TEXT_FULL;
  else throw py::value_error("text_layout must be 'default', 'streaming' or 'full', not '" + text_layout + "'");
  if (!seed.is_none()) {
    if (!PyLong_Check(seed.ptr()) || PyBool_Check(seed.ptr())) throw py::type_error("seed must be an int");
    const unsigned long long s = PyLong_AsUnsignedLongLong(seed.ptr());
    if (s == static_cast<unsigned long long>(-1) && PyErr_Occurred()) {
      PyErr_Clear();
      throw py::value_error("seed must be in [0, 2**64)");
    }
    q->r.seed = s;
  }
  if (rng_stream < 0 || rng_stream > UINT32_MAX) throw py::value_error("rng_stream must be in [0, 2**32)");
  q->r.rng_stream = static_cast<uint32_t>(rng_stream);
  q->r.greedy = opt_bool(greedy);
  q->r.temperature = opt_float(temperature, "temperature");
  q->r.top_k = opt_int(top_k, "top_k");
  q->r.top_p = opt_float(top_p, "top_p");
  q->r.repetition_penalty = opt_float(repetition_penalty, "repetition_penalty");
  q->r.subtalker_greedy = opt_bool(subtalker_greedy);
  q->r.subtalker_temperature = opt_float(subtalker_temperature, "subtalker_temperature");
  q->r.subtalker_top_k = opt_int(subtalker_top_k, "subtalker_top_k");
  q->r.subtalker_top_p = opt_float(subtalker_top_p, "subtalker_top_p");
  if (max_frames && *max_frames < 1) throw py::value_error("max_frames must be >= 1 (None: the checkpoint's limit)");
  q->r.max_frames = max_frames ? *max_frames : 0;
  if (min_frames && *min_frames < 0) throw py::value_error("min_frames must be >= 0 (None: the official 2)");
  q->r.min_frames = min_frames ? *min_frames : CHORUS_DEFAULT;
  q->r.cfg_scale = opt_float(cfg_scale, "cfg_scale");
  q->r.codes_only = codes_only ? 1 : 0;
  return q;
}

// Chunks handed from the scheduler thread to the consumer.
struct ChunkQueue {
  std::mutex mu;
  std::condition_variable cv;
  std::deque<std::vector<float>> chunks;
  std::vector<int32_t> codes;
  int64_t codebooks = 0;

  static int on_chunk(const chorus_chunk* c, void* user) {
    auto* q = static_cast<ChunkQueue*>(user);
    {
      std::lock_guard<std::mutex> lock(q->mu);
      q->codes.insert(q->codes.end(), c->codes, c->codes + c->frames * c->codebooks);
      q->codebooks = c->codebooks;
      if (c->count > 0) q->chunks.emplace_back(c->samples, c->samples + c->count);
    }
    q->cv.notify_one();
    return 0;
  }
};

// A running request, read chunk by chunk.
class Stream {
 public:
  Stream(std::shared_ptr<Model> model, std::shared_ptr<Request> req) : model_(std::move(model)), req_(std::move(req)) {
    queue_ = std::make_unique<ChunkQueue>();
    chorus_status st;
    {
      py::gil_scoped_release nogil;
      st = chorus_submit(model_->m, &req_->c(), &ChunkQueue::on_chunk, queue_.get(), &s_);
    }
    check(st);
  }
  ~Stream() { close(); }

  // The next chunk of samples, or None once the request has ended (its error raised, if any).
  py::object next() {
    if (!s_ || in_next_) return py::none();
    // Set and read with the GIL held: close() from another thread while this one waits without
    // the GIL only cancels, and the handle is freed here once the request has ended.
    in_next_ = true;
    struct Reset {
      bool& flag;
      ~Reset() { flag = false; }
    } reset{in_next_};
    std::vector<float> chunk;
    bool ended = false, got = false;
    // Waits in slices of 50 ms without the GIL, checking for Ctrl-C (a pending signal) between them.
    while (!got && !ended) {
      {
        py::gil_scoped_release nogil;
        std::unique_lock<std::mutex> lock(queue_->mu);
        // The scheduler delivers every chunk before the request counts as done, so a done request
        // with an empty queue has nothing more to give. Done is polled: it has no notification.
        const auto until = std::chrono::steady_clock::now() + std::chrono::milliseconds(50);
        while (queue_->chunks.empty() && std::chrono::steady_clock::now() < until) {
          if (chorus_done(s_)) break;
          queue_->cv.wait_for(lock, std::chrono::milliseconds(5));
        }
        if (!queue_->chunks.empty()) {
          chunk = std::move(queue_->chunks.front());
          queue_->chunks.pop_front();
          got = true;
        } else {
          ended = chorus_done(s_) != 0;
        }
      }
      if (!got && !ended && PyErr_CheckSignals() != 0) throw py::error_already_set();
    }
    if (got) return to_array(std::move(chunk));
    chorus_stats st = empty_stats();
    const chorus_status status = chorus_wait(s_, &st);
    stats_ = stats_dict(st);
    finished_ = true;
    free_handle();
    if (status != CHORUS_OK && !(status == CHORUS_CANCELLED && cancelled_)) raise_status(status);
    return py::none();
  }

  void cancel() {
    cancelled_ = true;
    if (s_) chorus_cancel(s_);
  }

  void close() {
    if (!s_) return;
    cancel();
    if (!in_next_) free_handle();
  }

  py::object stats() const { return stats_ ? py::object(*stats_) : py::object(py::none()); }
  bool finished() const { return finished_; }

  // Codes of every frame made so far, [frames, codebooks] int32.
  py::array_t<int32_t> codes() {
    std::lock_guard<std::mutex> lock(queue_->mu);
    const int64_t cb = queue_->codebooks > 0 ? queue_->codebooks : 1;
    py::array_t<int32_t> out({static_cast<py::ssize_t>(queue_->codes.size() / cb), static_cast<py::ssize_t>(cb)});
    if (!queue_->codes.empty()) std::memcpy(out.mutable_data(), queue_->codes.data(), queue_->codes.size() * sizeof(int32_t));
    return out;
  }

 private:
  void free_handle() {
    chorus_synthesis* s = s_;
    s_ = nullptr;
    if (!s) return;
    if (PyGILState_Check()) {
      py::gil_scoped_release nogil;
      chorus_synthesis_free(s);  // waits for the request's end: cancelled, it ends at the next frame
    } else {
      chorus_synthesis_free(s);
    }
  }

  std::shared_ptr<Model> model_;
  std::shared_ptr<Request> req_;
  std::unique_ptr<ChunkQueue> queue_;
  chorus_synthesis* s_ = nullptr;
  bool cancelled_ = false, finished_ = false, in_next_ = false;
  std::optional<py::dict> stats_;
};

// Submits and waits without the GIL, waking every 50 ms to let Ctrl-C (a pending signal) cancel
// the request and raise KeyboardInterrupt.
py::tuple synthesize(const std::shared_ptr<Model>& model, const std::shared_ptr<Request>& req) {
  ChunkQueue q;
  chorus_synthesis* s = nullptr;
  chorus_status status;
  {
    py::gil_scoped_release nogil;
    status = chorus_submit(model->m, &req->c(), &ChunkQueue::on_chunk, &q, &s);
  }
  check(status);
  for (;;) {
    bool done;
    {
      py::gil_scoped_release nogil;
      std::unique_lock<std::mutex> lock(q.mu);
      q.cv.wait_for(lock, std::chrono::milliseconds(50));
      done = chorus_done(s) != 0;
    }
    if (done) break;
    if (PyErr_CheckSignals() != 0) {
      {
        py::gil_scoped_release nogil;
        chorus_synthesis_free(s);  // cancels, and returns once the request has stopped
      }
      throw py::error_already_set();
    }
  }
  chorus_stats st = empty_stats();
  status = chorus_wait(s, &st);
  chorus_synthesis_free(s);
  check(status);
  size_t n = 0;
  for (const auto& c : q.chunks) n += c.size();
  std::vector<float> all;
  all.reserve(n);
  for (const auto& c : q.chunks) all.insert(all.end(), c.begin(), c.end());
  return py::make_tuple(to_array(std::move(all)), stats_dict(st));
}

std::shared_ptr<Model> load(const std::string& spec, const std::string& device, const std::string& weights,
                            int threads, bool codec, bool download) {
  chorus_load_options o;
  chorus_load_options_init(&o);
  o.device = device.c_str();
  o.weights = weights.c_str();
  o.threads = threads;
  o.codec = codec ? 1 : 0;
  o.download = download ? 1 : 0;
  chorus_model* m = nullptr;
  chorus_status st;
  {
    py::gil_scoped_release nogil;
    st = chorus_load(spec.c_str(), &o, &m);
  }
  check(st);
  return std::make_shared<Model>(m);
}

py::dict model_info(const Model& model) {
  chorus_model_info i;
  std::memset(&i, 0, sizeof(i));
  i.size = sizeof(i);
  check(chorus_model_get_info(model.m, &i));
  py::dict d;
  d["family"] = i.family;
  d["variant"] = i.variant;
  d["dir"] = i.dir;
  d["device"] = i.device;
  d["codebooks"] = i.codebooks;
  d["frame_rate"] = i.frame_rate;
  d["sample_rate"] = i.sample_rate;
  d["clones_voices"] = i.clones_voices != 0;
  d["has_codec"] = i.has_codec != 0;
  d["weights"] = i.weights ? i.weights : "bf16";
  const auto split = [](const char* list) {
    py::list out;
    std::string item;
    for (const char* c = list ? list : ""; ; ++c) {
      if (*c == ',' || *c == '\0') {
        if (!item.empty()) out.append(item);
        item.clear();
        if (*c == '\0') break;
      } else {
        item += *c;
      }
    }
    return py::tuple(out);
  };
  d["speakers"] = split(i.speakers);
  d["languages"] = split(i.languages);
  return d;
}

std::shared_ptr<Voice> voice_from_samples(const Model& model, py::array_t<float, py::array::c_style | py::array::forcecast> samples,
                                          int sample_rate, std::optional<std::string> ref_text) {
  if (samples.ndim() != 1) throw py::value_error("audio must be a 1-D (mono) array of samples");
  const std::string text = ref_text.value_or("");
  chorus_voice* v = nullptr;
  chorus_status st;
  {
    py::gil_scoped_release nogil;
    st = chorus_voice_create_from_samples(model.m, samples.data(), static_cast<size_t>(samples.size()), sample_rate,
                                          text.c_str(), &v);
  }
  check(st);
  return std::make_shared<Voice>(v);
}

std::shared_ptr<Voice> voice_from_file(const Model& model, const std::string& path, std::optional<std::string> ref_text) {
  const std::string text = ref_text.value_or("");
  chorus_voice* v = nullptr;
  chorus_status st;
  {
    py::gil_scoped_release nogil;
    st = chorus_voice_create_from_file(model.m, path.c_str(), text.c_str(), &v);
  }
  check(st);
  return std::make_shared<Voice>(v);
}

std::shared_ptr<Voice> voice_from_bytes(const Model& model, const py::bytes& data, std::optional<std::string> ref_text) {
  const std::string bytes = data;
  const std::string text = ref_text.value_or("");
  chorus_voice* v = nullptr;
  chorus_status st;
  {
    py::gil_scoped_release nogil;
    st = chorus_voice_create_from_bytes(model.m, bytes.data(), bytes.size(), text.c_str(), &v);
  }
  check(st);
  return std::make_shared<Voice>(v);
}

}  // namespace

PYBIND11_MODULE(_chorus, mod) {
  mod.doc() = "chorus engine bindings (use the `chorus` package, not this module)";
  mod.attr("API_VERSION") = CHORUS_API_VERSION;
  mod.def("api_version", &chorus_api_version, "The C API version of the loaded library.");
  mod.def("build_info", [] { return std::string(chorus_build_info()); }, "Version, backends and CPU features.");

  py::class_<Voice, std::shared_ptr<Voice>>(mod, "Voice",
                                           "A cloned voice (speaker embedding, reference codes, transcript): "
                                           "Model.create_voice() makes one, Voice.load() reads a voice file.")
      .def("__repr__",
           [](const Voice& v) {
             const int64_t frames = chorus_voice_ref_codes(v.v, nullptr, nullptr);
             return "chorus.Voice(" + std::to_string(frames) + " reference frames, ref_text=" +
                    py::repr(py::str(chorus_voice_ref_text(v.v))).cast<std::string>() + ")";
           })
      .def_static(
          "load",
          [](const std::string& path) {
            chorus_voice* v = nullptr;
            check(chorus_voice_load(path.c_str(), &v));
            return std::make_shared<Voice>(v);
          },
          py::arg("path"))
      .def("save", [](const Voice& v, const std::string& path) { check(chorus_voice_save(v.v, path.c_str())); },
           py::arg("path"))
      .def_property_readonly("ref_text", [](const Voice& v) { return std::string(chorus_voice_ref_text(v.v)); })
      .def_property_readonly("ref_seconds", [](const Voice& v) { return chorus_voice_ref_seconds(v.v); })
      .def_property_readonly("x_vector",
                             [](const Voice& v) {
                               const float* d = nullptr;
                               const size_t n = chorus_voice_x_vector(v.v, &d);
                               return py::array_t<float>({static_cast<py::ssize_t>(n)}, {sizeof(float)}, d);
                             })
      .def_property_readonly("ref_codes", [](const Voice& v) -> py::object {
        const int32_t* c = nullptr;
        int64_t cb = 0;
        const int64_t frames = chorus_voice_ref_codes(v.v, &c, &cb);
        if (frames <= 0) return py::none();
        const std::vector<py::ssize_t> shape{static_cast<py::ssize_t>(frames), static_cast<py::ssize_t>(cb)};
        const std::vector<py::ssize_t> strides{static_cast<py::ssize_t>(cb * sizeof(int32_t)),
                                               static_cast<py::ssize_t>(sizeof(int32_t))};
        return py::array_t<int32_t>(shape, strides, c);
      });

  py::class_<Request, std::shared_ptr<Request>>(mod, "Request")
      .def(py::init(&make_request), py::arg("text"), py::kw_only(), py::arg("instructions") = py::none(),
           py::arg("speaker") = py::none(), py::arg("language") = py::none(), py::arg("voice") = nullptr,
           py::arg("ref_text") = py::none(), py::arg("xvector_only") = false, py::arg("text_layout") = "default",
           py::arg("seed") = 0, py::arg("rng_stream") = 0, py::arg("greedy") = py::none(),
           py::arg("temperature") = py::none(), py::arg("top_k") = py::none(), py::arg("top_p") = py::none(),
           py::arg("repetition_penalty") = py::none(), py::arg("subtalker_greedy") = py::none(),
           py::arg("subtalker_temperature") = py::none(), py::arg("subtalker_top_k") = py::none(),
           py::arg("subtalker_top_p") = py::none(), py::arg("max_frames") = py::none(),
           py::arg("min_frames") = py::none(), py::arg("cfg_scale") = py::none(), py::arg("codes_only") = false);

  py::class_<Stream, std::shared_ptr<Stream>>(mod, "Stream")
      .def("next", &Stream::next, "The next chunk (float32 array), or None at the end.")
      .def("cancel", &Stream::cancel)
      .def("close", &Stream::close)
      .def("codes", &Stream::codes)
      .def_property_readonly("stats", &Stream::stats)
      .def_property_readonly("finished", &Stream::finished);

  py::class_<Model, std::shared_ptr<Model>>(mod, "Model")
      .def_property_readonly("info", &model_info)
      .def("synthesize", &synthesize, py::arg("request"))
      .def("start", [](std::shared_ptr<Model> m, std::shared_ptr<Request> r) { return std::make_shared<Stream>(m, r); },
           py::arg("request"))
      .def("voice_from_samples", &voice_from_samples, py::arg("samples"), py::arg("sample_rate"),
           py::arg("ref_text") = py::none())
      .def("voice_from_file", &voice_from_file, py::arg("path"), py::arg("ref_text") = py::none())
      .def("voice_from_bytes", &voice_from_bytes, py::arg("data"), py::arg("ref_text") = py::none());

  mod.def("load", &load, py::arg("spec"), py::arg("device") = "cpu", py::arg("weights") = "bf16",
          py::arg("threads") = 0, py::arg("codec") = true, py::arg("download") = false,
          "Loads a checkpoint; weights: \"bf16\" (as stored, exact), \"int8\", \"int4\" (CPU) or \"fp8\" (CUDA), "
          "quantised at load.");
}
