#include "model/safetensors.h"

#include <gtest/gtest.h>
#include <sys/stat.h>

#include <cmath>
#include <cstdlib>
#include <boost/json.hpp>
#include <cstring>

#include "base/check.h"
#include "base/file.h"
#include "base/random.h"
#include "model/loader.h"

namespace koi::model {
namespace {

class SafetensorsTest : public ::testing::Test {
 protected:
  void SetUp() override {
    auto d = make_temp_dir("koi-safetensors-test");
    ASSERT_TRUE(d.ok()) << d.status().to_string();
    dir_ = *d;
  }
  void TearDown() override { remove_all(dir_); }
  std::string path(std::string_view name) const { return path_join(dir_, name); }

  std::string dir_;
};

// Deterministic values, computed in double and rounded to f32 (as torch.tensor does).
std::vector<float> values(int n, double scale) {
  std::vector<float> out(n);
  for (int idx = 0; idx < n; ++idx) out[idx] = static_cast<float>((idx % 17 - 8) * scale);
  return out;
}

std::vector<uint16_t> to_half(const std::vector<float>& v, uint16_t (*convert)(float)) {
  std::vector<uint16_t> out;
  for (float x : v) out.push_back(convert(x));
  return out;
}

// The tensors of the sample model: f32 [3, 4], f16 [5], bf16 [2, 1, 3] (row-major shapes).
struct Sample {
  std::vector<float> embed = values(12, 0.25);
  std::vector<uint16_t> norm = to_half(values(5, 1.0 / 3), f32_to_f16);
  std::vector<uint16_t> head = to_half(values(6, 0.1), f32_to_bf16);
  float scalar = 2.5f;

