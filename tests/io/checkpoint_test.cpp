// Checkpoints: writer round trips, sharded checkpoints through model.safetensors.index.json (and
// bad index variants), and the config cross-check (Checkpoint::require).
#include <gtest/gtest.h>
#include <sys/stat.h>

#include <cstring>
#include <filesystem>

#include <nlohmann/json.hpp>

#include "io/safetensors.h"
#include "io/st_bytes.h"
#include "support/test_support.h"

namespace chorus::io {
namespace {

// A tensor with distinct bytes (pattern from `start`).
Tensor pattern_tensor(DType dt, Shape shape, unsigned start) {
  Tensor t = Tensor::zeros(dt, std::move(shape));
  const std::string bytes = test::pattern_bytes(t.nbytes(), start);
  if (!bytes.empty()) std::memcpy(t.mutable_data(), bytes.data(), bytes.size());
  return t;
}

bool same_bytes(const Tensor& a, const Tensor& b) {
  return a.nbytes() == b.nbytes() && std::memcmp(a.data(), b.data(), a.nbytes()) == 0;
}

TEST(SafetensorsWriter, RoundTripsEveryDtypeEmptyTensorsAndMetadata) {
  const std::vector<TensorToWrite> tensors = {
      {"f32", pattern_tensor(DType::kF32, {2, 3}, 1)},   {"f16", pattern_tensor(DType::kF16, {5}, 2)},
      {"bf16", pattern_tensor(DType::kBF16, {3, 1}, 3)}, {"f64", pattern_tensor(DType::kF64, {2}, 4)},
      {"i64", pattern_tensor(DType::kI64, {1}, 5)},      {"i32", pattern_tensor(DType::kI32, {3}, 6)},
      {"i16", pattern_tensor(DType::kI16, {3}, 7)},      {"i8", pattern_tensor(DType::kI8, {7}, 8)},
      {"u8", pattern_tensor(DType::kU8, {1, 1, 3}, 9)},  {"bool", pattern_tensor(DType::kBool, {4}, 10)},
      {"empty", pattern_tensor(DType::kF32, {0, 8}, 11)}, {"scalar", pattern_tensor(DType::kF32, {}, 12)},
      {"na\xc3\xafve.\xe5\x90\x8d", pattern_tensor(DType::kU8, {2}, 13)},
  };
  const std::map<std::string, std::string> meta = {{"format", "pt"}, {"k\"ey", "va\\lue\n"}};
  const std::string path = test::scratch_dir("io_roundtrip") + "/rt.safetensors";
  ASSERT_TRUE(write_safetensors(path, tensors, meta).ok());

  // The layout, read independently of our parser.
  const std::string raw = test::read_bytes(path);
  uint64_t n = 0;
  std::memcpy(&n, raw.data(), 8);
  EXPECT_EQ(n % 8, 0u);
  const std::string header = raw.substr(8, n);
  const size_t json_end = header.find_last_not_of(' ') + 1;
  EXPECT_LT(n - json_end, 8u);  // padding is spaces only, less than 8 of them
  const auto j = nlohmann::ordered_json::parse(header);
  auto it = j.begin();
  EXPECT_EQ(it.key(), "__metadata__");
  uint64_t offset = 0;
  for (const auto& t : tensors) {
    ++it;
    ASSERT_NE(it, j.end());
    EXPECT_EQ(it.key(), t.name);
    EXPECT_EQ((*it)["data_offsets"][0].get<uint64_t>(), offset);
    offset += t.tensor.nbytes();
    EXPECT_EQ((*it)["data_offsets"][1].get<uint64_t>(), offset);
  }
  EXPECT_EQ(raw.size(), 8 + n + offset);

  auto f = SafetensorsFile::open(path);
  ASSERT_TRUE(f.ok()) << f.error().to_string();
  EXPECT_EQ(f->metadata(), meta);
  ASSERT_EQ(f->tensors().size(), tensors.size());
  for (const auto& t : tensors) {
    SCOPED_TRACE(t.name);
    const TensorInfo* info = f->find(t.name);
    ASSERT_NE(info, nullptr);
    EXPECT_EQ(info->dtype, t.tensor.dtype());
    EXPECT_EQ(info->shape, t.tensor.shape());
    EXPECT_TRUE(same_bytes(f->tensor(*info), t.tensor));
  }
}

TEST(SafetensorsWriter, RefusesBadNamesAndUnwritablePaths) {
  const std::string dir = test::scratch_dir("io_writer_errors");
  const Tensor t = pattern_tensor(DType::kF32, {2}, 0);
  struct Case {
    std::vector<TensorToWrite> tensors;
    const char* message;
  };
  const std::vector<Case> cases = {
      {{{"a", t}, {"a", t}}, "tensor 'a' given twice"},
      {{{"__metadata__", t}}, "invalid tensor name '__metadata__'"},
      {{{"", t}}, "invalid tensor name ''"},
      {{{"bad\xff", t}}, "invalid tensor name"},
      {{{"nodata", Tensor()}}, "has no data"},  // an empty Tensor claiming shape [] = 1 element
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(c.message);
    auto s = write_safetensors(dir + "/x.safetensors", c.tensors);
    ASSERT_FALSE(s.ok());
    EXPECT_EQ(s.error().code, ErrorCode::kInvalidArgument);
    EXPECT_NE(s.error().message.find(c.message), std::string::npos) << s.error().message;
  }
  EXPECT_FALSE(std::filesystem::exists(dir + "/x.safetensors"));
  auto s = write_safetensors(dir + "/no/such/dir/x.safetensors", {{"a", t}});
  ASSERT_FALSE(s.ok());
  EXPECT_EQ(s.error().code, ErrorCode::kIo);
}

// Two shards and an index, as Hugging Face writes them.
struct Sharded {
  std::string dir;
  Tensor a, b, c;
};

Sharded write_sharded(const std::string& name, const std::string& index_json) {
  Sharded s{test::scratch_dir(name), pattern_tensor(DType::kF32, {2, 2}, 1), pattern_tensor(DType::kBF16, {3}, 50),
            pattern_tensor(DType::kU8, {5}, 90)};
  EXPECT_TRUE(write_safetensors(s.dir + "/model-00001-of-00002.safetensors", {{"a", s.a}, {"b", s.b}}).ok());
  EXPECT_TRUE(write_safetensors(s.dir + "/model-00002-of-00002.safetensors", {{"c", s.c}}).ok());
  test::write_bytes(s.dir + "/model.safetensors.index.json", index_json);
  return s;
}

const char* kGoodIndex = R"({"metadata":{"total_size":27},"weight_map":{
  "a":"model-00001-of-00002.safetensors","b":"model-00001-of-00002.safetensors",
  "c":"model-00002-of-00002.safetensors"}})";

