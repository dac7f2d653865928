// Files: the file-system seam. Every read of a model or data file and every durable write
// goes through here, so errors carry the path and durability rules live in one place.
//
// MappedFile maps a file read-only (weights stay in the page cache and are shared between
// processes, never copied). It owns the mapping; moving it transfers ownership; the bytes
// stay valid until it is destroyed. Safe to read from many threads.
// write_file_atomic writes to a temporary file in the same directory, fsyncs it, renames
// it over the target and fsyncs the directory: a reader sees the old or the new file,
// never a torn one, even after a crash.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "base/status.h"

namespace koi {

class MappedFile {
 public:
  MappedFile() = default;
  ~MappedFile();
  MappedFile(MappedFile&& other) noexcept;
  MappedFile& operator=(MappedFile&& other) noexcept;
  MappedFile(const MappedFile&) = delete;
  MappedFile& operator=(const MappedFile&) = delete;

  static Result<MappedFile> open(const std::string& path);

  const uint8_t* data() const { return data_; }
  size_t size() const { return size_; }
  const std::string& path() const { return path_; }
  std::string_view view() const { return {reinterpret_cast<const char*>(data_), size_}; }

 private:
  void reset();
  const uint8_t* data_ = nullptr;
  size_t size_ = 0;
  std::string path_;
};

// AtomicFileWriter streams a file too large to build in memory (a model export) with the
// guarantee of write_file_atomic: bytes go to "<path>.tmp.<pid>" through a 1 MiB buffer;
// commit() flushes, fsyncs, renames over `path` and fsyncs the directory. Destroying a
// writer that was not committed removes the temporary file. Errors name the path.
// Not thread-safe.
class AtomicFileWriter {
 public:
  static Result<AtomicFileWriter> create(const std::string& path);
  ~AtomicFileWriter();
  AtomicFileWriter(AtomicFileWriter&& other) noexcept;
  AtomicFileWriter& operator=(AtomicFileWriter&&) = delete;
  AtomicFileWriter(const AtomicFileWriter&) = delete;
  AtomicFileWriter& operator=(const AtomicFileWriter&) = delete;

  Status append(const void* data, size_t size);
  Status append(std::string_view s) { return append(s.data(), s.size()); }
  Status append_zeros(size_t size);
  // Bytes appended so far.
  uint64_t size() const { return size_; }
  Status commit();

 private:
  AtomicFileWriter(int fd, std::string path, std::string tmp);
  Status write_all(const char* p, size_t size);
  Status flush();
  int fd_ = -1;
  std::string path_;
  std::string tmp_;
  uint64_t size_ = 0;
  std::vector<char> buf_;
};

Result<std::string> read_file(const std::string& path);
Status write_file_atomic(const std::string& path, std::string_view contents);
bool file_exists(const std::string& path);
bool is_directory(const std::string& path);
// Joins two path parts with exactly one '/'.
std::string path_join(std::string_view a, std::string_view b);
// Creates a fresh directory under $TMPDIR (or /tmp) named prefix-XXXXXX.
Result<std::string> make_temp_dir(std::string_view prefix);
// Removes a directory tree; ignores a missing path.
void remove_all(const std::string& path);

}  // namespace koi