  std::vector<SafetensorsWriteTensor> tensors() const {
    return {{"model.embed_tokens.weight", DType::kF32, {3, 4}, embed.data()},
            {"model.norm.weight", DType::kF16, {5}, norm.data()},
            {"lm_head.weight", DType::kBF16, {2, 1, 3}, head.data()},
            {"scale", DType::kF32, {}, &scalar}};
  }
};

TEST_F(SafetensorsTest, RoundTripReversesShapesAndAlignsData) {
  Sample s;
  ASSERT_TRUE(write_safetensors(path("m.safetensors"), s.tensors(), {{"format", "pt"}}).ok());

  auto bytes = read_file(path("m.safetensors"));
  ASSERT_TRUE(bytes.ok());
  // The header, exactly: metadata first, then tensors by element size and name, padded with
  // spaces so that the data starts at a multiple of 8.
  std::string header =
      R"({"__metadata__":{"format":"pt"},)"
      R"("model.embed_tokens.weight":{"dtype":"F32","shape":[3,4],"data_offsets":[0,48]},)"
      R"("scale":{"dtype":"F32","shape":[],"data_offsets":[48,52]},)"
      R"("lm_head.weight":{"dtype":"BF16","shape":[2,1,3],"data_offsets":[52,64]},)"
      R"("model.norm.weight":{"dtype":"F16","shape":[5],"data_offsets":[64,74]}})";
  header.append((8 - header.size() % 8) % 8, ' ');
  uint64_t header_len = 0;
  std::memcpy(&header_len, bytes->data(), 8);
  EXPECT_EQ(header_len, header.size());
  EXPECT_EQ(bytes->substr(8, header_len), header);
  EXPECT_EQ(bytes->size(), 8 + header.size() + 74);

  auto f = SafetensorsFile::open(path("m.safetensors"));
  ASSERT_TRUE(f.ok()) << f.status().to_string();
  EXPECT_EQ(f->metadata(), (std::map<std::string, std::string>{{"format", "pt"}}));
  ASSERT_EQ(f->tensors().size(), 4u);
  const SafetensorsTensor* embed = f->find("model.embed_tokens.weight");
  ASSERT_NE(embed, nullptr);
  EXPECT_EQ(embed->view.type, DType::kF32);
  EXPECT_EQ(embed->view.shape_string(), "[4, 3]");
  EXPECT_EQ(std::memcmp(embed->view.data, s.embed.data(), 48), 0);
  const SafetensorsTensor* head = f->find("lm_head.weight");
  EXPECT_EQ(head->view.type, DType::kBF16);
  EXPECT_EQ(head->view.shape_string(), "[3, 1, 2]");
  EXPECT_EQ(std::memcmp(head->view.data, s.head.data(), 12), 0);
  const SafetensorsTensor* norm = f->find("model.norm.weight");
  EXPECT_EQ(norm->view.type, DType::kF16);
  EXPECT_EQ(norm->view.shape_string(), "[5]");
  EXPECT_EQ(std::memcmp(norm->view.data, s.norm.data(), 10), 0);
  const SafetensorsTensor* scale = f->find("scale");
  EXPECT_EQ(scale->view.shape_string(), "[1]");
  EXPECT_EQ(scale->view.f32()[0], 2.5f);
  EXPECT_EQ(f->find("missing"), nullptr);
}

TEST_F(SafetensorsTest, EmptyTensorSharesItsOffsetWithTheNext) {
  float data[2] = {1, 2};
  ASSERT_TRUE(write_safetensors(path("e.safetensors"), {{"a", DType::kF32, {0, 3}, nullptr},
                                                        {"b", DType::kF32, {2}, data}})
                  .ok());
  auto f = SafetensorsFile::open(path("e.safetensors"));
  ASSERT_TRUE(f.ok()) << f.status().to_string();
  EXPECT_EQ(f->find("a")->view.shape_string(), "[3, 0]");
  EXPECT_EQ(f->find("a")->view.num_bytes(), 0);
  EXPECT_EQ(f->find("b")->view.f32()[1], 2.0f);
}

TEST_F(SafetensorsTest, WriterRejectsWhatSafetensorsCannotHold) {
  std::vector<uint8_t> data(64);
  struct Case {
    std::vector<SafetensorsWriteTensor> tensors;
    StatusCode code;
    std::string message;
  };
  const Case cases[] = {
      {{{"q", DType::kQ8_0, {32}, data.data()}}, StatusCode::kUnsupported,
       "tensor 'q' is q8_0; safetensors files from Koi hold f32, f16 or bf16"},
      {{{"a", DType::kF32, {2}, data.data()}, {"a", DType::kF32, {2}, data.data()}}, StatusCode::kInvalidArgument,
       "tensor 'a' is added twice or uses the reserved name __metadata__"},
      {{{"__metadata__", DType::kF32, {2}, data.data()}}, StatusCode::kInvalidArgument,
       "tensor '__metadata__' is added twice or uses the reserved name __metadata__"},
      {{{"n", DType::kF32, {2, -1}, data.data()}}, StatusCode::kInvalidArgument,
       "tensor 'n' has a negative or too large shape"},
  };
  for (const Case& c : cases) {
    Status s = write_safetensors(path("bad.safetensors"), c.tensors);
    EXPECT_EQ(s.code(), c.code) << c.message;
    EXPECT_EQ(s.message(), path("bad.safetensors") + ": " + c.message);
    EXPECT_FALSE(file_exists(path("bad.safetensors")));
  }
}

// A file from a header and a data buffer.
std::string file_bytes(std::string_view header, std::string_view data = "") {
  uint64_t n = header.size();
  std::string out(reinterpret_cast<const char*>(&n), 8);
  out.append(header);
  out.append(data);
  return out;
}

std::string length_only(uint64_t n) { return std::string(reinterpret_cast<const char*>(&n), 8); }

TEST(SafetensorsCorruptTest, EveryCorruptionIsAnErrorWithAPinnedMessage) {
  const std::string zeros(64, '\0');
  struct Case {
    std::string bytes;
    StatusCode code;
    std::string message;
  };
  const Case cases[] = {
      {"abc", StatusCode::kCorrupt, "file is 3 bytes, too short for the 8-byte header length; the file is truncated"},
      {length_only(200u << 20), StatusCode::kCorrupt,
       "header length 209715200 is over the 100 MB limit; the file is corrupt or not safetensors"},
      {length_only(100) + "{}", StatusCode::kCorrupt,
       "header length 100 runs past the end of the file (10 bytes); the file is truncated"},
      {file_bytes(R"({"a": {"dtype": "F32",)"), StatusCode::kCorrupt,
       "header is not valid JSON: incomplete JSON near byte 22"},
      {file_bytes(R"({"a": nul})"), StatusCode::kCorrupt, "header is not valid JSON: syntax error near byte 6"},
      {file_bytes(std::string(40, '[') + std::string(40, ']')), StatusCode::kCorrupt,
       "header is not valid JSON: too deep near byte 32"},
      {file_bytes("[1, 2]"), StatusCode::kCorrupt, "header is not a JSON object"},
      {file_bytes(R"({"__metadata__": [1]})"), StatusCode::kCorrupt, "__metadata__ is not an object of strings"},
      {file_bytes(R"({"__metadata__": {"format": 1}})"), StatusCode::kCorrupt,
       "__metadata__ value 'format' is not a string"},
      {file_bytes(R"({"w": 7})"), StatusCode::kCorrupt,
       "tensor 'w' needs a string \"dtype\", an array \"shape\" and an array \"data_offsets\""},
      {file_bytes(R"({"w": {"dtype": "F32", "shape": [2]}})"), StatusCode::kCorrupt,
       "tensor 'w' needs a string \"dtype\", an array \"shape\" and an array \"data_offsets\""},
      {file_bytes(R"({"ids": {"dtype": "I64", "shape": [2], "data_offsets": [0, 16]}})", zeros),
       StatusCode::kUnsupported, "tensor 'ids' has dtype 'I64', which Koi does not read; it reads F32, F16 and BF16"},
      {file_bytes(R"({"w": {"dtype": "F32", "shape": [1, 1, 1, 1, 1], "data_offsets": [0, 4]}})", zeros),
       StatusCode::kUnsupported, "tensor 'w' has 5 dimensions; Koi handles at most 4"},
      {file_bytes(R"({"w": {"dtype": "F32", "shape": [2, -1], "data_offsets": [0, 4]}})", zeros),
       StatusCode::kCorrupt, "tensor 'w' has a shape entry that is not a non-negative integer"},
      {file_bytes(R"({"w": {"dtype": "F32", "shape": [4294967296, 4294967296], "data_offsets": [0, 4]}})", zeros),
       StatusCode::kCorrupt, "tensor 'w' has a shape that is too large"},
      {file_bytes(R"({"w": {"dtype": "F32", "shape": [0, 4611686018427387904], "data_offsets": [0, 0]}})", zeros),
       StatusCode::kCorrupt, "tensor 'w' has a shape that is too large"},
      {file_bytes(R"({"w": {"dtype": "F32", "shape": [2], "data_offsets": [0]}})", zeros), StatusCode::kCorrupt,
       "tensor 'w' needs data_offsets [begin, end] with 0 <= begin <= end"},
      {file_bytes(R"({"w": {"dtype": "F32", "shape": [2], "data_offsets": [8, 0]}})", zeros), StatusCode::kCorrupt,
       "tensor 'w' needs data_offsets [begin, end] with 0 <= begin <= end"},
      {file_bytes(R"({"w": {"dtype": "F32", "shape": [2], "data_offsets": [60, 68]}})", zeros), StatusCode::kCorrupt,
       "tensor 'w' data_offsets [60, 68] run past the end of the 64 data bytes; the file is truncated"},
      {file_bytes(R"({"w": {"dtype": "BF16", "shape": [2, 3], "data_offsets": [0, 8]}})", zeros),
       StatusCode::kCorrupt, "tensor 'w' data_offsets [0, 8] hold 8 bytes; its dtype and shape need 12"},
      {file_bytes(R"({"a": {"dtype": "F32", "shape": [4], "data_offsets": [0, 16]},)"
                  R"( "b": {"dtype": "F32", "shape": [2], "data_offsets": [8, 16]}})",
                  zeros),
       StatusCode::kCorrupt, "tensors 'a' and 'b' overlap in the data buffer"},
      {file_bytes(R"({"w": {"dtype": "F32", "shape": [2], "data_offsets": [1, 9]}})", zeros),
       StatusCode::kUnsupported,
       "tensor 'w' data is not aligned to its 4-byte elements; re-save the file with a current safetensors library"},
  };
  for (const Case& c : cases) {
    std::vector<uint8_t> bytes(c.bytes.begin(), c.bytes.end());  // exact size, for AddressSanitizer
    auto f = SafetensorsFile::parse(bytes.data(), bytes.size(), "bad.safetensors");
    ASSERT_FALSE(f.ok()) << c.message;
    EXPECT_EQ(f.status().code(), c.code) << c.message;
    EXPECT_EQ(f.status().message(), "bad.safetensors: " + c.message);
  }
}

std::string sample_file(const std::string& dir) {
  Sample s;
  std::string p = path_join(dir, "sample.safetensors");
  KOI_CHECK(write_safetensors(p, s.tensors(), {{"format", "pt"}}).ok());
  return *read_file(p);
}

TEST_F(SafetensorsTest, EveryTruncationIsAnError) {
  std::string file = sample_file(dir_);
  for (size_t len = 0; len < file.size(); ++len) {
    std::vector<uint8_t> prefix(file.begin(), file.begin() + len);
    auto f = SafetensorsFile::parse(prefix.data(), prefix.size(), "s.safetensors");
    ASSERT_FALSE(f.ok()) << "a file cut at " << len << " of " << file.size() << " bytes parsed";
    ASSERT_EQ(f.status().message().rfind("s.safetensors: ", 0), 0u) << f.status().message();
  }
}

TEST_F(SafetensorsTest, RandomMutationsNeverReadOutOfBounds) {
  std::string file = sample_file(dir_);
  Rng rng(42);
  int parsed = 0;
  for (int trial = 0; trial < 3000; ++trial) {
    std::vector<uint8_t> bytes(file.begin(), file.end());
    int flips = 1 + static_cast<int>(rng.below(3));
    for (int flip = 0; flip < flips; ++flip) bytes[rng.below(bytes.size())] = static_cast<uint8_t>(rng.next_u64());
    auto f = SafetensorsFile::parse(bytes.data(), bytes.size(), "m.safetensors");
    if (!f.ok()) {
      ASSERT_EQ(f.status().message().rfind("m.safetensors: ", 0), 0u);
      continue;
    }
    ++parsed;
    for (const SafetensorsTensor& t : f->tensors()) {
      const uint8_t* begin = static_cast<const uint8_t*>(t.view.data);
      ASSERT_GE(begin, bytes.data());
      ASSERT_LE(begin + t.view.num_bytes(), bytes.data() + bytes.size());
    }
  }
  EXPECT_GT(parsed, 0);
}

// ---- Model directories -------------------------------------------------------------------

// Writes two shards and their index into dir_; returns the index path.
std::string write_sharded(const std::string& dir, const std::string& weight_map) {
  Sample s;
  std::vector<SafetensorsWriteTensor> all = s.tensors();
  KOI_CHECK(write_safetensors(path_join(dir, "model-00001-of-00002.safetensors"), {all[0], all[1]}).ok());
  KOI_CHECK(write_safetensors(path_join(dir, "model-00002-of-00002.safetensors"), {all[2], all[3]}).ok());
  std::string index = path_join(dir, "model.safetensors.index.json");
  KOI_CHECK(write_file_atomic(index, R"({"metadata": {"total_size": 74}, "weight_map": )" + weight_map + "}").ok());
  return index;
}

const char* const kWeightMap = R"({
  "model.embed_tokens.weight": "model-00001-of-00002.safetensors",
  "model.norm.weight": "model-00001-of-00002.safetensors",
  "lm_head.weight": "model-00002-of-00002.safetensors",
  "scale": "model-00002-of-00002.safetensors"})";

