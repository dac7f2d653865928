#include "cluster/control_plane/console.h"

#include <gtest/gtest.h>

namespace koi::cluster {
namespace {

TEST(ConsoleTest, ServesTheEmbeddedFiles) {
  ASSERT_EQ(console_files().size(), 3u);
  for (std::string_view path : {"/", "/console", "/console/", "/console/index.html"}) {
    const Reply r = console_reply(path);
    EXPECT_EQ(r.status, 200) << path;
    EXPECT_EQ(r.content_type, "text/html; charset=utf-8") << path;
    EXPECT_NE(r.body.find("<script src=\"/console/console.js\">"), std::string::npos) << path;
  }
  const Reply js = console_reply("/console/console.js");
  EXPECT_EQ(js.content_type, "text/javascript; charset=utf-8");
  EXPECT_NE(js.body.find("Authorization: 'Bearer '"), std::string::npos);
  EXPECT_EQ(console_reply("/console/console.css").content_type, "text/css; charset=utf-8");
}

TEST(ConsoleTest, AnUnknownFileIsA404ThatSaysWhereTheConsoleIs) {
  const Reply r = console_reply("/console/../cp.db");
  EXPECT_EQ(r.status, 404);
  EXPECT_NE(r.body.find("no console file ../cp.db; the console is at /console/"), std::string::npos);
}

}  // namespace
}  // namespace koi::cluster
