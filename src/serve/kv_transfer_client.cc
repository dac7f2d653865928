#include "serve/kv_transfer_client.h"

#include <sys/socket.h>

#include <atomic>
#include <charconv>
#include <list>
#include <mutex>
#include <thread>

#include <boost/asio/connect.hpp>
#include <boost/asio/io_context.hpp>
#include <boost/asio/ip/tcp.hpp>
#include <fmt/format.h>

#include "base/logging.h"
#include "serve/kv_wire.h"

namespace koi::serve {
namespace {

namespace asio = boost::asio;
using tcp = asio::ip::tcp;
using kv_wire::FrameType;

struct HostPort {
  std::string host;
  std::string port;
};

std::optional<HostPort> split_peer(const std::string& peer) {
  const size_t colon = peer.rfind(':');
  if (colon == std::string::npos || colon == 0) return std::nullopt;
  int port = 0;
  const char* begin = peer.data() + colon + 1;
  const char* end = peer.data() + peer.size();
  auto [ptr, ec] = std::from_chars(begin, end, port);
  if (ec != std::errc() || ptr != end || port < 1 || port > 65535) return std::nullopt;
  return HostPort{peer.substr(0, colon), peer.substr(colon + 1)};
}

// The socket's descriptor for a cancel hook that may run on another thread after the
// socket is gone: shut only while still open.
struct SharedFd {
  std::mutex mu;
  int fd = -1;  // guarded by mu; -1 once closed
  void shut() {
    std::lock_guard lock(mu);
    if (fd >= 0) ::shutdown(fd, SHUT_RDWR);
  }
  void close() {
    std::lock_guard lock(mu);
    fd = -1;
  }
};

}  // namespace

Status check_peer(const std::string& peer) {
  if (split_peer(peer)) return ok_status();
  return Status::invalid_argument(
      fmt::format("x-koi-prefill-peer must be HOST:PORT (the prefill worker's --kv-port), got '{}'", peer));
}

struct KvTransferClient::Impl {
  struct Transfer {
    std::shared_ptr<engine::KvImport> ticket;
    std::thread thread;
    std::atomic<bool> done{false};
  };

  Impl(engine::KvLayout l, double timeout_s, ServeMetrics& m, const Clock& c)
      : layout(std::move(l)), timeout_ns(static_cast<int64_t>(timeout_s * 1e9)), metrics(m), clock(c) {}

  engine::KvLayout layout;
  int64_t timeout_ns;
  ServeMetrics& metrics;
  const Clock& clock;
  std::mutex mu;
  bool stopped = false;                             // guarded by mu
  std::list<std::shared_ptr<Transfer>> transfers;   // guarded by mu

