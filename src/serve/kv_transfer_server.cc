#include "serve/kv_transfer_server.h"

#include <poll.h>
#include <sys/socket.h>

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

constexpr int kPollMs = 20;

// True once the peer closed or reset its end (it never sends after REQUEST).
bool peer_gone(tcp::socket& socket) {
  pollfd p{};
  p.fd = socket.native_handle();
  p.events = POLLIN | POLLRDHUP;
  if (::poll(&p, 1, 0) <= 0) return false;
  return (p.revents & (POLLRDHUP | POLLHUP | POLLERR | POLLIN)) != 0;
}

}  // namespace

struct KvTransferServer::Impl {
  struct Connection {
    explicit Connection(asio::io_context& io) : socket(io) {}
    tcp::socket socket;
    std::thread thread;
    std::atomic<bool> done{false};
  };

  Impl(engine::KvLayout l, EngineService& s) : layout(std::move(l)), service(s), acceptor(io) {}

  engine::KvLayout layout;
  EngineService& service;
  asio::io_context io;  // never run: every operation here is blocking
  tcp::acceptor acceptor;
  std::thread accept_thread;
  std::atomic<bool> stopping{false};
  std::atomic<uint64_t> next_id{0};
  std::mutex mu;
  std::list<std::shared_ptr<Connection>> connections;  // guarded by mu

  void accept_loop();
  void reap();
  void serve(Connection& c);
  Status handshake(tcp::socket& socket);
  void stream(tcp::socket& socket, const std::string& id, engine::KvExport& ticket);
};

KvTransferServer::KvTransferServer(engine::KvLayout layout, EngineService& service)
    : impl_(std::make_unique<Impl>(std::move(layout), service)) {}

KvTransferServer::~KvTransferServer() { stop(); }

Result<int> KvTransferServer::listen(const std::string& host, int port) {
  boost::system::error_code ec;
  const auto address = asio::ip::make_address(host, ec);
  if (ec) return Status::invalid_argument(fmt::format("--host '{}' is not an IP address", host));
  const tcp::endpoint endpoint(address, static_cast<uint16_t>(port));
  tcp::acceptor& a = impl_->acceptor;
  a.open(endpoint.protocol(), ec);
  if (!ec) a.set_option(tcp::acceptor::reuse_address(true), ec);
  if (!ec) a.bind(endpoint, ec);
  if (!ec) a.listen(asio::socket_base::max_listen_connections, ec);
  if (ec) return Status::unavailable(fmt::format("--kv-port: cannot listen on {}:{}: {}", host, port, ec.message()));
  return static_cast<int>(a.local_endpoint().port());
}

void KvTransferServer::start() { impl_->accept_thread = std::thread([this] { impl_->accept_loop(); }); }

void KvTransferServer::stop() {
  Impl& s = *impl_;
  if (s.stopping.exchange(true)) return;
  ::shutdown(s.acceptor.native_handle(), SHUT_RDWR);  // wakes the blocked accept()
  if (s.accept_thread.joinable()) s.accept_thread.join();
  std::list<std::shared_ptr<Impl::Connection>> connections;
  {
    std::lock_guard lock(s.mu);
    connections.swap(s.connections);
  }
  for (auto& c : connections) ::shutdown(c->socket.native_handle(), SHUT_RDWR);
  for (auto& c : connections) c->thread.join();
}

void KvTransferServer::Impl::accept_loop() {
  while (!stopping.load()) {
    auto c = std::make_shared<Connection>(io);
    boost::system::error_code ec;
    acceptor.accept(c->socket, ec);
    if (ec) {
      if (stopping.load()) return;
      log::warn("KV transfer: accept failed: {}", ec.message());
      continue;
    }
    c->socket.set_option(tcp::no_delay(true), ec);
    reap();
    std::lock_guard lock(mu);
    if (stopping.load()) return;
    c->thread = std::thread([this, c] {
      serve(*c);
      c->done.store(true);
    });
    connections.push_back(std::move(c));
  }
}

void KvTransferServer::Impl::reap() {
  std::lock_guard lock(mu);
  for (auto it = connections.begin(); it != connections.end();) {
    if (!(*it)->done.load()) {
      ++it;
      continue;
    }
    (*it)->thread.join();
    it = connections.erase(it);
  }
}

Status KvTransferServer::Impl::handshake(tcp::socket& socket) {
  KOI_ASSIGN_OR_RETURN(kv_wire::Frame hello, kv_wire::read_frame(socket));
  if (hello.type != FrameType::kHello) return Status::corrupt("KV transfer: the first frame must be HELLO");
  auto peer = kv_wire::decode_hello(hello.payload);
  Status compatible = peer.ok() ? engine::check_compatible(layout, *peer) : peer.status();
  if (!compatible.ok()) {
    (void)kv_wire::write_frame(socket, FrameType::kError, compatible.message());
    return compatible;
  }
  return kv_wire::write_frame(socket, FrameType::kAccept, "");
}

void KvTransferServer::Impl::serve(Connection& c) {
  tcp::socket& socket = c.socket;
  if (Status s = handshake(socket); !s.ok()) {
    log::warn("KV transfer: refused a decode worker: {}", s.message());
    return;
  }
  auto frame = kv_wire::read_frame(socket);
  if (!frame.ok()) return;
  auto request = frame->type == FrameType::kRequest ? kv_wire::decode_request(frame->payload)
                                                    : Result<kv_wire::PrefillRequest>(Status::corrupt("expected REQUEST"));
  if (!request.ok()) {
    (void)kv_wire::write_frame(socket, FrameType::kError, request.status().message());
    return;
  }
  auto ticket = std::make_shared<engine::KvExport>(request->skip_blocks);
  engine::RequestSpec spec;
  spec.id = fmt::format("kv-{}-{}", next_id.fetch_add(1), request->id);
  spec.prompt = std::move(request->prompt);
  spec.params = request->params;
  spec.params.max_tokens = 1;
  spec.cache_key = request->cache_key;
  spec.kv_export = ticket;
  const std::string id = spec.id;
  std::vector<engine::RequestSpec> specs;
  specs.push_back(std::move(spec));
  Status submitted = service.submit(std::move(specs), [ticket](Event ev) {
    if (!ev.error.ok()) ticket->fail(ev.error);
  });
  if (!submitted.ok()) {
    (void)kv_wire::write_frame(socket, FrameType::kError, submitted.message());
    return;
  }
  stream(socket, id, *ticket);
}

void KvTransferServer::Impl::stream(tcp::socket& socket, const std::string& id, engine::KvExport& ticket) {
  const size_t bytes = static_cast<size_t>(layout.block_bytes());
  const auto give_up = [&](const std::string& why) {
    log::warn("KV transfer for '{}' stopped: {}; aborting it", id, why);
    ticket.cancel();
    service.abort({id});
  };
  for (;;) {
    std::optional<engine::KvExport::Item> item = ticket.next(kPollMs);
    if (!item) {
      if (peer_gone(socket) || stopping.load()) return give_up("the decode worker went away");
      continue;
    }
    if (item->block) {
      const std::byte* data = item->block->data.data();
      Status s = kv_wire::write_block(socket, item->block->block_idx, item->block->layer, {data, bytes},
                                      {data + bytes, bytes});
      if (!s.ok()) return give_up(s.message());
    } else if (item->done) {
      (void)kv_wire::write_frame(socket, FrameType::kDone, kv_wire::encode_done(*item->done));
      return;
    } else {
      (void)kv_wire::write_frame(socket, FrameType::kError, item->error.message());
      return;
    }
  }
}

}  // namespace koi::serve