TEST(ShardedCheckpoint, OpensEveryTensorFromItsShard) {
  const Sharded s = write_sharded("io_sharded_good", kGoodIndex);
  auto ckpt = Checkpoint::open_dir(s.dir);
  ASSERT_TRUE(ckpt.ok()) << ckpt.error().to_string();
  EXPECT_EQ(ckpt->names(), (std::vector<std::string>{"a", "b", "c"}));
  EXPECT_TRUE(same_bytes(ckpt->tensor("a"), s.a));
  EXPECT_TRUE(same_bytes(ckpt->tensor("b"), s.b));
  EXPECT_TRUE(same_bytes(ckpt->tensor("c"), s.c));
  EXPECT_EQ(ckpt->file_of("c"), s.dir + "/model-00002-of-00002.safetensors");
  EXPECT_EQ(ckpt->file_of("a"), s.dir + "/model-00001-of-00002.safetensors");
  EXPECT_EQ(ckpt->total_params(), 4u + 3u + 5u);
  EXPECT_TRUE(ckpt->tensor("zzz").empty());
  EXPECT_EQ(ckpt->label(), s.dir + "/model.safetensors.index.json");
}

TEST(ShardedCheckpoint, BadIndexVariantsGiveSpecificErrors) {
  const auto inv = ErrorCode::kInvalidFormat;
  const std::string s1 = "model-00001-of-00002.safetensors", s2 = "model-00002-of-00002.safetensors";
  auto index = [](const std::string& map) { return R"({"weight_map":{)" + map + "}}"; };
  struct Case {
    const char* name;
    std::string index;
    ErrorCode code;
    const char* message;
  };
  const std::vector<Case> cases = {
      {"not_json", "{\"weight_map\":", inv, "not valid JSON"},
      {"not_utf8", "{\"weight_map\":{\"a\xff\":1}}", inv, "not valid UTF-8"},
      {"root_array", "[]", inv, "must be a JSON object, not an array"},
      {"no_weight_map", R"({"metadata":{}})", inv, "weight_map is missing"},
      {"weight_map_array", R"({"weight_map":[]})", inv, "weight_map must be an object, not an array"},
      {"metadata_string", R"({"metadata":"x","weight_map":{"a":"x"}})", inv, "metadata must be an object"},
      {"empty_weight_map", R"({"weight_map":{}})", inv, "weight_map lists no tensors"},
      {"shard_not_string", index(R"("a":1)"), inv, "weight_map.a must be a shard file name"},
      {"shard_parent_dir", index(R"("a":"../model-00001-of-00002.safetensors")"), inv, "is not a plain file name"},
      {"shard_subdir", index(R"("a":"sub/x.safetensors")"), inv, "is not a plain file name"},
      {"shard_dotdot", index(R"("a":"..")"), inv, "is not a plain file name"},
      {"shard_absolute", index(R"("a":"/etc/passwd")"), inv, "is not a plain file name"},
      {"shard_nul", index(R"("a":"x\u0000.safetensors")"), inv, "is not a plain file name"},
      {"shard_empty_name", index(R"("a":"")"), inv, "is not a plain file name"},
      {"shard_missing", index(R"("a":"model-00009.safetensors")"), ErrorCode::kNotFound, "model-00009.safetensors"},
      {"duplicate_key", index("\"a\":\"" + s1 + "\",\"a\":\"" + s1 + "\""), inv, "duplicate key 'a'"},
      {"wrong_shard", index("\"a\":\"" + s2 + "\",\"b\":\"" + s1 + "\",\"c\":\"" + s2 + "\""), inv,
       "holds tensor 'a', which the index puts in model-00002-of-00002.safetensors"},
      {"unlisted_tensor", index("\"a\":\"" + s1 + "\",\"c\":\"" + s2 + "\""), inv,
       "holds tensor 'b', which the index does not list"},
      {"listed_but_absent",
       index("\"a\":\"" + s1 + "\",\"b\":\"" + s1 + "\",\"c\":\"" + s2 + "\",\"d\":\"" + s2 + "\""), inv,
       "tensor 'd' is mapped to model-00002-of-00002.safetensors, which does not contain it"},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(c.name);
    const Sharded s = write_sharded(std::string("io_bad_index_") + c.name, c.index);
    auto ckpt = Checkpoint::open_dir(s.dir);
    ASSERT_FALSE(ckpt.ok());
    EXPECT_EQ(error_code_name(ckpt.error().code), std::string(error_code_name(c.code)));
    EXPECT_NE(ckpt.error().message.find(c.message), std::string::npos) << ckpt.error().message;
    EXPECT_NE(ckpt.error().message.find(s.dir), std::string::npos) << ckpt.error().message;
  }
}