TEST_F(SafetensorsTest, ShardedModelFindsTensorsAcrossShards) {
  write_sharded(dir_, kWeightMap);
  auto m = SafetensorsModel::open_dir(dir_);
  ASSERT_TRUE(m.ok()) << m.status().to_string();
  EXPECT_EQ(m->tensor_names(),
            (std::vector<std::string>{"lm_head.weight", "model.embed_tokens.weight", "model.norm.weight", "scale"}));
  Sample s;
  const SafetensorsTensor* head = m->find("lm_head.weight");
  ASSERT_NE(head, nullptr);
  EXPECT_EQ(std::memcmp(head->view.data, s.head.data(), 12), 0);
  const SafetensorsTensor* embed = m->find("model.embed_tokens.weight");
  ASSERT_NE(embed, nullptr);
  EXPECT_EQ(std::memcmp(embed->view.data, s.embed.data(), 48), 0);
  EXPECT_EQ(m->find("model.layers.0.mlp.up_proj.weight"), nullptr);
}

TEST_F(SafetensorsTest, SingleFileModel) {
  Sample s;
  ASSERT_TRUE(write_safetensors(path("model.safetensors"), s.tensors()).ok());
  auto m = SafetensorsModel::open_dir(dir_);
  ASSERT_TRUE(m.ok()) << m.status().to_string();
  EXPECT_EQ(m->tensor_names().size(), 4u);
  EXPECT_EQ(m->find("scale")->view.f32()[0], 2.5f);
}

