// The HTTP statuses the proxy answers with, as the gRPC status codes docs/gateway.md lists.
#include <grpcpp/grpcpp.h>
#include <gtest/gtest.h>

#include "gateway/grpc_api.h"

namespace koi::gateway {
namespace {

TEST(GrpcApi, StatusCodesForHttp) {
  EXPECT_EQ(grpc_code_for_http(200), grpc::StatusCode::OK);
  EXPECT_EQ(grpc_code_for_http(400), grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_EQ(grpc_code_for_http(413), grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_EQ(grpc_code_for_http(401), grpc::StatusCode::UNAUTHENTICATED);
  EXPECT_EQ(grpc_code_for_http(403), grpc::StatusCode::PERMISSION_DENIED);
  EXPECT_EQ(grpc_code_for_http(404), grpc::StatusCode::NOT_FOUND);
  EXPECT_EQ(grpc_code_for_http(429), grpc::StatusCode::RESOURCE_EXHAUSTED);
  EXPECT_EQ(grpc_code_for_http(499), grpc::StatusCode::CANCELLED);
  for (int s : {500, 502, 503, 504}) EXPECT_EQ(grpc_code_for_http(s), grpc::StatusCode::UNAVAILABLE) << s;
  EXPECT_EQ(grpc_code_for_http(418), grpc::StatusCode::UNKNOWN);
}

}  // namespace
}  // namespace koi::gateway
