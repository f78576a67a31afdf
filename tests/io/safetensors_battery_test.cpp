// The bad-checkpoint battery (RELIABILITY.md §3.2 L1/L2): handcrafted malformed files, each with
// its specific typed error; every truncation prefix of a valid file; and memory bounded by the
// file size plus a small constant. Runs under ASan+UBSan in scripts/test.sh.
#include <gtest/gtest.h>

#include <cstdio>
#include <cstring>

#include "io/alloc_counter.h"
#include "io/safetensors.h"
#include "io/st_bytes.h"
#include "support/test_support.h"

namespace chorus::io {
namespace {

using test::st_file;

constexpr size_t kSlackBytes = 64 << 10;  // "small constant" beyond the file size

struct BadCase {
  const char* name;
  std::string bytes;
  ErrorCode code;
  const char* message;  // a substring the error must contain
  SafetensorsLimits limits = {};
};

// Tensor entry JSON.
std::string entry(const char* dtype, const char* shape, const char* offsets) {
  return std::string("{\"dtype\":\"") + dtype + "\",\"shape\":" + shape + ",\"data_offsets\":" + offsets + "}";
}

std::string one(const char* name, const std::string& body) { return std::string("{\"") + name + "\":" + body + "}"; }

const std::string kA = entry("F32", "[2]", "[0,8]");  // a valid 8-byte tensor

std::vector<BadCase> bad_cases() {
  const std::string d8 = test::pattern_bytes(8), d12 = test::pattern_bytes(12), d20 = test::pattern_bytes(20);
  const auto inv = ErrorCode::kInvalidFormat;
  std::vector<BadCase> c = {
      // Length prefix.
      {"empty_file", "", inv, "too short for the 8-byte header length"},
      {"seven_bytes", std::string(7, '\0'), inv, "too short for the 8-byte header length"},
      {"header_length_huge", test::le64(1ull << 62) + "{}", ErrorCode::kResourceExhausted, "exceeds the limit"},
      {"header_length_u64_max", test::le64(~0ull) + "{}", ErrorCode::kResourceExhausted, "exceeds the limit"},
      {"header_past_eof", test::le64(100) + "{}", inv, "runs past the end of the 10-byte file"},
      {"header_empty", test::le64(0), inv, "header is empty"},
      // Encoding and JSON shape.
      {"non_utf8_byte", st_file("{\"a\xff\":" + kA + "}", d8), inv, "not valid UTF-8"},
      {"overlong_utf8", st_file("{\"a\xc0\xaf\":" + kA + "}", d8), inv, "not valid UTF-8"},
      {"utf8_surrogate", st_file("{\"\xed\xa0\x80\":" + kA + "}", d8), inv, "not valid UTF-8"},
      {"utf8_cut_short", st_file("{\"a\":" + kA + ",\"\xe2\x82", ""), inv, "not valid UTF-8"},
      {"root_array", st_file("[]", ""), inv, "header is not a JSON object"},
      {"root_string", st_file("\"{}\"", ""), inv, "header is not a JSON object"},
      {"leading_space", st_file(" {}", ""), inv, "header is not a JSON object"},
      {"unterminated", st_file("{\"a\":", ""), inv, "header is not valid JSON"},
      {"trailing_garbage", st_file("{}x", ""), inv, "header is not valid JSON"},
      {"nul_padding", st_file(std::string("{}\0\0\0\0\0\0", 8), ""), inv, "header is not valid JSON"},
      {"lone_surrogate_escape", st_file("{\"\\ud800\":" + kA + "}", d8), inv, "header is not valid JSON"},
      {"number_overflow", st_file("{\"a\":" + entry("F32", "[1e999]", "[0,8]") + "}", d8), inv,
       "header is not valid JSON"},
      // Duplicate keys.
      {"duplicate_tensor", st_file("{\"a\":" + kA + ",\"a\":" + kA + "}", d8), inv, "duplicate key 'a'"},
      {"duplicate_metadata", st_file(R"({"__metadata__":{},"__metadata__":{}})", ""), inv,
       "duplicate key '__metadata__'"},
      {"duplicate_metadata_key", st_file(R"({"__metadata__":{"k":"1","k":"2"}})", ""), inv,
       "duplicate key 'k' in __metadata__"},
      {"duplicate_field", st_file(R"({"a":{"dtype":"F32","dtype":"F32","shape":[2],"data_offsets":[0,8]}})", d8),
       inv, "tensor 'a': duplicate key 'dtype'"},
      // Entry schema.
      {"unknown_dtype", st_file(one("a", entry("F33", "[2]", "[0,8]")), d8), inv, "tensor 'a': unknown dtype 'F33'"},
      {"unsupported_dtype", st_file(one("a", entry("F8_E4M3", "[8]", "[0,8]")), d8), ErrorCode::kUnsupported,
       "tensor 'a': dtype F8_E4M3 is not supported"},
      {"dtype_not_string", st_file(R"({"a":{"dtype":4,"shape":[2],"data_offsets":[0,8]}})", d8), inv,
       "'dtype' must be a string, not a number"},
      {"missing_dtype", st_file(R"({"a":{"shape":[2],"data_offsets":[0,8]}})", d8), inv, "tensor 'a': missing 'dtype'"},
      {"missing_shape", st_file(R"({"a":{"dtype":"F32","data_offsets":[0,8]}})", d8), inv, "tensor 'a': missing 'shape'"},
      {"missing_offsets", st_file(R"({"a":{"dtype":"F32","shape":[2]}})", d8), inv,
       "tensor 'a': missing 'data_offsets'"},
      {"unknown_field", st_file(R"({"a":{"dtype":"F32","shape":[2],"data_offsets":[0,8],"x":1}})", d8), inv,
       "tensor 'a': unexpected field 'x'"},
      {"shape_not_array", st_file(one("a", entry("F32", "2", "[0,8]")), d8), inv,
       "'shape' must be an array of integers, not a number"},
      {"offsets_not_array", st_file(one("a", entry("F32", "[2]", "{}")), d8), inv,
       "'data_offsets' must be an array of 2 integers, not an object"},
      {"negative_dim", st_file(one("a", entry("F32", "[-2]", "[0,8]")), d8), inv,
       "'shape' must hold non-negative integers, not the number -2"},
      {"fractional_dim", st_file(one("a", entry("F32", "[2.5]", "[0,8]")), d8), inv,
       "'shape' must hold non-negative integers, not the number 2.5"},
      {"bool_dim", st_file(one("a", entry("F32", "[true]", "[0,8]")), d8), inv,
       "'shape' must hold non-negative integers, not a boolean"},
      {"dim_beyond_int64", st_file(one("a", entry("U8", "[9223372036854775808]", "[0,8]")), d8), inv,
       "not the number 9223372036854775808"},
      {"rank_too_high", st_file(one("a", entry("U8", "[1,1,1,1,1,1,1,1,1]", "[0,1]")), "x"),
       ErrorCode::kUnsupported, "rank above the maximum of 8"},
      {"offsets_three", st_file(one("a", entry("F32", "[2]", "[0,8,8]")), d8), inv,
       "'data_offsets' must hold exactly 2 integers"},
      {"offsets_one", st_file(one("a", entry("F32", "[2]", "[8]")), d8), inv, "'data_offsets' must hold exactly 2 integers"},
      {"offsets_negative", st_file(one("a", entry("F32", "[2]", "[-8,0]")), d8), inv,
       "'data_offsets' must hold non-negative integers, not the number -8"},
      {"offsets_beyond_u64", st_file(one("a", entry("F32", "[2]", "[0,18446744073709551616]")), d8), inv,
       "not the number 18446744073709551616"},
      {"metadata_number", st_file(R"({"__metadata__":{"k":1}})", ""), inv, "__metadata__ 'k': values must be strings"},
      {"metadata_nested", st_file(R"({"__metadata__":{"k":{"x":"y"}}})", ""), inv,
       "__metadata__ 'k': values must be strings, not an object"},
      {"metadata_not_object", st_file(R"({"__metadata__":"x"})", ""), inv, "'__metadata__' must be an object"},
      {"tensor_not_object", st_file(R"({"a":"x"})", ""), inv, "tensor 'a': expected an object, not a string"},
      {"tensor_null", st_file(R"({"a":null})", ""), inv, "tensor 'a': expected an object, not null"},
      {"deep_nesting", st_file("{\"a\":" + std::string(10000, '[') + std::string(10000, ']') + "}", ""), inv,
       "tensor 'a': expected an object, not an array"},
      // Size arithmetic.
      {"numel_overflow", st_file(one("a", entry("U8", "[4294967296,4294967296,4294967296]", "[0,8]")), d8), inv,
       "has more elements than fit in 64 bits"},
      {"bytes_overflow", st_file(one("a", entry("F32", "[4611686018427387904]", "[0,8]")), d8), inv,
       "F32 [4611686018427387904] needs more bytes than fit in 64 bits"},
      // Offsets against sizes and against each other.
      {"size_mismatch", st_file(one("a.weight", entry("BF16", "[3,2]", "[0,10]")), test::pattern_bytes(10)), inv,
       "tensor 'a.weight': data offsets [0, 10) but BF16 [3, 2] needs 12 bytes"},
      {"reversed_offsets", st_file(one("a", entry("F32", "[0]", "[8,0]")), d8), inv,
       "tensor 'a': data offsets [8, 0) are reversed"},
      {"offsets_past_end", st_file(one("a", entry("F32", "[2]", "[0,8]")), "1234"), inv,
       "tensor 'a': data offsets [0, 8) run past the end of the 4-byte data section"},
      {"offsets_huge", st_file(one("a", entry("F32", "[2305843009213693952]", "[0,9223372036854775808]")), d8), inv,
       "run past the end of the 8-byte data section"},
      {"overlap", st_file("{\"a\":" + kA + ",\"b\":" + entry("F32", "[2]", "[4,12]") + "}", d12), inv,
       "tensor 'b': data offsets [4, 12) overlap tensor 'a' [0, 8)"},
      {"same_region", st_file("{\"a\":" + kA + ",\"b\":" + kA + "}", d8), inv, "overlap tensor 'a'"},
      {"gap", st_file("{\"a\":" + kA + ",\"b\":" + entry("F32", "[2]", "[12,20]") + "}", d20), inv,
       "tensor 'b': data offsets [12, 20) leave a gap of 4 unused bytes"},
      {"leading_gap", st_file(one("a", entry("F32", "[2]", "[4,12]")), d12), inv, "leave a gap of 4 unused bytes"},
      {"trailing_bytes", st_file(one("a", kA), test::pattern_bytes(9)), inv, "1 trailing bytes after the last tensor"},
      {"trailing_bytes_no_tensors", st_file("{}", "x"), inv, "1 trailing bytes"},
  };
  // Caps given by the caller.
  SafetensorsLimits two_tensors;
  two_tensors.max_tensors = 2;
  c.push_back({"too_many_tensors",
               st_file("{\"a\":" + entry("U8", "[1]", "[0,1]") + ",\"b\":" + entry("U8", "[1]", "[1,2]") +
                           ",\"c\":" + entry("U8", "[1]", "[2,3]") + "}",
                       "abc"),
               ErrorCode::kResourceExhausted, "more than 2 tensors", two_tensors});
  SafetensorsLimits small_file;
  small_file.max_file_bytes = 16;
  c.push_back({"file_over_cap", st_file(one("a", kA), d8), ErrorCode::kResourceExhausted,
               "more than the 16-byte limit", small_file});
  SafetensorsLimits small_header;
  small_header.max_header_bytes = 8;
  c.push_back({"header_over_cap", st_file(one("a", kA), d8), ErrorCode::kResourceExhausted, "exceeds the limit of 8 bytes",
               small_header});
  SafetensorsLimits rank2;
  rank2.max_rank = 2;
  c.push_back({"rank_over_cap", st_file(one("a", entry("U8", "[1,1,1]", "[0,1]")), "x"), ErrorCode::kUnsupported,
               "rank above the maximum of 2", rank2});
  return c;
}

TEST(SafetensorsBattery, HasAtLeastThirtyCases) { EXPECT_GE(bad_cases().size(), 30u); }

TEST(SafetensorsBattery, EveryMalformedBufferGivesItsSpecificError) {
  for (const BadCase& c : bad_cases()) {
    SCOPED_TRACE(c.name);
    test::AllocationScope scope;
    auto r = SafetensorsFile::parse(c.bytes, "bad.safetensors", c.limits);
    const size_t peak = scope.peak();
    ASSERT_FALSE(r.ok());
    EXPECT_EQ(error_code_name(r.error().code), std::string(error_code_name(c.code)));
    EXPECT_NE(r.error().message.find(c.message), std::string::npos) << r.error().message;
    EXPECT_EQ(r.error().message.rfind("bad.safetensors: ", 0), 0u) << r.error().message;
    EXPECT_LE(peak, c.bytes.size() + kSlackBytes);
  }
}

TEST(SafetensorsBattery, EveryMalformedFileGivesItsSpecificError) {
  const std::string dir = test::scratch_dir("io_battery_files");
  for (const BadCase& c : bad_cases()) {
    SCOPED_TRACE(c.name);
    const std::string path = dir + "/" + c.name + ".safetensors";
    test::write_bytes(path, c.bytes);
    test::AllocationScope scope;
    auto r = SafetensorsFile::open(path, c.limits);
    const size_t peak = scope.peak();
    ASSERT_FALSE(r.ok());
    EXPECT_EQ(error_code_name(r.error().code), std::string(error_code_name(c.code)));
    EXPECT_NE(r.error().message.find(c.message), std::string::npos) << r.error().message;
    EXPECT_EQ(r.error().message.rfind(path + ": ", 0), 0u) << r.error().message;
    EXPECT_LE(peak, c.bytes.size() + kSlackBytes);
  }
}

// A small valid file: metadata, three tensors written out of offset order in the header and one
// of them empty, so sorting, zero sizes and metadata are all on the truncation path.
std::string small_valid_file() {
  const std::string header =
      R"({"__metadata__":{"format":"pt","note":"x"},)"
      R"("w":{"dtype":"BF16","shape":[3,2],"data_offsets":[8,20]},)"
      R"("e":{"dtype":"F32","shape":[0,4],"data_offsets":[20,20]},)"
      R"("b":{"dtype":"F32","shape":[2],"data_offsets":[0,8]}})";
  return st_file(header, test::pattern_bytes(20, 100));
}

TEST(SafetensorsBattery, SmallValidFileLoadsWithTheHandWrittenLayout) {
  const std::string bytes = small_valid_file();
  auto f = SafetensorsFile::parse(bytes, "small.safetensors");
  ASSERT_TRUE(f.ok()) << f.error().to_string();
  ASSERT_EQ(f->tensors().size(), 3u);
  // In file (offset) order, whatever the header's key order.
  EXPECT_EQ(f->tensors()[0].name, "b");
  EXPECT_EQ(f->tensors()[1].name, "w");
  EXPECT_EQ(f->tensors()[2].name, "e");
  EXPECT_EQ(f->metadata().at("format"), "pt");
  EXPECT_EQ(f->metadata().at("note"), "x");
  EXPECT_EQ(f->data_bytes(), 20u);
  const TensorInfo* w = f->find("w");
  ASSERT_NE(w, nullptr);
  EXPECT_EQ(w->dtype, DType::kBF16);
  EXPECT_EQ(w->shape, (Shape{3, 2}));
  const Tensor t = f->tensor(*w);
  ASSERT_EQ(t.nbytes(), 12u);
  // Bytes 8..19 of the data section, i.e. pattern values 108..119.
  const auto* p = static_cast<const unsigned char*>(t.data());
  for (int i = 0; i < 12; ++i) EXPECT_EQ(p[i], 108 + i);
  EXPECT_EQ(reinterpret_cast<uintptr_t>(f->tensor(*f->find("b")).data()) % 64, 0u);  // data section aligned
  EXPECT_FALSE(f->tensor(*f->find("e")).empty());
  EXPECT_EQ(f->find("missing"), nullptr);
}

TEST(SafetensorsBattery, EveryTruncationPrefixFailsCleanly) {
  const std::string bytes = small_valid_file();
  const std::string dir = test::scratch_dir("io_truncation");
  const std::string path = dir + "/t.safetensors";
  for (size_t len = 0; len < bytes.size(); ++len) {
    SCOPED_TRACE(len);
    const std::string_view prefix(bytes.data(), len);
    auto r = SafetensorsFile::parse(prefix, "t.safetensors");
    ASSERT_FALSE(r.ok());
    EXPECT_EQ(r.error().code, ErrorCode::kInvalidFormat);
    const std::string& m = r.error().message;
    EXPECT_TRUE(m.find("too short") != std::string::npos || m.find("runs past the end") != std::string::npos ||
                m.find("run past the end of the") != std::string::npos)
        << m;
    test::write_bytes(path, prefix);
    auto rf = SafetensorsFile::open(path);
    ASSERT_FALSE(rf.ok());
    EXPECT_EQ(rf.error().code, ErrorCode::kInvalidFormat);
  }
  EXPECT_TRUE(SafetensorsFile::parse(bytes, "t.safetensors").ok());
  test::write_bytes(path, bytes);
  EXPECT_TRUE(SafetensorsFile::open(path).ok());
}

TEST(SafetensorsBattery, TruncatedReferenceModelFailsCleanlyAtEveryHeaderByteAndTensorBoundary) {
  const std::string path = test::reference_path("qwen3_tts/models/tiny_base/speech_tokenizer/model.safetensors");
  const std::string full = test::read_bytes(path);
  ASSERT_GT(full.size(), 1000u);
  auto whole = SafetensorsFile::parse(full, "m.safetensors");
  ASSERT_TRUE(whole.ok()) << whole.error().to_string();
  uint64_t n = 0;
  std::memcpy(&n, full.data(), 8);
  // Every cut through the length and header, and either side of each tensor's last byte.
  std::vector<size_t> cuts;
  for (size_t len = 0; len < 8 + n + 8; ++len) cuts.push_back(len);
  for (const TensorInfo& t : whole->tensors())
    for (uint64_t at : {t.begin + 1, t.end - 1})
      if (t.end > t.begin && 8 + n + at < full.size()) cuts.push_back(8 + n + at);
  cuts.push_back(full.size() - 1);
  for (size_t len : cuts) {
    auto r = SafetensorsFile::parse(std::string_view(full.data(), len), "m.safetensors");
    ASSERT_FALSE(r.ok()) << len;
    ASSERT_EQ(r.error().code, ErrorCode::kInvalidFormat) << len << ": " << r.error().message;
  }
}

TEST(SafetensorsBattery, MemoryForAValidFileIsTheFileSizePlusASmallConstant) {
  // 1 MiB of data: big enough that a second copy or a header-proportional blow-up would show.
  const size_t data_bytes = 1 << 20;
  const std::string bytes = st_file(one("a", entry("U8", "[1048576]", "[0,1048576]")), test::pattern_bytes(data_bytes));
  const std::string path = test::scratch_dir("io_memory") + "/m.safetensors";
  test::write_bytes(path, bytes);
  test::AllocationScope scope;
  auto f = SafetensorsFile::open(path);
  const size_t peak = scope.peak();
  ASSERT_TRUE(f.ok()) << f.error().to_string();
  EXPECT_LE(peak, bytes.size() + kSlackBytes);
  // Guard against a vacuous bound: where the data buffer is counted, it must have been seen.
  if (test::counts_aligned_alloc()) {
    EXPECT_GE(peak, data_bytes);
  }
}

TEST(SafetensorsBattery, MemoryForAHeaderOfManyTinyTensorsStaysProportional) {
  // The adversarial shape for per-tensor bookkeeping: 20000 one-byte tensors, so the header is
  // nearly the whole file. Bookkeeping (names, shapes, index) costs a small multiple of the header's
  // bytes (2.7x measured), never more; with the header cap this bounds memory for any input.
  std::string header = "{";
  for (int i = 0; i < 20000; ++i) {
    if (i) header += ',';
    header += "\"t" + std::to_string(i) + "\":" +
              entry("U8", "[1]", ("[" + std::to_string(i) + "," + std::to_string(i + 1) + "]").c_str());
  }
  header += "}";
  const std::string bytes = st_file(header, test::pattern_bytes(20000));
  test::AllocationScope scope;
  auto f = SafetensorsFile::parse(bytes, "many.safetensors");
  const size_t peak = scope.peak();
  ASSERT_TRUE(f.ok()) << f.error().to_string();
  ASSERT_EQ(f->tensors().size(), 20000u);
  EXPECT_EQ(f->tensors()[12345].name, "t12345");
  std::printf("many tiny tensors: file %zu bytes, peak allocation %zu bytes (%.2fx)\n", bytes.size(), peak,
              static_cast<double>(peak) / bytes.size());
  EXPECT_LE(peak, 3 * bytes.size() + kSlackBytes);
}

TEST(SafetensorsBattery, HugeClaimsAreRejectedBeforeAnyLargeAllocation) {
  // Header length, shape and offsets each claim exabytes in a file of a few dozen bytes.
  const std::vector<std::string> files = {
      test::le64(15ull << 20) + "{}",  // within the 16 MB cap but past the end of the file
      st_file(one("a", entry("F32", "[2305843009213693952]", "[0,9223372036854775808]")), ""),
      st_file(one("a", entry("U8", "[1099511627776]", "[0,1099511627776]")), "xy"),
  };
  const std::string dir = test::scratch_dir("io_huge_claims");
  for (size_t i = 0; i < files.size(); ++i) {
    SCOPED_TRACE(i);
    const std::string path = dir + "/h" + std::to_string(i) + ".safetensors";
    test::write_bytes(path, files[i]);
    test::AllocationScope scope;
    auto r = SafetensorsFile::open(path);
    EXPECT_FALSE(r.ok());
    EXPECT_LE(scope.peak(), kSlackBytes);
  }
}

}  // namespace
}  // namespace chorus::io
