// The KV transfer wire format (kv_wire.h): every frame decodes to what was encoded, over a
// real loopback socket, and malformed payloads are errors that say what was wrong.
#include "serve/kv_wire.h"

#include <gtest/gtest.h>

#include <thread>

#include <boost/asio/connect.hpp>
#include <boost/asio/io_context.hpp>

namespace koi::serve::kv_wire {
namespace {

namespace asio = boost::asio;
using tcp = asio::ip::tcp;

TEST(KvWire, HelloRequestAndDoneRoundTrip) {
  engine::KvLayout l;
  l.model_fingerprint = "xxh3:0123456789abcdef:42";
  l.block_size = 16;
  l.n_layers = 22;
  l.n_kv_heads = 4;
  l.head_dim = 64;
  l.windowed = "1010";
  l.window = 4096;
  auto hello = decode_hello(encode_hello(l));
  ASSERT_TRUE(hello.ok()) << hello.status().message();
  EXPECT_TRUE(engine::check_compatible(l, *hello).ok());
  EXPECT_EQ(hello->windowed, "1010");
  EXPECT_EQ(hello->window, 4096);
  // A peer that keeps every layer in one table is refused by name.
  engine::KvLayout one_table = l;
  one_table.windowed.clear();
  one_table.window = 0;
  EXPECT_EQ(engine::check_compatible(l, one_table).message(),
            "incompatible KV transfer peer: the sliding-window split is window 4096 on layers 1010 on the prefill "
            "worker but one table for every layer on the decode worker; serve the same model with the same koi "
            "release on both");

  PrefillRequest q;
  q.id = "cmpl-1-0";
  q.prompt = {1, 2, 3, 31999};
  q.cache_key = 0xfeedfacecafebeefull;
  q.skip_blocks = 3;
  q.params.temperature = 0.7f;
  q.params.top_k = 40;
  q.params.top_p = 0.9f;
  q.params.min_p = 0.05f;
  q.params.repetition_penalty = 1.1f;
  q.params.presence_penalty = 0.2f;
  q.params.frequency_penalty = 0.3f;
  q.params.logit_bias = {{5, -2.0f}, {7, 1.5f}};
  q.params.seed = 1234;
  q.params.logprobs = 2;
  auto back = decode_request(encode_request(q));
  ASSERT_TRUE(back.ok()) << back.status().message();
  EXPECT_EQ(back->id, q.id);
  EXPECT_EQ(back->prompt, q.prompt);
  EXPECT_EQ(back->cache_key, q.cache_key);
  EXPECT_EQ(back->skip_blocks, 3);
  EXPECT_EQ(back->params.top_k, 40);
  EXPECT_EQ(back->params.frequency_penalty, 0.3f);
  EXPECT_EQ(back->params.logit_bias, q.params.logit_bias);
  EXPECT_EQ(back->params.seed, std::optional<uint64_t>(1234));
  EXPECT_EQ(back->params.logprobs, 2);

  engine::PrefillResult r;
  r.first = {17, -0.25f, {{17, -0.25f}, {3, -1.5f}}};
  r.rng = {1, 2, 3, 0xffffffffffffffffull};
  auto done = decode_done(encode_done(r));
  ASSERT_TRUE(done.ok());
  EXPECT_EQ(done->first.token, 17);
  EXPECT_EQ(done->first.top_logprobs, r.first.top_logprobs);
  EXPECT_EQ(done->rng, r.rng);
}

TEST(KvWire, MalformedPayloadsAreErrorsThatSayWhat) {
  engine::KvLayout l;
  l.block_size = 16;
  std::string hello = encode_hello(l);
  EXPECT_EQ(decode_hello(hello.substr(0, hello.size() - 2)).status().message(),
            "malformed KV transfer HELLO frame (truncated)");
  EXPECT_EQ(decode_hello(hello + "x").status().message(), "malformed KV transfer HELLO frame (trailing bytes)");
  std::string other_version = hello;
  other_version[0] = 9;
  EXPECT_EQ(decode_hello(other_version).status().code(), StatusCode::kFailedPrecondition);
  // A version 1 HELLO (no sliding-window fields) is refused by its version, not as malformed.
  std::string v1 = hello.substr(0, hello.size() - 8);
  v1[0] = 1;
  EXPECT_EQ(decode_hello(v1).status().message(),
            "incompatible KV transfer peer: protocol version 2 on the prefill worker but 1 on the decode worker; run "
            "the same koi release on both");
  PrefillRequest q;
  q.prompt = {1, 2};
  std::string request = encode_request(q);
  request[4 + 0 + 8] = static_cast<char>(0xff);  // skip_blocks' low byte, after an empty id and the key
  request[4 + 0 + 8 + 3] = static_cast<char>(0xff);  // ... negative
  EXPECT_EQ(decode_request(request).status().message(), "KV transfer REQUEST skips a negative number of blocks");
  BlockView view;
  EXPECT_EQ(decode_block(std::string(12, '\0'), 16, &view).message(),
            "KV transfer BLOCK frame holds 12 bytes, expected 40 for this layout");
}

TEST(KvWire, FramesAndBlocksCrossASocket) {
  asio::io_context io;
  tcp::acceptor acceptor(io, tcp::endpoint(asio::ip::make_address("127.0.0.1"), 0));
  tcp::socket client(io), server(io);
  std::thread t([&] { acceptor.accept(server); });
  client.connect(acceptor.local_endpoint());
  t.join();
  const std::vector<std::byte> k = {std::byte{1}, std::byte{2}, std::byte{3}, std::byte{4}},
                               v = {std::byte{5}, std::byte{6}, std::byte{7}, std::byte{8}};
  ASSERT_TRUE(write_frame(client, FrameType::kAccept, "").ok());
  ASSERT_TRUE(write_block(client, 7, 3, k, v).ok());
  auto accept = read_frame(server);
  ASSERT_TRUE(accept.ok());
  EXPECT_EQ(accept->type, FrameType::kAccept);
  auto block = read_frame(server);
  ASSERT_TRUE(block.ok());
  EXPECT_EQ(block->type, FrameType::kBlock);
  BlockView view;
  ASSERT_TRUE(decode_block(block->payload, 4, &view).ok());
  EXPECT_EQ(view.block_idx, 7);
  EXPECT_EQ(view.layer, 3);
  EXPECT_EQ(view.k, k);
  EXPECT_EQ(view.v, v);
  client.close();
  auto eof = read_frame(server);
  EXPECT_EQ(eof.status().code(), StatusCode::kUnavailable);
  EXPECT_NE(eof.status().message().find("KV transfer connection failed while receiving"), std::string::npos);
}

}  // namespace
}  // namespace koi::serve::kv_wire