TEST_F(SafetensorsTest, BrokenModelDirectoriesNameTheFile) {
  std::string index = path("model.safetensors.index.json");
  std::string shard1 = path("model-00001-of-00002.safetensors");
  struct Case {
    std::string weight_map;  // empty: no index at all
    StatusCode code;
    std::string message;
  };
  const Case cases[] = {
      {"", StatusCode::kNotFound,
       dir_ + ": has neither model.safetensors nor model.safetensors.index.json; point Koi at a Hugging Face model "
              "directory"},
      {R"({"extra.weight": "model-00003-of-00003.safetensors"})", StatusCode::kNotFound,
       path("model-00003-of-00003.safetensors") + ": cannot open: No such file or directory"},
      {R"({"model.embed_tokens.weight": "model-00001-of-00002.safetensors",
           "lm_head.weight": "model-00001-of-00002.safetensors"})",
       StatusCode::kNotFound,
       shard1 + ": has no tensor 'lm_head.weight', which model.safetensors.index.json places there; the download is "
                "incomplete or mixed"},
      {R"({"w": "../elsewhere.safetensors"})", StatusCode::kCorrupt,
       index + ": weight_map entry 'w' does not name a shard file in the model directory"},
      {R"([])", StatusCode::kCorrupt, index + ": has no \"weight_map\" object"},
      {R"({"w": )", StatusCode::kCorrupt, index + ": the index is not valid JSON: syntax error near byte 53"},
  };
  for (const Case& c : cases) {
    remove_all(dir_);
    ASSERT_EQ(::mkdir(dir_.c_str(), 0755), 0);
    if (!c.weight_map.empty()) write_sharded(dir_, c.weight_map);
    auto m = SafetensorsModel::open_dir(dir_);
    ASSERT_FALSE(m.ok()) << c.message;
    EXPECT_EQ(m.status().code(), c.code) << c.message;
    EXPECT_EQ(m.status().message(), c.message);
  }
}

