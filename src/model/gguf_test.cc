#include "model/gguf.h"

#include <gtest/gtest.h>
#include <sys/resource.h>

#include <boost/json.hpp>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <limits>

#include "base/check.h"
#include "base/file.h"
#include "base/random.h"
#include "model/loader.h"

namespace koi::model {
namespace {

namespace json = boost::json;

class GgufTest : public ::testing::Test {
 protected:
  void SetUp() override {
    auto d = make_temp_dir("koi-gguf-test");
    ASSERT_TRUE(d.ok()) << d.status().to_string();
    dir_ = *d;
  }
  void TearDown() override { remove_all(dir_); }
  std::string path(std::string_view name) const { return path_join(dir_, name); }

  std::string dir_;
};

GgufValue ints(GgufType t, std::initializer_list<int64_t> vs) {
  std::vector<GgufValue> out;
  for (int64_t v : vs) out.push_back(GgufValue::integer(t, v));
  return GgufValue::array(t, std::move(out));
}

// One value of every type, at the edges of its range, and arrays of every element type.
std::vector<std::pair<std::string, GgufValue>> every_type() {
  using T = GgufType;
  return {
      {"s.u8", GgufValue::integer(T::kUint8, 255)},
      {"s.i8", GgufValue::integer(T::kInt8, -128)},
      {"s.u16", GgufValue::integer(T::kUint16, 65535)},
      {"s.i16", GgufValue::integer(T::kInt16, -32768)},
      {"s.u32", GgufValue::integer(T::kUint32, 4294967295)},
      {"s.i32", GgufValue::integer(T::kInt32, std::numeric_limits<int32_t>::min())},
      {"s.f32", GgufValue::f32(-0x1.fffffep127f)},
      {"s.bool", GgufValue::boolean(true)},
      {"s.string", GgufValue::string("h\xC3\xA9llo \xE2\x96\x81world")},
      {"s.u64", GgufValue::u64(std::numeric_limits<uint64_t>::max())},
      {"s.i64", GgufValue::integer(T::kInt64, std::numeric_limits<int64_t>::min())},
      {"s.f64", GgufValue::f64(0.1)},
      {"s.empty_string", GgufValue::string("")},
      {"a.u8", ints(T::kUint8, {0, 1, 255})},
      {"a.i8", ints(T::kInt8, {-128, 0, 127})},
      {"a.u16", ints(T::kUint16, {7, 65535})},
      {"a.i16", ints(T::kInt16, {-32768, 32767})},
      {"a.u32", ints(T::kUint32, {4294967295, 3})},
      {"a.i32", ints(T::kInt32, {-5, 5})},
      {"a.f32", GgufValue::array(T::kFloat32, {GgufValue::f32(1.5f), GgufValue::f32(-0x1.0p-149f),
                                               GgufValue::f32(std::numeric_limits<float>::infinity())})},
      {"a.bool", GgufValue::array(T::kBool, {GgufValue::boolean(false), GgufValue::boolean(true)})},
      {"a.string", GgufValue::array(T::kString, {GgufValue::string("<s>"), GgufValue::string(""),
                                                 GgufValue::string("\xE2\x96\x81the")})},
      {"a.u64", GgufValue::array(T::kUint64, {GgufValue::u64(0), GgufValue::u64(1ull << 63)})},
      {"a.i64", ints(T::kInt64, {std::numeric_limits<int64_t>::max(), -1})},
      {"a.f64", GgufValue::array(T::kFloat64, {GgufValue::f64(-2.25), GgufValue::f64(1e300)})},
      {"a.empty", GgufValue::array(T::kUint32, {})},
      {"a.nested", GgufValue::array(T::kArray, {ints(T::kUint8, {1, 2}), GgufValue::array(T::kString, {})})},
  };
}

TEST_F(GgufTest, MetadataOfEveryTypeRoundTripsInOrder) {
  GgufWriter w;
  std::vector<std::string> keys;
  for (auto& [key, value] : every_type()) {
    w.set_value(key, value);
    keys.push_back(key);
  }
  w.set_u32("s.u32", 4294967295);  // setting a key again keeps its position
  ASSERT_TRUE(w.write(path("m.gguf")).ok());

  auto f = GgufFile::open(path("m.gguf"));
  ASSERT_TRUE(f.ok()) << f.status().to_string();
  EXPECT_EQ(f->version(), 3u);
  EXPECT_EQ(f->alignment(), 32u);
  EXPECT_EQ(f->keys(), keys);
  for (auto& [key, value] : every_type()) {
    const GgufValue* got = f->find(key);
    ASSERT_NE(got, nullptr) << key;
    EXPECT_EQ(*got, value) << key << " is " << got->type_name();
  }
  EXPECT_TRUE(f->tensors().empty());
  EXPECT_FALSE(f->has("missing"));
}

TEST_F(GgufTest, GettersConvertAndNameTheKeyOnError) {
  GgufWriter w;
  for (auto& [key, value] : every_type()) w.set_value(key, value);
  ASSERT_TRUE(w.write(path("m.gguf")).ok());
  auto f = GgufFile::open(path("m.gguf"));
  ASSERT_TRUE(f.ok());
  std::string p = path("m.gguf");

  EXPECT_EQ(*f->get_int("s.u8"), 255);
  EXPECT_EQ(*f->get_int("s.i64"), std::numeric_limits<int64_t>::min());
  EXPECT_EQ(*f->get_float("s.f64"), 0.1);
  EXPECT_EQ(*f->get_float("s.i16"), -32768.0);
  EXPECT_EQ(*f->get_bool("s.bool"), true);
  EXPECT_EQ(*f->get_string("s.string"), "h\xC3\xA9llo \xE2\x96\x81world");
  EXPECT_EQ(*f->get_string_array("a.string"), (std::vector<std::string>{"<s>", "", "\xE2\x96\x81the"}));
  EXPECT_EQ(*f->get_float_array("a.f32"),
            (std::vector<float>{1.5f, -0x1.0p-149f, std::numeric_limits<float>::infinity()}));
  EXPECT_EQ(*f->get_float_array("a.i8"), (std::vector<float>{-128, 0, 127}));
  EXPECT_EQ(*f->get_int_array("a.u32"), (std::vector<int64_t>{4294967295, 3}));

  struct Case {
    Status status;
    StatusCode code;
    std::string message;
  };
  const Case cases[] = {
      {f->get_string("nope").status(), StatusCode::kNotFound, "metadata key 'nope' is missing"},
      {f->get_string("s.u32").status(), StatusCode::kInvalidArgument, "metadata key 's.u32' is uint32, expected string"},
      {f->get_int("s.bool").status(), StatusCode::kInvalidArgument, "metadata key 's.bool' is bool, expected an integer"},
      {f->get_int("s.u64").status(), StatusCode::kInvalidArgument,
       "metadata key 's.u64' holds 18446744073709551615, which does not fit in int64"},
      {f->get_float("s.string").status(), StatusCode::kInvalidArgument,
       "metadata key 's.string' is string, expected a number"},
      {f->get_bool("s.u8").status(), StatusCode::kInvalidArgument, "metadata key 's.u8' is uint8, expected bool"},
      {f->get_string_array("a.u8").status(), StatusCode::kInvalidArgument,
       "metadata key 'a.u8' is array of uint8, expected array of string"},
      {f->get_float_array("a.string").status(), StatusCode::kInvalidArgument,
       "metadata key 'a.string' is array of string, expected array of numbers"},
      {f->get_int_array("a.f64").status(), StatusCode::kInvalidArgument,
       "metadata key 'a.f64' is array of float64, expected array of integers"},
      {f->get_int_array("a.u64").status(), StatusCode::kInvalidArgument,
       "metadata key 'a.u64' holds 9223372036854775808, which does not fit in int64"},
  };
  for (const Case& c : cases) {
    EXPECT_EQ(c.status.code(), c.code) << c.message;
    EXPECT_EQ(c.status.message(), p + ": " + c.message);
  }
}

struct SampleTensor {
  std::string name;
  DType type;
  std::vector<int64_t> ne;
  std::vector<uint8_t> bytes;
};

// One tensor of every type, with deterministic contents.
std::vector<SampleTensor> sample_tensors() {
  std::vector<SampleTensor> out = {
      {"token_embd.weight", DType::kF32, {8, 3}, {}},
      {"blk.0.attn_norm.weight", DType::kF16, {5}, {}},
      {"blk.0.ffn_up.weight", DType::kBF16, {3, 2, 2}, {}},
      {"blk.0.attn_q.weight", DType::kQ8_0, {64, 2}, {}},
      {"blk.0.attn_k.weight", DType::kQ4_0, {32, 1, 1, 2}, {}},
  };
  Rng rng(7);
  for (SampleTensor& t : out) {
    int64_t rows = 1;
    for (size_t d = 1; d < t.ne.size(); ++d) rows *= t.ne[d];
    t.bytes.resize(dtype_row_bytes(t.type, t.ne[0]) * rows);
    std::vector<float> row(t.ne[0]);
    for (int64_t r = 0; r < rows; ++r) {
      for (float& x : row) x = static_cast<float>(rng.normal());
      quantize_row(t.type, row.data(), t.bytes.data() + r * dtype_row_bytes(t.type, t.ne[0]), t.ne[0]);
    }
  }
  return out;
}

class GgufAlignmentTest : public GgufTest, public ::testing::WithParamInterface<uint64_t> {};

TEST_P(GgufAlignmentTest, TensorsOfEveryTypeRoundTripAligned) {
  const uint64_t alignment = GetParam();
  std::vector<SampleTensor> tensors = sample_tensors();
  GgufWriter w;
  w.set_string("general.architecture", "llama");
  if (alignment != 32) w.set_alignment(alignment);
  for (size_t idx = 0; idx < tensors.size(); ++idx) {
    const SampleTensor& t = tensors[idx];
    if (idx % 2 == 0) {
      w.add_tensor(t.name, t.type, t.ne, t.bytes.data());
    } else {
      w.add_tensor(t.name, t.type, t.ne, t.bytes);  // the owning variant
    }
  }
  ASSERT_TRUE(w.write(path("t.gguf")).ok());

  auto file = read_file(path("t.gguf"));
  ASSERT_TRUE(file.ok());
  std::vector<uint8_t> bytes(file->begin(), file->end());
  auto f = GgufFile::parse(bytes.data(), bytes.size(), "t.gguf");
  ASSERT_TRUE(f.ok()) << f.status().to_string();
  EXPECT_EQ(f->alignment(), alignment);
  ASSERT_EQ(f->tensors().size(), tensors.size());
  for (size_t idx = 0; idx < tensors.size(); ++idx) {
    const SampleTensor& want = tensors[idx];
    const GgufTensorInfo& got = f->tensors()[idx];
    EXPECT_EQ(got.name, want.name);
    EXPECT_EQ(f->find_tensor(want.name), &got);
    EXPECT_EQ(got.view.type, want.type);
    ASSERT_EQ(got.view.n_dims, static_cast<int>(want.ne.size()));
    for (size_t d = 0; d < want.ne.size(); ++d) EXPECT_EQ(got.view.ne[d], want.ne[d]);
    EXPECT_EQ(got.offset % alignment, 0u) << want.name;
    uint64_t file_offset = static_cast<const uint8_t*>(got.view.data) - bytes.data();
    EXPECT_EQ(file_offset % alignment, 0u) << want.name;
    ASSERT_EQ(got.view.num_bytes(), static_cast<int64_t>(want.bytes.size()));
    EXPECT_EQ(std::memcmp(got.view.data, want.bytes.data(), want.bytes.size()), 0) << want.name;
  }
  EXPECT_EQ(f->find_tensor("output.weight"), nullptr);
  EXPECT_EQ(bytes.size() % alignment, 0u);  // the last tensor is padded too
}

INSTANTIATE_TEST_SUITE_P(Alignments, GgufAlignmentTest, ::testing::Values(32, 64));

TEST_F(GgufTest, OpenedFileOutlivesMoves) {
  std::vector<SampleTensor> tensors = sample_tensors();
  GgufWriter w;
  w.add_tensor(tensors[0].name, tensors[0].type, tensors[0].ne, tensors[0].bytes.data());
  ASSERT_TRUE(w.write(path("t.gguf")).ok());
  std::vector<GgufFile> files;
  {
    auto f = GgufFile::open(path("t.gguf"));
    ASSERT_TRUE(f.ok());
    files.push_back(std::move(*f));
  }
  files.reserve(8);  // moves the GgufFile again
  const TensorView& v = files[0].tensors()[0].view;
  EXPECT_EQ(std::memcmp(v.data, tensors[0].bytes.data(), tensors[0].bytes.size()), 0);
  EXPECT_EQ(files[0].path(), path("t.gguf"));
}

TEST_F(GgufTest, WriterRejectsInvalidTensorsAndMetadata) {
  std::vector<float> data(64);
  struct Case {
    std::function<void(GgufWriter&)> add;
    std::string message;
  };
  const Case cases[] = {
      {[&](GgufWriter& w) {
         w.add_tensor("a", DType::kF32, {4}, data.data());
         w.add_tensor("a", DType::kF32, {4}, data.data());
       },
       "tensor 'a' is added twice"},
      {[&](GgufWriter& w) { w.add_tensor("q", DType::kQ8_0, {33}, data.data()); },
       "tensor 'q' has rows of 33 values, not a multiple of the q8_0 block size 32"},
      {[&](GgufWriter& w) { w.add_tensor("o", DType::kF16, {4, 2}, std::vector<uint8_t>(15)); },
       "tensor 'o' has 15 bytes of data; its shape and type need 16"},
      {[&](GgufWriter& w) { w.add_tensor("d", DType::kF32, {1, 1, 1, 1, 1}, data.data()); },
       "tensor 'd' has 5 dimensions; GGUF allows 1 to 4"},
      {[&](GgufWriter& w) {
         w.set_value("mixed", GgufValue::array(GgufType::kUint32, {GgufValue::integer(GgufType::kUint32, 1),
                                                                   GgufValue::string("x")}));
       },
       "metadata key 'mixed': element 1 is string in an array of uint32"},
      {[&](GgufWriter& w) { w.set_string("general.alignment", "32"); },
       "general.alignment must be a uint32 power of two; use set_alignment()"},
  };
  for (const Case& c : cases) {
    GgufWriter w;
    c.add(w);
    Status s = w.write(path("bad.gguf"));
    EXPECT_EQ(s.code(), StatusCode::kInvalidArgument) << c.message;
    EXPECT_EQ(s.message(), path("bad.gguf") + ": " + c.message);
    EXPECT_FALSE(file_exists(path("bad.gguf")));
  }
}

// Peak resident memory in bytes.
int64_t max_rss() {
  rusage u{};
  getrusage(RUSAGE_SELF, &u);
  return static_cast<int64_t>(u.ru_maxrss) * 1024;
}

TEST_F(GgufTest, BigTensorIsStreamedNotBuffered) {
  const int64_t n = 8 << 20;  // 32 MiB of f32
  std::vector<float> data(n);
  for (int64_t idx = 0; idx < n; ++idx) data[idx] = static_cast<float>(idx % 1000) * 0.25f;
  int64_t rss_before = max_rss();
  GgufWriter w;
  w.add_tensor("big", DType::kF32, {4096, n / 4096}, data.data());
  ASSERT_TRUE(w.write(path("big.gguf")).ok());
  EXPECT_LT(max_rss() - rss_before, 16 << 20) << "write() copied the tensor instead of streaming it";

  auto f = GgufFile::open(path("big.gguf"));
  ASSERT_TRUE(f.ok()) << f.status().to_string();
  const TensorView& v = f->find_tensor("big")->view;
  EXPECT_EQ(v.num_elements(), n);
  EXPECT_EQ(std::memcmp(v.data, data.data(), n * sizeof(float)), 0);
}

// Little-endian byte builder for hand-made files.
struct Bytes {
  std::string s;
  template <typename T>
  Bytes& put(T x) {
    s.append(reinterpret_cast<const char*>(&x), sizeof x);
    return *this;
  }
  Bytes& u32(uint32_t x) { return put(x); }
  Bytes& u64(uint64_t x) { return put(x); }
  Bytes& str(std::string_view x) {
    u64(x.size());
    s.append(x);
    return *this;
  }
  Bytes& key(std::string_view k, GgufType t) { return str(k).u32(static_cast<uint32_t>(t)); }
  Bytes& tensor(std::string_view name, std::vector<uint64_t> ne, uint32_t type, uint64_t offset) {
    str(name).u32(ne.size());
    for (uint64_t d : ne) u64(d);
    return u32(type).u64(offset);
  }
  Bytes& pad(size_t alignment) {
    s.append((alignment - s.size() % alignment) % alignment, '\0');
    return *this;
  }
  Bytes& zeros(size_t n) {
    s.append(n, '\0');
    return *this;
  }
};

Bytes header(uint64_t n_tensors, uint64_t n_kv, uint32_t version = 3) {
  Bytes b;
  b.s = "GGUF";
  return b.u32(version).u64(n_tensors).u64(n_kv);
}

TEST(GgufCorruptTest, EveryCorruptionIsAnErrorWithAPinnedMessage) {
  using T = GgufType;
  struct Case {
    std::string bytes;
    StatusCode code;
    std::string message;
  };
  const Case cases[] = {
      {"", StatusCode::kInvalidArgument, "not a GGUF file: it does not start with the bytes 'GGUF'"},
      {"PK\x03\x04 a zip file", StatusCode::kInvalidArgument,
       "not a GGUF file: it does not start with the bytes 'GGUF'"},
      {"GGUF\x03", StatusCode::kCorrupt, "file ends at byte 5 inside the header at byte 4; the file is truncated"},
      {header(0, 0, 1).s, StatusCode::kUnsupported, "GGUF v1 is not supported; re-export with a current converter"},
      {header(0, 0, 4).s, StatusCode::kUnsupported, "GGUF version 4 is not supported (Koi reads 2 and 3)"},
      {header(0, 0, 0x03000000).s, StatusCode::kUnsupported,
       "big-endian GGUF is not supported; convert the file to little-endian"},
      {header(0, 1ull << 60).s, StatusCode::kCorrupt,
       "header claims 1152921504606846976 metadata entries and 0 tensors, more than the file's 24 bytes can hold; "
       "the file is truncated or corrupt"},
      {header(0, 1).u64(1000).s + "abc" + std::string(10, '\0'), StatusCode::kCorrupt,
       "metadata key #0 at byte 24 claims 1000 bytes but only 13 remain; the file is truncated or corrupt"},
      {header(0, 1).str("a").u32(13).zeros(8).s, StatusCode::kCorrupt, "metadata key 'a' has unknown value type 13"},
      {header(0, 1).str("two\nlines").u32(13).zeros(8).s, StatusCode::kCorrupt,
       "metadata key 'two\\x0alines' has unknown value type 13"},
      {header(0, 1).key("a", T::kArray).u32(42).u64(0).s, StatusCode::kCorrupt,
       "metadata key 'a' is an array of unknown value type 42"},
      {header(0, 1).key("a", T::kArray).u32(static_cast<uint32_t>(T::kUint32)).u64(1000).zeros(8).s,
       StatusCode::kCorrupt,
       "metadata key 'a' claims 1000 array elements but only 8 bytes remain; the file is truncated or corrupt"},
      {header(0, 1).key("a", T::kBool).put<uint8_t>(2).zeros(12).s, StatusCode::kCorrupt,
       "metadata key 'a' is a bool stored as 2; a GGUF bool must be 0 or 1"},
      {header(0, 2).key("a", T::kUint8).put<uint8_t>(1).key("a", T::kUint8).put<uint8_t>(1).s, StatusCode::kCorrupt,
       "metadata key 'a' appears twice"},
      {[] {
         Bytes b = header(0, 1).key("a", T::kArray);
         for (int depth = 0; depth < 9; ++depth) b.u32(static_cast<uint32_t>(T::kArray)).u64(1);
         return b.zeros(100).s;
       }(),
       StatusCode::kCorrupt, "metadata key 'a' nests arrays deeper than 8"},
      {header(0, 1).key("general.alignment", T::kUint32).u32(48).s, StatusCode::kCorrupt,
       "general.alignment must be a uint32 power of two, got uint32 48"},
      {header(0, 1).key("general.alignment", T::kUint64).u64(32).s, StatusCode::kCorrupt,
       "general.alignment must be a uint32 power of two, got uint64 32"},
      {header(1, 0).tensor("t", {1, 1, 1, 1, 1}, 0, 0).s, StatusCode::kCorrupt,
       "tensor 't' has 5 dimensions; GGUF allows 1 to 4"},
      {header(1, 0).tensor("t", {}, 0, 0).zeros(8).s, StatusCode::kCorrupt,
       "tensor 't' has 0 dimensions; GGUF allows 1 to 4"},
      {header(1, 0).tensor("blk.0.ffn_down.weight", {256, 4}, 23, 0).s, StatusCode::kUnsupported,
       "tensor 'blk.0.ffn_down.weight' has ggml type 23 (IQ4_XS), which Koi does not read; convert the model to F32, "
       "F16, BF16, Q8_0, Q4_0, Q4_K, Q5_K or Q6_K"},
      {header(1, 0).tensor("t", {4}, 99, 0).s, StatusCode::kUnsupported,
       "tensor 't' has ggml type 99 (unknown), which Koi does not read; convert the model to F32, F16, BF16, Q8_0, "
       "Q4_0, Q4_K, Q5_K or Q6_K"},
      {header(1, 0).tensor("t", {128, 2}, 12, 0).s, StatusCode::kCorrupt,
       "tensor 't' has rows of 128 values, not a multiple of the q4_K block size 256"},
      {header(1, 0).tensor("t", {33, 2}, 8, 0).s, StatusCode::kCorrupt,
       "tensor 't' has rows of 33 values, not a multiple of the q8_0 block size 32"},
      {header(1, 0).tensor("t", {1ull << 32, 1ull << 32}, 0, 0).s, StatusCode::kCorrupt,
       "tensor 't' has shape [4294967296, 4294967296], which is too large"},
      {header(1, 0).tensor("t", {1ull << 40, 1ull << 22}, 0, 0).s, StatusCode::kCorrupt,
       "tensor 't' has shape [1099511627776, 4194304], which is too large"},
      // Found by gguf_fuzz: a zero dimension made the element count 0 while a row of 2^62
      // values overflowed the row's byte count.
      {header(1, 0).tensor("t", {1ull << 62, 0}, 0, 0).s, StatusCode::kCorrupt,
       "tensor 't' has shape [4611686018427387904, 0], which is too large"},
      {header(1, 0).tensor("t", {4}, 0, 8).pad(32).zeros(64).s, StatusCode::kCorrupt,
       "tensor 't' has data offset 8, not a multiple of the alignment 32"},
      {header(1, 0).tensor("t", {4}, 0, 32).pad(32).zeros(40).s, StatusCode::kCorrupt,
       "tensor 't' (16 bytes at data offset 32) extends past the end of the file (40 bytes of tensor data); the "
       "file is truncated"},
      {header(1, 0).tensor("t", {4}, 0, 0).s, StatusCode::kCorrupt,
       "file ends at byte 57, before its tensor data at byte 64; the file is truncated"},
      {header(2, 0).tensor("t", {4}, 0, 0).tensor("t", {4}, 0, 32).pad(32).zeros(64).s, StatusCode::kCorrupt,
       "tensor 't' appears twice"},
      {header(1, 1).key("general.alignment", T::kUint32).u32(1).tensor("t", {4}, 0, 1).zeros(17).s,
       StatusCode::kUnsupported,
       "tensor 't' data is not aligned to 4 bytes; re-export the file with general.alignment 32"},
      {header(1, 0).tensor("t", {4, 4}, 0, 0).s.substr(0, 60), StatusCode::kCorrupt,
       "file ends at byte 60 inside tensor info #0 at byte 57; the file is truncated"},
  };
  for (const Case& c : cases) {
    // An exact-size heap copy, so that AddressSanitizer sees any read past the end.
    std::vector<uint8_t> bytes(c.bytes.begin(), c.bytes.end());
    auto f = GgufFile::parse(bytes.data(), bytes.size(), "bad.gguf");
    ASSERT_FALSE(f.ok()) << c.message;
    EXPECT_EQ(f.status().code(), c.code) << c.message;
    EXPECT_EQ(f.status().message(), "bad.gguf: " + c.message);
  }
}

// A small valid file with metadata of every type and tensors of every type.
std::string sample_file(const std::string& dir) {
  GgufWriter w;
  for (auto& [key, value] : every_type()) w.set_value(key, value);
  std::vector<SampleTensor> tensors = sample_tensors();
  for (SampleTensor& t : tensors) w.add_tensor(t.name, t.type, t.ne, std::move(t.bytes));
  std::string p = path_join(dir, "sample.gguf");
  KOI_CHECK(w.write(p).ok());
  return *read_file(p);
}

TEST_F(GgufTest, EveryTruncationIsAnError) {
  std::string file = sample_file(dir_);
  auto full = GgufFile::parse(reinterpret_cast<const uint8_t*>(file.data()), file.size(), "s.gguf");
  ASSERT_TRUE(full.ok()) << full.status().to_string();
  const GgufTensorInfo& last = full->tensors().back();
  size_t data_end = static_cast<const char*>(last.view.data) - file.data() + last.view.num_bytes();
  for (size_t len = 0; len < data_end; ++len) {
    std::vector<uint8_t> prefix(file.begin(), file.begin() + len);
    auto f = GgufFile::parse(prefix.data(), prefix.size(), "s.gguf");
    ASSERT_FALSE(f.ok()) << "a file cut at " << len << " of " << data_end << " bytes parsed";
    ASSERT_EQ(f.status().message().rfind("s.gguf: ", 0), 0u) << f.status().message();
    ASSERT_EQ(f.status().message().find('\n'), std::string::npos);
  }
}

TEST_F(GgufTest, RandomMutationsNeverReadOutOfBounds) {
  std::string file = sample_file(dir_);
  Rng rng(42);
  int parsed = 0;
  for (int trial = 0; trial < 3000; ++trial) {
    std::vector<uint8_t> bytes(file.begin(), file.end());
    int flips = 1 + static_cast<int>(rng.below(4));
    for (int flip = 0; flip < flips; ++flip) bytes[rng.below(bytes.size())] = static_cast<uint8_t>(rng.next_u64());
    auto f = GgufFile::parse(bytes.data(), bytes.size(), "m.gguf");
    if (!f.ok()) {
      ASSERT_EQ(f.status().message().rfind("m.gguf: ", 0), 0u);
      continue;
    }
    ++parsed;
    for (const GgufTensorInfo& t : f->tensors()) {
      const uint8_t* begin = static_cast<const uint8_t*>(t.view.data);
      ASSERT_GE(begin, bytes.data());
      ASSERT_LE(begin + t.view.num_bytes(), bytes.data() + bytes.size());
    }
  }
  EXPECT_GT(parsed, 0);  // many flips land in values and tensor data, which stay valid
}

TEST_F(GgufTest, OpenNamesAMissingFile) {
  auto f = GgufFile::open(path("absent.gguf"));
  ASSERT_FALSE(f.ok());
  EXPECT_EQ(f.status().code(), StatusCode::kNotFound);
  EXPECT_EQ(f.status().message(), path("absent.gguf") + ": cannot open: No such file or directory");
}

// ---- Cross-check with an independent implementation --------------------------------------
// A GGUF reader and writer in plain Python (struct only), written from the spec: it dumps a
// file Koi wrote to JSON, and writes a file that Koi reads.
constexpr const char* kReferenceScript = R"PY(
import json, struct, sys

FMT = {0: '<B', 1: '<b', 2: '<H', 3: '<h', 4: '<I', 5: '<i', 6: '<I', 7: '<B', 10: '<Q', 11: '<q', 12: '<Q'}
BLOCK = {0: (1, 4), 1: (1, 2), 30: (1, 2), 8: (32, 34), 2: (32, 18)}  # ggml type: (values, bytes) per block

def dump(path):
    b = open(path, 'rb').read()
    p = 0
    def take(fmt):
        nonlocal p
        v = struct.unpack_from(fmt, b, p)[0]
        p += struct.calcsize(fmt)
        return v
    def string():
        nonlocal p
        n = take('<Q')
        s = b[p:p + n].decode('utf-8')
        p += n
        return s
    def value(t):  # floats as their bit patterns, to compare exactly
        if t == 8:
            return string()
        if t == 9:
            et, n = take('<I'), take('<Q')
            return {'array': et, 'items': [value(et) for _ in range(n)]}
        return take(FMT[t])
    assert b[:4] == b'GGUF'
    p = 4
    version, n_tensors, n_kv = take('<I'), take('<Q'), take('<Q')
    kv = []
    for _ in range(n_kv):
        k = string()
        t = take('<I')
        kv.append([k, t, value(t)])
    alignment = dict((k, v) for k, t, v in kv).get('general.alignment', 32)
    infos = []
    for _ in range(n_tensors):
        name = string()
        ne = [take('<Q') for _ in range(take('<I'))]
        infos.append([name, ne, take('<I'), take('<Q')])
    start = (p + alignment - 1) // alignment * alignment
    tensors = []
    for name, ne, t, off in infos:
        per, size = BLOCK[t]
        rows = 1
        for d in ne[1:]:
            rows *= d
        nbytes = ne[0] // per * size * rows
        tensors.append([name, ne, t, off, b[start + off:start + off + nbytes].hex()])
    return {'version': version, 'alignment': alignment, 'kv': kv, 'tensors': tensors}

def write(path):
    out = bytearray()
    def put(fmt, v):
        out.extend(struct.pack(fmt, v))
    def string(s):
        e = s.encode('utf-8')
        put('<Q', len(e))
        out.extend(e)
    kv = [('general.architecture', 8, 'llama'), ('general.alignment', 4, 64), ('llama.block_count', 4, 5),
          ('llama.rope.freq_base', 6, 10000.0), ('t.i8', 1, -7), ('t.u16', 2, 65000), ('t.i16', 3, -300),
          ('t.i64', 11, -(1 << 40)), ('t.u64', 10, (1 << 63) + 5), ('t.f64', 12, 0.1), ('t.bool', 7, 1)]
    arrays = [('tokenizer.ggml.tokens', 8, ['<unk>', 'h\u00e9llo', '\u2581the']),
              ('tokenizer.ggml.scores', 6, [0.0, -1.5, -2.25]), ('tokenizer.ggml.token_type', 5, [2, 1, 1])]
    tensors = [('token_embd.weight', 0, [4, 3], b''.join(struct.pack('<f', i * 0.5) for i in range(12))),
               ('blk.0.attn_norm.weight', 1, [2, 2], b''.join(struct.pack('<e', x) for x in [1.0, -2.0, 0.5, 65504.0])),
               ('blk.0.attn_q.weight', 8, [32, 1], struct.pack('<e', 0.5) + bytes((i - 16) & 0xff for i in range(32)))]
    out.extend(b'GGUF')
    put('<I', 3); put('<Q', len(tensors)); put('<Q', len(kv) + len(arrays))
    for k, t, v in kv:
        string(k); put('<I', t)
        string(v) if t == 8 else put({4: '<I', 6: '<f', 1: '<b', 2: '<H', 3: '<h', 11: '<q', 10: '<Q', 12: '<d', 7: '<B'}[t], v)
    for k, t, vs in arrays:
        string(k); put('<I', 9); put('<I', t); put('<Q', len(vs))
        for v in vs:
            string(v) if t == 8 else put({6: '<f', 5: '<i'}[t], v)
    offset = 0
    for name, t, ne, data in tensors:
        string(name); put('<I', len(ne))
        for d in ne:
            put('<Q', d)
        put('<I', t); put('<Q', offset)
        offset = (offset + len(data) + 63) // 64 * 64
    out.extend(b'\0' * (-len(out) % 64))
    for name, t, ne, data in tensors:
        out.extend(data)
        out.extend(b'\0' * (-len(out) % 64))
    open(path, 'wb').write(out)

if sys.argv[1] == 'dump':
    open(sys.argv[3], 'w').write(json.dumps(dump(sys.argv[2])))
else:
    write(sys.argv[2])
)PY";

// Runs the reference script with `args`; true when it succeeded.
bool run_reference(const std::string& dir, const std::string& args) {
  std::string script = path_join(dir, "gguf_ref.py");
  KOI_CHECK(write_file_atomic(script, kReferenceScript).ok());
  return std::system(("/usr/bin/python3 " + script + " " + args).c_str()) == 0;
}

// Koi's view of a file in the reference script's JSON form.
json::value value_json(const GgufValue& v) {
  switch (v.type) {
    case GgufType::kString: return json::value(v.str);
    case GgufType::kArray: {
      json::array items;
      for (const GgufValue& e : v.elems) items.push_back(value_json(e));
      return json::object{{"array", static_cast<uint32_t>(v.elem_type)}, {"items", std::move(items)}};
    }
    case GgufType::kFloat32: {
      float x = static_cast<float>(v.f);
      uint32_t bits;
      std::memcpy(&bits, &x, 4);
      return json::value(bits);
    }
    case GgufType::kFloat64: {
      uint64_t bits;
      std::memcpy(&bits, &v.f, 8);
      return json::value(bits);
    }
    case GgufType::kUint64: return json::value(static_cast<uint64_t>(v.i));
    default: return json::value(v.i);
  }
}

std::string koi_dump(const GgufFile& f) {
  json::array kv, tensors;
  for (const std::string& key : f.keys()) {
    const GgufValue* v = f.find(key);
    kv.push_back(json::array{json::value(key), static_cast<uint32_t>(v->type), value_json(*v)});
  }
  for (const GgufTensorInfo& t : f.tensors()) {
    json::array ne;
    for (int d = 0; d < t.view.n_dims; ++d) ne.push_back(t.view.ne[d]);
    std::string hex;
    char buf[3];
    for (int64_t idx = 0; idx < t.view.num_bytes(); ++idx) {
      std::snprintf(buf, sizeof buf, "%02x", static_cast<const uint8_t*>(t.view.data)[idx]);
      hex += buf;
    }
    tensors.push_back(json::array{json::value(t.name), ne, static_cast<uint32_t>(t.view.type), t.offset, hex});
  }
  return json::serialize(json::object{{"version", f.version()}, {"alignment", f.alignment()},
                                      {"kv", std::move(kv)}, {"tensors", std::move(tensors)}});
}

TEST_F(GgufTest, IndependentReaderSeesWhatKoiWrote) {
  std::string file = sample_file(dir_);
  auto f = GgufFile::open(path("sample.gguf"));
  ASSERT_TRUE(f.ok());
  ASSERT_TRUE(run_reference(dir_, "dump " + path("sample.gguf") + " " + path("dump.json")));
  auto reference = read_file(path("dump.json"));
  ASSERT_TRUE(reference.ok());
  json::error_code ec;
  json::value ref = json::parse(*reference, ec);
  ASSERT_FALSE(ec) << *reference;
  EXPECT_EQ(json::serialize(ref), koi_dump(*f));
}

TEST_F(GgufTest, KoiReadsWhatTheIndependentWriterWrote) {
  ASSERT_TRUE(run_reference(dir_, "write " + path("ref.gguf")));
  auto f = GgufFile::open(path("ref.gguf"));
  ASSERT_TRUE(f.ok()) << f.status().to_string();
  EXPECT_EQ(f->alignment(), 64u);
  EXPECT_EQ(*f->get_string("general.architecture"), "llama");
  EXPECT_EQ(*f->get_int("llama.block_count"), 5);
  EXPECT_EQ(*f->get_float("llama.rope.freq_base"), 10000.0);
  EXPECT_EQ(*f->get_int("t.i8"), -7);
  EXPECT_EQ(*f->get_int("t.u16"), 65000);
  EXPECT_EQ(*f->get_int("t.i16"), -300);
  EXPECT_EQ(*f->get_int("t.i64"), -(int64_t{1} << 40));
  EXPECT_EQ(static_cast<uint64_t>(f->find("t.u64")->i), (uint64_t{1} << 63) + 5);
  EXPECT_EQ(*f->get_float("t.f64"), 0.1);
  EXPECT_EQ(*f->get_bool("t.bool"), true);
  EXPECT_EQ(*f->get_string_array("tokenizer.ggml.tokens"),
            (std::vector<std::string>{"<unk>", "h\xC3\xA9llo", "\xE2\x96\x81the"}));
  EXPECT_EQ(*f->get_float_array("tokenizer.ggml.scores"), (std::vector<float>{0.0f, -1.5f, -2.25f}));
  EXPECT_EQ(*f->get_int_array("tokenizer.ggml.token_type"), (std::vector<int64_t>{2, 1, 1}));

  ASSERT_EQ(f->tensors().size(), 3u);
  const TensorView& embd = f->find_tensor("token_embd.weight")->view;
  EXPECT_EQ(embd.shape_string(), "[4, 3]");
  for (int idx = 0; idx < 12; ++idx) EXPECT_EQ(embd.f32()[idx], idx * 0.5f);
  float norm[4];
  const TensorView& nv = f->find_tensor("blk.0.attn_norm.weight")->view;
  dequantize_row(nv.type, nv.data, norm, 4);
  EXPECT_EQ(std::vector<float>(norm, norm + 4), (std::vector<float>{1.0f, -2.0f, 0.5f, 65504.0f}));
  float q[32];
  const TensorView& qv = f->find_tensor("blk.0.attn_q.weight")->view;
  EXPECT_EQ(qv.type, DType::kQ8_0);
  dequantize_row(qv.type, qv.data, q, 32);
  for (int idx = 0; idx < 32; ++idx) EXPECT_EQ(q[idx], 0.5f * (idx - 16));
  EXPECT_EQ(f->find_tensor("blk.0.attn_q.weight")->offset, 128u);
}

}  // namespace
}  // namespace koi::model