  void run(engine::KvImport& ticket, const std::string& peer, kv_wire::PrefillRequest request);
  Status exchange(tcp::socket& socket, engine::KvImport& ticket, kv_wire::PrefillRequest& request);
  Status receive(tcp::socket& socket, engine::KvImport& ticket);
  void reap();
};

KvTransferClient::KvTransferClient(engine::KvLayout layout, double timeout_s, ServeMetrics& metrics, const Clock& clock)
    : impl_(std::make_unique<Impl>(std::move(layout), timeout_s, metrics, clock)) {}

KvTransferClient::~KvTransferClient() { stop(); }

void KvTransferClient::attach(engine::RequestSpec& spec, const std::string& peer) {
  Impl& s = *impl_;
  auto transfer = std::make_shared<Impl::Transfer>();
  transfer->ticket = std::make_shared<engine::KvImport>(s.clock.now_ns() + s.timeout_ns);
  spec.kv_import = transfer->ticket;
  kv_wire::PrefillRequest request;
  request.id = spec.id;
  request.prompt = spec.prompt;
  request.params = spec.params;
  request.cache_key = spec.cache_key;
  s.reap();
  std::lock_guard lock(s.mu);
  if (s.stopped) {
    transfer->ticket->cancel();
    return;
  }
  transfer->thread = std::thread([&s, transfer, peer, request = std::move(request)]() mutable {
    s.run(*transfer->ticket, peer, std::move(request));
    transfer->done.store(true);
  });
  s.transfers.push_back(std::move(transfer));
}

void KvTransferClient::stop() {
  Impl& s = *impl_;
  std::list<std::shared_ptr<Impl::Transfer>> transfers;
  {
    std::lock_guard lock(s.mu);
    s.stopped = true;
    transfers.swap(s.transfers);
  }
  for (auto& t : transfers) t->ticket->cancel();
  for (auto& t : transfers) t->thread.join();
}

void KvTransferClient::Impl::reap() {
  std::lock_guard lock(mu);
  for (auto it = transfers.begin(); it != transfers.end();) {
    if (!(*it)->done.load()) {
      ++it;
      continue;
    }
    (*it)->thread.join();
    it = transfers.erase(it);
  }
}

void KvTransferClient::Impl::run(engine::KvImport& ticket, const std::string& peer, kv_wire::PrefillRequest request) {
  const std::optional<HostPort> address = split_peer(peer);
  asio::io_context io;
  tcp::socket socket(io);
  boost::system::error_code ec;
  if (address) {
    tcp::resolver resolver(io);
    const auto endpoints = resolver.resolve(address->host, address->port, ec);
    if (!ec) asio::connect(socket, endpoints, ec);
  }
  if (!address || ec) {
    ticket.fail(fmt::format("cannot connect to prefill worker {}: {}", peer, address ? ec.message() : "bad address"));
    return;
  }
  socket.set_option(tcp::no_delay(true), ec);
  auto fd = std::make_shared<SharedFd>();
  fd->fd = socket.native_handle();
  ticket.on_cancel([fd] { fd->shut(); });
  if (Status s = exchange(socket, ticket, request); !s.ok()) {
    ticket.fail(fmt::format("prefill worker {}: {}", peer, s.message()));
  }
  fd->close();
}

Status KvTransferClient::Impl::exchange(tcp::socket& socket, engine::KvImport& ticket,
                                        kv_wire::PrefillRequest& request) {
  KOI_RETURN_IF_ERROR(kv_wire::write_frame(socket, FrameType::kHello, kv_wire::encode_hello(layout)));
  KOI_ASSIGN_OR_RETURN(kv_wire::Frame reply, kv_wire::read_frame(socket));
  if (reply.type == FrameType::kError) return Status::failed_precondition(reply.payload);
  if (reply.type != FrameType::kAccept) return Status::corrupt("expected ACCEPT after HELLO");
  const std::optional<engine::KvImport::Reservation> reservation = ticket.wait_reserved();
  if (!reservation) return ok_status();  // cancelled: the engine no longer waits
  const int64_t start_ns = clock.now_ns();
  request.skip_blocks = reservation->num_cached_tokens / layout.block_size;
  KOI_RETURN_IF_ERROR(kv_wire::write_frame(socket, FrameType::kRequest, kv_wire::encode_request(request)));
  KOI_RETURN_IF_ERROR(receive(socket, ticket));
  metrics.kv_transfer_seconds.observe(static_cast<double>(clock.now_ns() - start_ns) * 1e-9);
  return ok_status();
}

Status KvTransferClient::Impl::receive(tcp::socket& socket, engine::KvImport& ticket) {
  const size_t bytes = static_cast<size_t>(layout.block_bytes());
  kv_wire::BlockView block;
  for (;;) {
    KOI_ASSIGN_OR_RETURN(kv_wire::Frame frame, kv_wire::read_frame(socket));
    switch (frame.type) {
      case FrameType::kBlock:
        KOI_RETURN_IF_ERROR(kv_wire::decode_block(frame.payload, bytes, &block));
        if (!ticket.write_block(block.block_idx, block.layer, block.k, block.v)) {
          if (ticket.state() != engine::KvImport::State::kReserved) return ok_status();  // cancelled
          return Status::corrupt(fmt::format("BLOCK {} layer {} is outside the reservation", block.block_idx, block.layer));
        }
        metrics.kv_transfer_bytes.inc(static_cast<double>(frame.payload.size()));
        break;
      case FrameType::kDone: {
        KOI_ASSIGN_OR_RETURN(engine::PrefillResult result, kv_wire::decode_done(frame.payload));
        ticket.complete(std::move(result));
        return ok_status();
      }
      case FrameType::kError:
        return Status::unavailable(frame.payload);
      default:
        return Status::corrupt(fmt::format("unexpected frame type {}", static_cast<int>(frame.type)));
    }
  }
}

}  // namespace koi::serve