// ---- Cross-check with PyTorch ------------------------------------------------------------
// Reads the file Koi wrote with plain json + torch.frombuffer and compares every tensor with
// torch's own f16/bf16 rounding of the same values; then writes the same tensors the way the
// safetensors library lays them out, for Koi to read.
constexpr const char* kTorchScript = R"PY(
import json, struct, sys, torch

def values(n, scale):
    return torch.tensor([(i % 17 - 8) * scale for i in range(n)], dtype=torch.float32)

expected = {'model.embed_tokens.weight': values(12, 0.25).reshape(3, 4),
            'model.norm.weight': values(5, 1.0 / 3).to(torch.float16),
            'lm_head.weight': values(6, 0.1).reshape(2, 1, 3).to(torch.bfloat16),
            'scale': torch.tensor(2.5)}
DTYPES = {'F32': torch.float32, 'F16': torch.float16, 'BF16': torch.bfloat16}

def read(path):
    b = open(path, 'rb').read()
    n = struct.unpack_from('<Q', b)[0]
    header = json.loads(b[8:8 + n])
    meta = header.pop('__metadata__', {})
    data = b[8 + n:]
    out = {}
    for name, e in header.items():
        begin, end = e['data_offsets']
        out[name] = torch.frombuffer(bytearray(data[begin:end]), dtype=DTYPES[e['dtype']]).reshape(e['shape'])
    return out, meta

