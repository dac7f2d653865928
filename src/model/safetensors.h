// safetensors: the Hugging Face weight file (an 8-byte little-endian header length N, N
// bytes of JSON {name: {dtype, shape, data_offsets: [begin, end]}, "__metadata__":
// {str: str}}, then the tensor bytes), and a model directory of one file or of shards
// listed in model.safetensors.index.json.
//
// SafetensorsFile reads one file: open() memory-maps it and owns the mapping; parse() reads
// bytes owned by the caller, which must outlive it. Tensor views (F32, F16, BF16) point
// into those bytes, with shapes reversed into ggml order (ne[0] innermost), and stay valid
// when the object is moved. Every field is validated, so a truncated or hostile file
// gives a Status whose message starts with the file name; nothing reads out of bounds.
// SafetensorsModel owns the shards of a directory. Both are immutable after opening and
// safe to read from many threads.
//
// write_safetensors writes a file atomically (temporary file, fsync, rename), tensors
// ordered by element size then name so that every tensor is aligned to its element size.
#pragma once

#include <cstdint>
#include <map>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "base/file.h"
#include "base/status.h"
#include "tensor/tensor.h"

namespace koi::model {

struct SafetensorsTensor {
  std::string name;
  TensorView view;  // ne in ggml order: the safetensors shape reversed; a scalar is [1]
};

class SafetensorsFile {
 public:
  static Result<SafetensorsFile> open(const std::string& path);
  static Result<SafetensorsFile> parse(const uint8_t* data, size_t size, std::string name);

  // In header order.
  const std::vector<SafetensorsTensor>& tensors() const { return tensors_; }
  const SafetensorsTensor* find(std::string_view name) const;
  const std::map<std::string, std::string>& metadata() const { return metadata_; }
  // The path given to open(), or the name given to parse().
  const std::string& path() const { return path_; }
  // The file's read-only shared mapping, which the tensors' bytes lie in (empty for parse()).
  std::span<const uint8_t> mapped_bytes() const { return {file_.data(), file_.size()}; }

 private:
  SafetensorsFile() = default;
  Status parse_bytes(const uint8_t* data, size_t size);

  MappedFile file_;  // empty for parse()
  std::string path_;
  std::vector<SafetensorsTensor> tensors_;
  std::map<std::string, size_t, std::less<>> index_;
  std::map<std::string, std::string> metadata_;
};

// A model's weights as Hugging Face stores them in a directory: model.safetensors, or
// model.safetensors.index.json {"weight_map": {tensor: shard file}} with its shards. A
// missing shard, or a tensor listed in the index but absent from its shard, fails open_dir
// with a message naming the file.
class SafetensorsModel {
 public:
  static Result<SafetensorsModel> open_dir(const std::string& dir);

  const SafetensorsTensor* find(std::string_view name) const;
  // Sorted.
  std::vector<std::string> tensor_names() const;
  // The shards' mappings (SafetensorsFile::mapped_bytes).
  std::vector<std::span<const uint8_t>> mapped_bytes() const;

 private:
  SafetensorsModel() = default;

  std::vector<SafetensorsFile> shards_;
  // Tensor name -> (shard index, tensor index in that shard).
  std::map<std::string, std::pair<size_t, size_t>, std::less<>> index_;
};

struct SafetensorsWriteTensor {
  std::string name;
  DType type;                  // F32, F16 or BF16
  std::vector<int64_t> shape;  // row-major, outermost first
  const void* data;            // product(shape) elements
};

Status write_safetensors(const std::string& path, const std::vector<SafetensorsWriteTensor>& tensors,
                         const std::map<std::string, std::string>& metadata = {});

}  // namespace koi::model