namespace koi::model {
namespace {

// A GGUF with the llama settings of a tiny model (dim 64, 8 heads of 8, 4 KV heads, vocab
// 32) plus `extra` metadata, as config_from_gguf reads it.
Result<ModelConfig> tiny_config(const std::string& path, const std::function<void(GgufWriter&)>& extra) {
  GgufWriter w;
  w.set_string("general.architecture", "llama");
  w.set_u32("llama.embedding_length", 64);
  w.set_u32("llama.block_count", 2);
  w.set_u32("llama.feed_forward_length", 128);
  w.set_u32("llama.attention.head_count", 8);
  w.set_u32("llama.attention.head_count_kv", 4);
  w.set_u32("llama.rope.dimension_count", 8);
  extra(w);
  std::vector<float> embd(64 * 32, 0.0f);
  w.add_tensor("token_embd.weight", DType::kF32, {64, 32}, embd.data());
  KOI_RETURN_IF_ERROR(w.write(path));
  KOI_ASSIGN_OR_RETURN(GgufFile g, GgufFile::open(path));
  return config_from_gguf(g);
}

TEST_F(GgufTest, EveryModelSettingIsRangeCheckedNamingTheKey) {
  const std::string p = path("m.gguf");
  struct Case {
    std::function<void(GgufWriter&)> extra;
    std::string error;  // "" when the file must load
  };
  const Case cases[] = {
      {[](GgufWriter&) {}, ""},
      {[](GgufWriter& w) { w.set_u32("llama.rope.dimension_count", 0); },
       p + ": llama.rope.dimension_count must be even, positive and at most the head dimension (8), got 0"},
      {[](GgufWriter& w) { w.set_u32("llama.rope.dimension_count", 999); },
       p + ": llama.rope.dimension_count must be even, positive and at most the head dimension (8), got 999"},
      {[](GgufWriter& w) { w.set_u32("llama.rope.dimension_count", 7); },
       p + ": llama.rope.dimension_count must be even, positive and at most the head dimension (8), got 7"},
      {[](GgufWriter& w) { w.set_u32("llama.rope.dimension_count", 4); },
       p + ": llama.rope.dimension_count is 4 of a head dimension of 8; Koi rotates whole heads and does not run partial "
           "rotary embeddings"},
      {[](GgufWriter& w) { w.set_u32("llama.embedding_length", 0); },
       p + ": llama.embedding_length must be an integer from 1 to 16777216, got 0"},
      {[](GgufWriter& w) { w.set_u64("llama.embedding_length", uint64_t{1} << 40); },
       p + ": llama.embedding_length must be an integer from 1 to 16777216, got 1099511627776"},
      {[](GgufWriter& w) { w.set_i32("llama.block_count", -3); },
       p + ": llama.block_count must be an integer from 1 to 16777216, got -3"},
      {[](GgufWriter& w) { w.set_u32("llama.attention.head_count_kv", 3); },
       p + ": llama.attention.head_count_kv (3) must divide llama.attention.head_count (8)"},
      {[](GgufWriter& w) { w.set_u32("llama.attention.head_count", 7); },
       p + ": llama.attention.head_count_kv (4) must divide llama.attention.head_count (7)"},
      {[](GgufWriter& w) { w.set_u32("llama.attention.head_count", 6), w.set_u32("llama.attention.head_count_kv", 6); },
       p + ": llama.embedding_length (64) must be a multiple of llama.attention.head_count (6), or give "
           "llama.attention.key_length"},
      {[](GgufWriter& w) { w.set_u32("llama.attention.key_length", 9); },
       p + ": llama.attention.key_length (9) must be even: rope rotates pairs"},
      {[](GgufWriter& w) { w.set_u32("llama.attention.key_length", 1 << 22); },
       p + ": llama.attention.key_length * llama.attention.head_count = 33554432 is more than 16777216"},
      {[](GgufWriter& w) { w.set_u32("llama.context_length", 0); },
       p + ": llama.context_length must be an integer from 1 to 16777216, got 0"},
      {[](GgufWriter& w) { w.set_f32("llama.rope.freq_base", -1.0f); }, p + ": llama.rope.freq_base must be a positive number, got -1"},
      {[](GgufWriter& w) { w.set_f32("llama.attention.layer_norm_rms_epsilon", 0.0f); },
       p + ": llama.attention.layer_norm_rms_epsilon must be a positive number, got 0"},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(c.error);
    auto config = tiny_config(p, c.extra);
    if (c.error.empty()) {
      ASSERT_TRUE(config.ok()) << config.status().message();
      EXPECT_EQ(config->head_dim, 8);
      EXPECT_EQ(config->n_vocab, 32);
    } else {
      EXPECT_EQ(config.status().message(), c.error);
    }
  }
}

}  // namespace
}  // namespace koi::model