def write(path, tensors, meta):
    header, blobs, offset = {'__metadata__': meta}, [], 0
    for name in sorted(tensors, key=lambda k: (-tensors[k].element_size(), k)):
        t = tensors[name].contiguous()
        raw = t.reshape(-1).view(torch.uint8).numpy().tobytes()
        dtype = [k for k, v in DTYPES.items() if v == t.dtype][0]
        header[name] = {'dtype': dtype, 'shape': list(t.shape), 'data_offsets': [offset, offset + len(raw)]}
        blobs.append(raw)
        offset += len(raw)
    h = json.dumps(header).encode()
    h += b' ' * (-len(h) % 8)
    open(path, 'wb').write(struct.pack('<Q', len(h)) + h + b''.join(blobs))

koi, meta = read(sys.argv[1])
assert meta == {'format': 'pt', 'source': 'koi'}, meta
assert sorted(koi) == sorted(expected), sorted(koi)
for name, want in expected.items():
    got = koi[name]
    assert got.dtype == want.dtype and got.shape == want.shape and torch.equal(got, want), (name, got, want)
write(sys.argv[2], expected, {'format': 'pt', 'source': 'torch'})
)PY";

TEST_F(SafetensorsTest, AgreesWithPyTorchBothWays) {
  Sample s;
  ASSERT_TRUE(write_safetensors(path("koi.safetensors"), s.tensors(), {{"format", "pt"}, {"source", "koi"}}).ok());
  ASSERT_TRUE(write_file_atomic(path("check.py"), kTorchScript).ok());
  std::string cmd = "/usr/bin/python3 " + path("check.py") + " " + path("koi.safetensors") + " " +
                    path("torch.safetensors");
  ASSERT_EQ(std::system(cmd.c_str()), 0) << cmd;

  auto f = SafetensorsFile::open(path("torch.safetensors"));
  ASSERT_TRUE(f.ok()) << f.status().to_string();
  EXPECT_EQ(f->metadata().at("source"), "torch");
  const SafetensorsTensor* embed = f->find("model.embed_tokens.weight");
  ASSERT_NE(embed, nullptr);
  EXPECT_EQ(embed->view.shape_string(), "[4, 3]");
  EXPECT_EQ(std::vector<float>(embed->view.f32(), embed->view.f32() + 12), s.embed);
  const SafetensorsTensor* norm = f->find("model.norm.weight");
  ASSERT_NE(norm, nullptr);
  EXPECT_EQ(norm->view.type, DType::kF16);
  const uint16_t* norm_bits = static_cast<const uint16_t*>(norm->view.data);
  EXPECT_EQ(std::vector<uint16_t>(norm_bits, norm_bits + 5), s.norm);  // torch's f16 rounding == Koi's
  const SafetensorsTensor* head = f->find("lm_head.weight");
  ASSERT_NE(head, nullptr);
  EXPECT_EQ(head->view.type, DType::kBF16);
  EXPECT_EQ(head->view.shape_string(), "[3, 1, 2]");
  const uint16_t* head_bits = static_cast<const uint16_t*>(head->view.data);
  EXPECT_EQ(std::vector<uint16_t>(head_bits, head_bits + 6), s.head);  // and bf16
  EXPECT_EQ(f->find("scale")->view.f32()[0], 2.5f);
}

}  // namespace
}  // namespace koi::model

