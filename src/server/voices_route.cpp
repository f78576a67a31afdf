// Custom voices: POST /v1/audio/voices (multipart: name, audio_sample, optional ref_text, consent,
// model), GET /v1/audio/voices, GET and DELETE /v1/audio/voices/{id}.
#include <boost/beast/http.hpp>
#include <nlohmann/json.hpp>

#include "io/json_util.h"
#include "server/multipart.h"
#include "server/service.h"

namespace chorus::server {

namespace http = boost::beast::http;

namespace {

nlohmann::json voice_json(const StoredVoice& v) {
  return {{"id", v.id},
          {"object", "audio.voice"},
          {"type", "audio_sample"},
          {"name", v.name},
          {"model", v.model},
          {"created_at", v.created_at},
          {"ref_text", v.voice.ref_text},
          {"ref_seconds", v.voice.ref_seconds},
          {"has_ref_codes", v.voice.has_codes()}};
}

std::string dump(const nlohmann::json& j) { return j.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace); }

}  // namespace

// route() (request_head.h) has checked the id and the method: GET or DELETE with an id, GET or
// POST without.
void Service::handle_voices(Request&& req, Responder r, const std::string& id) {
  const auto method = req.method();
  if (!id.empty()) {
    if (method == http::verb::get) {
      auto v = voices_->get(id);
      if (!v) return reply_error(r, "voices", not_found("no voice '" + id + "'", "voice_id", "voice_not_found"));
      return reply(r, "voices", 200, dump(voice_json(*v)));
    }
    auto removed = voices_->remove(id);
    if (!removed.ok()) return reply_error(r, "voices", api_error_from(removed.error()));
    if (!*removed) return reply_error(r, "voices", not_found("no voice '" + id + "'", "voice_id", "voice_not_found"));
    return reply(r, "voices", 200, dump({{"id", id}, {"object", "audio.voice.deleted"}, {"deleted", true}}));
  }
  if (method == http::verb::get) {
    nlohmann::json data = nlohmann::json::array();
    for (const auto& v : voices_->list()) data.push_back(voice_json(*v));
    return reply(r, "voices", 200, dump({{"object", "list"}, {"data", data}}));
  }

  auto boundary = multipart_boundary(req[http::field::content_type]);
  if (!boundary)
    return reply_error(r, "voices", ApiError{415, "Content-Type must be multipart/form-data", "invalid_request_error", {}, "unsupported_media_type"});
  auto parts = parse_multipart(req.body(), *boundary);
  if (!parts.ok()) return reply_error(r, "voices", bad_request(parts.error().message));
  std::string name, ref_text, consent, model_id;  // consent: as the OpenAI SDK sends it (a recording id or text)
  const FormPart* audio = nullptr;
  for (const auto& p : *parts) {
    auto text = [&](std::string& out, size_t max) -> bool {
      if (p.data.size() > max || !io::is_valid_utf8(p.data)) return false;
      out = p.data;
      return true;
    };
    if (p.name == "audio_sample" || p.name == "file") {
      audio = &p;
    } else if (p.name == "name") {
      if (!text(name, 256)) return reply_error(r, "voices", bad_request("'name' must be UTF-8 text of at most 256 bytes", "name"));
    } else if (p.name == "ref_text") {
      if (!text(ref_text, 16384)) return reply_error(r, "voices", bad_request("'ref_text' must be UTF-8 text of at most 16 KiB", "ref_text"));
    } else if (p.name == "consent") {
      if (!text(consent, 1024)) return reply_error(r, "voices", bad_request("'consent' must be short UTF-8 text", "consent"));
    } else if (p.name == "type") {
      if (p.data != "audio_sample")
        return reply_error(r, "voices", bad_request("only audio_sample voices can be created here", "type"));
    } else if (p.name == "model") {
      if (!text(model_id, 256)) return reply_error(r, "voices", bad_request("'model' must be UTF-8 text", "model"));
    } else {
      return reply_error(r, "voices", bad_request("unrecognized form field '" + p.name + "'", p.name, "unknown_parameter"));
    }
  }
  if (name.empty()) return reply_error(r, "voices", bad_request("'name' is required", "name"));
  if (!audio || audio->data.empty()) return reply_error(r, "voices", bad_request("'audio_sample' is required", "audio_sample"));
  LoadedModel* lm = nullptr;
  if (!model_id.empty()) {
    lm = find_model(model_id);
    if (!lm) return reply_error(r, "voices", not_found("the model '" + model_id + "' does not exist", "model", "model_not_found"));
  } else {
    for (auto& m : models_)
      if (m->model->clones_voices()) {
        lm = m.get();
        break;
      }
  }
  if (!lm || !lm->model->clones_voices())
    return reply_error(r, "voices", bad_request("no loaded model clones voices (load a Base model)", "model"));

  engine::ReferenceAudio ref;
  ref.bytes = audio->data;
  ref.label = "audio_sample";
  auto v = lm->model->create_voice(ref, ref_text);
  if (!v.ok()) return reply_error(r, "voices", api_error_from(v.error(), "audio_sample"));
  StoredVoice sv;
  sv.name = name;
  sv.model = lm->id;
  sv.consent = consent;
  sv.voice = std::move(*v);
  auto added = voices_->add(std::move(sv));
  if (!added.ok()) return reply_error(r, "voices", api_error_from(added.error()));
  return reply(r, "voices", 200, dump(voice_json(**added)));
}

}  // namespace chorus::server
