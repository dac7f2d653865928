#include "base/file.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <vector>

namespace koi {
namespace {

Status errno_status(const std::string& path, std::string_view what) {
  int err = errno;
  std::string msg = path + ": " + std::string(what) + ": " + std::strerror(err);
  if (err == ENOENT) return Status::not_found(msg);
  return Status::io_error(msg);
}

}  // namespace

MappedFile::~MappedFile() { reset(); }

MappedFile::MappedFile(MappedFile&& other) noexcept
    : data_(other.data_), size_(other.size_), path_(std::move(other.path_)) {
  other.data_ = nullptr;
  other.size_ = 0;
}

MappedFile& MappedFile::operator=(MappedFile&& other) noexcept {
  if (this != &other) {
    reset();
    data_ = other.data_;
    size_ = other.size_;
    path_ = std::move(other.path_);
    other.data_ = nullptr;
    other.size_ = 0;
  }
  return *this;
}

void MappedFile::reset() {
  if (data_ != nullptr && size_ > 0) munmap(const_cast<uint8_t*>(data_), size_);
  data_ = nullptr;
  size_ = 0;
}

Result<MappedFile> MappedFile::open(const std::string& path) {
  int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) return errno_status(path, "cannot open");
  struct stat st {};
  if (fstat(fd, &st) != 0) {
    Status s = errno_status(path, "cannot stat");
    ::close(fd);
    return s;
  }
  if (S_ISDIR(st.st_mode)) {
    ::close(fd);
    return Status::invalid_argument(path + ": is a directory, expected a file");
  }
  MappedFile f;
  f.path_ = path;
  f.size_ = static_cast<size_t>(st.st_size);
  if (f.size_ > 0) {
    void* p = mmap(nullptr, f.size_, PROT_READ, MAP_SHARED, fd, 0);
    if (p == MAP_FAILED) {
      Status s = errno_status(path, "cannot map");
      ::close(fd);
      f.size_ = 0;
      return s;
    }
    f.data_ = static_cast<const uint8_t*>(p);
  }
  ::close(fd);
  return f;
}

Result<std::string> read_file(const std::string& path) {
  int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) return errno_status(path, "cannot open");
  std::string out;
  char buf[1 << 16];
  for (;;) {
    ssize_t n = ::read(fd, buf, sizeof buf);
    if (n < 0) {
      if (errno == EINTR) continue;
      Status s = errno_status(path, "cannot read");
      ::close(fd);
      return s;
    }
    if (n == 0) break;
    out.append(buf, static_cast<size_t>(n));
  }
  ::close(fd);
  return out;
}

AtomicFileWriter::AtomicFileWriter(int fd, std::string path, std::string tmp)
    : fd_(fd), path_(std::move(path)), tmp_(std::move(tmp)) {
  buf_.reserve(1 << 20);
}

AtomicFileWriter::AtomicFileWriter(AtomicFileWriter&& other) noexcept
    : fd_(other.fd_), path_(std::move(other.path_)), tmp_(std::move(other.tmp_)),
      size_(other.size_), buf_(std::move(other.buf_)) {
  other.fd_ = -1;
}

AtomicFileWriter::~AtomicFileWriter() {
  if (fd_ >= 0) {
    ::close(fd_);
    ::unlink(tmp_.c_str());
  }
}

Result<AtomicFileWriter> AtomicFileWriter::create(const std::string& path) {
  std::string tmp = path + ".tmp." + std::to_string(::getpid());
  int fd = ::open(tmp.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (fd < 0) return errno_status(tmp, "cannot create");
  return AtomicFileWriter(fd, path, std::move(tmp));
}

Status AtomicFileWriter::append(const void* data, size_t size) {
  const char* p = static_cast<const char*>(data);
  size_ += size;
  if (buf_.size() + size > buf_.capacity()) KOI_RETURN_IF_ERROR(flush());
  if (size >= buf_.capacity()) return write_all(p, size);  // a large block goes straight out
  buf_.insert(buf_.end(), p, p + size);
  return ok_status();
}

Status AtomicFileWriter::append_zeros(size_t size) {
  static const char kZeros[4096] = {};
  while (size > 0) {
    size_t n = std::min(size, sizeof kZeros);
    KOI_RETURN_IF_ERROR(append(kZeros, n));
    size -= n;
  }
  return ok_status();
}

Status AtomicFileWriter::write_all(const char* p, size_t size) {
  while (size > 0) {
    ssize_t n = ::write(fd_, p, size);
    if (n < 0) {
      if (errno == EINTR) continue;
      return errno_status(tmp_, "cannot write");
    }
    p += n;
    size -= static_cast<size_t>(n);
  }
  return ok_status();
}

Status AtomicFileWriter::flush() {
  KOI_RETURN_IF_ERROR(write_all(buf_.data(), buf_.size()));
  buf_.clear();
  return ok_status();
}

Status AtomicFileWriter::commit() {
  KOI_RETURN_IF_ERROR(flush());
  if (::fsync(fd_) != 0) return errno_status(tmp_, "cannot fsync");
  ::close(fd_);
  fd_ = -1;
  if (::rename(tmp_.c_str(), path_.c_str()) != 0) {
    Status s = errno_status(path_, "cannot rename temporary file over");
    ::unlink(tmp_.c_str());
    return s;
  }
  std::string dir = std::filesystem::path(path_).parent_path().string();
  if (dir.empty()) dir = ".";
  int dfd = ::open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (dfd >= 0) {
    ::fsync(dfd);
    ::close(dfd);
  }
  return ok_status();
}

Status write_file_atomic(const std::string& path, std::string_view contents) {
  KOI_ASSIGN_OR_RETURN(AtomicFileWriter w, AtomicFileWriter::create(path));
  KOI_RETURN_IF_ERROR(w.append(contents));
  return w.commit();
}

bool file_exists(const std::string& path) {
  struct stat st {};
  return ::stat(path.c_str(), &st) == 0;
}

bool is_directory(const std::string& path) {
  struct stat st {};
  return ::stat(path.c_str(), &st) == 0 && S_ISDIR(st.st_mode);
}

std::string path_join(std::string_view a, std::string_view b) {
  if (a.empty()) return std::string(b);
  std::string out(a);
  if (out.back() != '/') out.push_back('/');
  while (!b.empty() && b.front() == '/') b.remove_prefix(1);
  out.append(b);
  return out;
}

Result<std::string> make_temp_dir(std::string_view prefix) {
  const char* base = std::getenv("TMPDIR");
  std::string tmpl = path_join(base && *base ? base : "/tmp", std::string(prefix) + "-XXXXXX");
  std::vector<char> buf(tmpl.begin(), tmpl.end());
  buf.push_back('\0');
  if (mkdtemp(buf.data()) == nullptr) return errno_status(tmpl, "cannot create temporary directory");
  return std::string(buf.data());
}

void remove_all(const std::string& path) {
  std::error_code ec;
  std::filesystem::remove_all(path, ec);
}

}  // namespace koi