namespace koi::model {
namespace {

// config.json of a tiny Llama (dim 64, 8 heads, 4 KV heads) with `fields` added or replaced.
std::string hf_config(const std::string& fields) {
  std::string base = R"("architectures": ["LlamaForCausalLM"], "hidden_size": 64, "num_hidden_layers": 2,
    "num_attention_heads": 8, "num_key_value_heads": 4, "intermediate_size": 128, "vocab_size": 32)";
  boost::json::object o = boost::json::parse("{" + base + "}").as_object();
  if (!fields.empty()) {
    const boost::json::value extra = boost::json::parse("{" + fields + "}");
    for (const auto& kv : extra.as_object()) o[kv.key()] = kv.value();
  }
  return boost::json::serialize(o);
}

TEST(HfConfig, EveryModelSettingIsRangeCheckedNamingTheKey) {
  struct Case {
    std::string fields;
    std::string error;  // "" when the config must load
  };
  const Case cases[] = {
      {"", ""},
      {R"("rope_scaling": {"rope_type": "llama3", "factor": 8.0, "low_freq_factor": 1, "high_freq_factor": 4,
          "original_max_position_embeddings": 8192})", ""},
      {R"("hidden_size": 1099511627776)", "config.json: hidden_size must be an integer from 1 to 16777216, got 1099511627776"},
      {R"("hidden_size": 0)", "config.json: hidden_size must be an integer from 1 to 16777216, got 0"},
      {R"("hidden_size": 64.5)", "config.json: hidden_size must be an integer, got 6.45E1"},
      {R"("vocab_size": -1)", "config.json: vocab_size must be an integer from 1 to 16777216, got -1"},
      {R"("num_hidden_layers": 0)", "config.json: num_hidden_layers must be an integer from 1 to 16777216, got 0"},
      {R"("intermediate_size": 99999999999)", "config.json: intermediate_size must be an integer from 1 to 16777216, got 99999999999"},
      {R"("num_key_value_heads": 3)", "config.json: num_key_value_heads (3) must divide num_attention_heads (8)"},
      {R"("num_key_value_heads": 0)", "config.json: num_key_value_heads must be an integer from 1 to 16777216, got 0"},
      {R"("num_attention_heads": 6, "num_key_value_heads": 6)",
       "config.json: hidden_size (64) must be a multiple of num_attention_heads (6), or give head_dim"},
      {R"("head_dim": 7)", "config.json: head_dim (7) must be even: rope rotates pairs"},
      {R"("head_dim": 4194304)", "config.json: head_dim * num_attention_heads = 33554432 is more than 16777216"},
      {R"("max_position_embeddings": 0)", "config.json: max_position_embeddings must be an integer from 1 to 16777216, got 0"},
      {R"("rope_theta": -5)", "config.json: rope_theta must be a positive number, got -5"},
      {R"("rope_theta": "big")", "config.json: rope_theta must be a number, got \"big\""},
      {R"("rms_norm_eps": 0)", "config.json: rms_norm_eps must be a positive number, got 0"},
      {R"("rope_scaling": {"rope_type": "llama3", "factor": -1})", "config.json: rope_scaling.factor must be a positive number, got -1"},
      {R"("rope_scaling": {"rope_type": "llama3", "factor": "8"})", "config.json: rope_scaling.factor must be a number, got \"8\""},
      {R"("rope_scaling": {"rope_type": "llama3", "low_freq_factor": 4, "high_freq_factor": 4})",
       "config.json: rope_scaling.high_freq_factor (4) must be greater than rope_scaling.low_freq_factor (4)"},
      {R"("rope_scaling": {"rope_type": "llama3", "original_max_position_embeddings": 0})",
       "config.json: rope_scaling.original_max_position_embeddings must be a positive number, got 0"},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(c.fields);
    auto config = parse_hf_config(hf_config(c.fields), "config.json");
    if (c.error.empty()) {
      ASSERT_TRUE(config.ok()) << config.status().message();
      EXPECT_EQ(config->head_dim, 8);
    } else {
      EXPECT_EQ(config.status().message(), c.error);
    }
  }
}