TEST(ShardedCheckpoint, TensorInTwoShardsIsRejected) {
  // Both shards hold "a"; whichever the index names, the other shard contradicts it.
  const std::string dir = test::scratch_dir("io_sharded_twice");
  const Tensor t = pattern_tensor(DType::kF32, {1}, 0);
  ASSERT_TRUE(write_safetensors(dir + "/s1.safetensors", {{"a", t}}).ok());
  ASSERT_TRUE(write_safetensors(dir + "/s2.safetensors", {{"a", t}, {"b", t}}).ok());
  test::write_bytes(dir + "/model.safetensors.index.json", R"({"weight_map":{"a":"s1.safetensors","b":"s2.safetensors"}})");
  auto ckpt = Checkpoint::open_dir(dir);
  ASSERT_FALSE(ckpt.ok());
  EXPECT_NE(ckpt.error().message.find("s2.safetensors holds tensor 'a', which the index puts in s1.safetensors"),
            std::string::npos)
      << ckpt.error().message;

  // The same through from_files, which has no index to consult.
  auto f1 = SafetensorsFile::open(dir + "/s1.safetensors");
  auto f2 = SafetensorsFile::open(dir + "/s2.safetensors");
  ASSERT_TRUE(f1.ok() && f2.ok());
  std::vector<SafetensorsFile> files;
  files.push_back(std::move(*f1));
  files.push_back(std::move(*f2));
  auto merged = Checkpoint::from_files(std::move(files));
  ASSERT_FALSE(merged.ok());
  EXPECT_EQ(merged.error().code, ErrorCode::kInvalidFormat);
  EXPECT_NE(merged.error().message.find("tensor 'a' is in both"), std::string::npos) << merged.error().message;
}

