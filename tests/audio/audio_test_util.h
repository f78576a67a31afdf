// Helpers for the audio tests: analytic signals and hand-built WAV bytes (independent of the
// writer under test, so a bug there cannot hide in both).
#pragma once

#include <cmath>
#include <cstdint>
#include <cstring>
#include <fstream>
#include <iterator>
#include <numbers>
#include <string>
#include <vector>

namespace chorus::audio::testutil {

inline double sine_at(double amplitude, double hz, double t) { return amplitude * std::sin(2.0 * std::numbers::pi * hz * t); }

inline std::vector<float> sine(size_t n, int rate, double hz, double amplitude) {
  std::vector<float> x(n);
  for (size_t i = 0; i < n; ++i) x[i] = static_cast<float>(sine_at(amplitude, hz, static_cast<double>(i) / rate));
  return x;
}

struct WavSpec {
  uint16_t format_tag = 1;  // 1 PCM, 3 IEEE float
  uint16_t channels = 1;
  uint32_t sample_rate = 16000;
  uint16_t bits = 16;
  // The data chunk size written in the header; by default the payload size.
  int64_t declared_data_bytes = -1;
  int64_t declared_riff_bytes = -1;
};

inline void le16(std::string& s, uint16_t v) {
  s.push_back(static_cast<char>(v & 0xff));
  s.push_back(static_cast<char>(v >> 8));
}
inline void le32(std::string& s, uint32_t v) {
  for (int i = 0; i < 4; ++i) s.push_back(static_cast<char>((v >> (8 * i)) & 0xff));
}

// A canonical 44-byte-header WAV around `payload`.
inline std::string make_wav(const WavSpec& w, const std::string& payload) {
  std::string s = "RIFF";
  const uint32_t data_bytes =
      w.declared_data_bytes >= 0 ? static_cast<uint32_t>(w.declared_data_bytes) : static_cast<uint32_t>(payload.size());
  le32(s, w.declared_riff_bytes >= 0 ? static_cast<uint32_t>(w.declared_riff_bytes)
                                     : static_cast<uint32_t>(36 + payload.size()));
  s += "WAVEfmt ";
  le32(s, 16);
  le16(s, w.format_tag);
  le16(s, w.channels);
  le32(s, w.sample_rate);
  const uint32_t block = static_cast<uint32_t>(w.channels) * (w.bits / 8);
  le32(s, w.sample_rate * block);
  le16(s, static_cast<uint16_t>(block));
  le16(s, w.bits);
  s += "data";
  le32(s, data_bytes);
  s += payload;
  return s;
}

inline std::string pcm16_payload(const std::vector<float>& x) {
  std::string s;
  for (float v : x) le16(s, static_cast<uint16_t>(static_cast<int16_t>(std::lrint(v * 32767.0))));
  return s;
}

inline std::string f32_payload(const std::vector<float>& x) {
  std::string s(x.size() * 4, '\0');
  std::memcpy(s.data(), x.data(), s.size());
  return s;
}

inline std::string read_bytes(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  return std::string(std::istreambuf_iterator<char>(f), {});
}

inline void write_bytes(const std::string& path, const std::string& bytes) {
  std::ofstream f(path, std::ios::binary);
  f.write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
}

// What a 16-bit round trip gives for x: clip, scale by 32767, round, read back / 32768.
inline double pcm16_round_trip(double x) {
  const double c = x > 1 ? 1 : (x < -1 ? -1 : x);
  return std::nearbyint(c * 32767.0) / 32768.0;
}

}  // namespace chorus::audio::testutil