// The windows, layer patterns and rope settings of Mistral, Gemma 3 and Phi-3 as config.json
// gives them, down to the frequencies each layer rotates with.
TEST(HfConfig, SlidingWindowsLayerPatternsAndRopeOfNewArchitectures) {
  const std::string shape = R"("hidden_size":64,"num_hidden_layers":12,"num_attention_heads":4,"intermediate_size":128,
      "vocab_size":100,"max_position_embeddings":4096,)";
  auto parse = [&](const std::string& arch, const std::string& fields) {
    return parse_hf_config(R"({"architectures":[")" + arch + R"("],)" + shape + fields + "}", "config.json");
  };
  auto mistral = parse("MistralForCausalLM", R"("sliding_window":1024)");
  ASSERT_TRUE(mistral.ok()) << mistral.status().message();
  for (int layer : {0, 5, 11}) EXPECT_EQ(mistral->window_of(layer), 1024) << layer;
  auto mistral_full = parse("MistralForCausalLM", R"("sliding_window":null)");
  ASSERT_TRUE(mistral_full.ok());
  EXPECT_EQ(mistral_full->window_of(0), 0);
  EXPECT_EQ(parse("MistralForCausalLM", R"("sliding_window":-1)").status().message(),
            "config.json: sliding_window must be a positive number, got -1");
  EXPECT_EQ(parse("MistralForCausalLM", R"("sliding_window":4.5)").status().message(),
            "config.json: sliding_window must be an integer from 1 to 16777216");

  // Gemma 3: five local layers to one global; the local ones rotate with base 10000 unscaled,
  // the global ones with rope_theta divided by the linear factor.
  auto gemma3 = parse("Gemma3ForCausalLM", R"("head_dim":16,"sliding_window":512,"rope_theta":1000000,
      "rope_scaling":{"rope_type":"linear","factor":8.0})");
  ASSERT_TRUE(gemma3.ok()) << gemma3.status().message();
  for (int layer = 0; layer < 12; ++layer) EXPECT_EQ(gemma3->window_of(layer), layer % 6 == 5 ? 0 : 512) << layer;
  const std::vector<float> local = gemma3->rope_inv_freq_of(0), global = gemma3->rope_inv_freq_of(5);
  ASSERT_EQ(local.size(), 8u);
  EXPECT_FLOAT_EQ(local[1], static_cast<float>(std::pow(10000.0, -2.0 / 16)));
  EXPECT_FLOAT_EQ(global[1], static_cast<float>(std::pow(1e6, -2.0 / 16) / 8));

  // Phi-3 LongRoPE: the long factors for a context past the original one, the attention
  // factor sqrt(1 + ln(4096 / 1024) / ln 1024); the short ones within it.
  auto phi3 = parse("Phi3ForCausalLM", R"("original_max_position_embeddings":1024,"rope_scaling":{"type":"longrope",
      "short_factor":[1,1,1,1,1,1,1,1],"long_factor":[1,2,3,4,5,6,7,8]})");
  ASSERT_TRUE(phi3.ok()) << phi3.status().message();
  EXPECT_EQ(phi3->window_of(0), 0);
  EXPECT_EQ(phi3->rope_freq_factors()[7], 8.0f);
  EXPECT_FLOAT_EQ(phi3->rope_attn_factor, static_cast<float>(std::sqrt(1 + std::log(4.0) / std::log(1024.0))));
  phi3->max_seq_len = 1024;
  EXPECT_EQ(phi3->rope_freq_factors()[7], 1.0f);
}

}  // namespace
}  // namespace koi::model