TEST(ShardedCheckpoint, MalformedShardIsReportedWithItsPath) {
  const Sharded s = write_sharded("io_sharded_bad_shard", kGoodIndex);
  const std::string shard = s.dir + "/model-00002-of-00002.safetensors";
  std::string bytes = test::read_bytes(shard);
  bytes.pop_back();  // truncate by one byte
  test::write_bytes(shard, bytes);
  auto ckpt = Checkpoint::open_dir(s.dir);
  ASSERT_FALSE(ckpt.ok());
  EXPECT_EQ(ckpt.error().code, ErrorCode::kInvalidFormat);
  EXPECT_EQ(ckpt.error().message.rfind(shard + ": tensor 'c'", 0), 0u) << ckpt.error().message;
}

TEST(Checkpoint, MissingDirectoryOrFilesIsNotFound) {
  const std::string dir = test::scratch_dir("io_ckpt_empty");
  auto ckpt = Checkpoint::open_dir(dir);
  ASSERT_FALSE(ckpt.ok());
  EXPECT_EQ(ckpt.error().code, ErrorCode::kNotFound);
  EXPECT_NE(ckpt.error().message.find("neither model.safetensors nor model.safetensors.index.json"),
            std::string::npos);
  auto other = Checkpoint::open_dir(dir + "/nope", "weights");
  ASSERT_FALSE(other.ok());
  EXPECT_EQ(other.error().code, ErrorCode::kNotFound);
  auto file = SafetensorsFile::open(dir + "/absent.safetensors");
  ASSERT_FALSE(file.ok());
  EXPECT_EQ(file.error().code, ErrorCode::kNotFound);
  auto directory = SafetensorsFile::open(dir);
  ASSERT_FALSE(directory.ok());
  EXPECT_EQ(directory.error().code, ErrorCode::kIo);
  EXPECT_NE(directory.error().message.find("not a regular file"), std::string::npos);
  // A FIFO with no writer: refused at once rather than blocking the loader.
  const std::string fifo = dir + "/fifo.safetensors";
  ASSERT_EQ(mkfifo(fifo.c_str(), 0600), 0);
  auto pipe = SafetensorsFile::open(fifo);
  ASSERT_FALSE(pipe.ok());
  EXPECT_NE(pipe.error().message.find("not a regular file"), std::string::npos);
}

TEST(Checkpoint, RequireChecksPresenceShapeAndDtypeAgainstTheConfig) {
  const std::string dir = test::scratch_dir("io_require");
  ASSERT_TRUE(write_safetensors(dir + "/model.safetensors",
                                {{"layers.0.weight", pattern_tensor(DType::kBF16, {4, 3}, 0)},
                                 {"norm", pattern_tensor(DType::kF32, {4}, 7)}})
                  .ok());
  auto ckpt = Checkpoint::open_dir(dir);
  ASSERT_TRUE(ckpt.ok()) << ckpt.error().to_string();
  const std::string file = dir + "/model.safetensors";

  auto ok = ckpt->require("layers.0.weight", {4, 3}, {DType::kBF16, DType::kF32});
  ASSERT_TRUE(ok.ok());
  EXPECT_EQ(ok->shape(), (Shape{4, 3}));
  EXPECT_TRUE(ckpt->require("norm", {4}).ok());  // any dtype

  auto missing = ckpt->require("layers.1.weight", {4, 3});
  ASSERT_FALSE(missing.ok());
  EXPECT_EQ(missing.error().code, ErrorCode::kNotFound);
  EXPECT_EQ(missing.error().message, file + ": tensor 'layers.1.weight' is missing");

  auto shape = ckpt->require("layers.0.weight", {3, 4});
  ASSERT_FALSE(shape.ok());
  EXPECT_EQ(shape.error().code, ErrorCode::kShapeMismatch);
  EXPECT_EQ(shape.error().message, file + ": tensor 'layers.0.weight': shape [4, 3] but the config implies [3, 4]");

  auto dtype = ckpt->require("norm", {4}, {DType::kBF16, DType::kF16});
  ASSERT_FALSE(dtype.ok());
  EXPECT_EQ(dtype.error().code, ErrorCode::kShapeMismatch);
  EXPECT_EQ(dtype.error().message, file + ": tensor 'norm': dtype F32 but expected BF16 or F16");
}

}  // namespace
}  // namespace chorus::io
