// CurveZMQ key files, public keys, allow lists and local endpoints.
#include "transport/curve.h"

#include <sys/stat.h>

#include <catch2/catch.hpp>

#include "tests/support/temp_dir.h"

using forktrial::testing::TempDir;
namespace transport = forktrial::transport;

namespace {

unsigned mode_of(const std::filesystem::path& path) {
  struct stat st {};
  REQUIRE(::stat(path.c_str(), &st) == 0);
  return st.st_mode & 0777;
}

bool mentions(const std::string& text, const std::string& part) {
  return text.find(part) != std::string::npos;
}

}  // namespace

TEST_CASE("a keypair file reads back, secret to its owner, its public half beside it",
          "[transport][curve]") {
  TempDir dir;
  const auto path = dir.path() / "node.key";
  const transport::Keypair keypair = transport::generate_keypair();
  CHECK(transport::is_z85_key(keypair.public_key));
  CHECK(transport::is_z85_key(keypair.secret_key));
  REQUIRE(transport::write_keypair(path, keypair, false));
  CHECK(mode_of(path) == 0600);
  CHECK(mode_of(dir.path() / "node.key.pub") == 0644);

  auto read = transport::read_keypair(path);
  REQUIRE(read);
  CHECK(read->public_key == keypair.public_key);
  CHECK(read->secret_key == keypair.secret_key);
  CHECK(transport::read_public_key((dir.path() / "node.key.pub").string()) == keypair.public_key);
  CHECK(transport::read_public_key(path.string()) == keypair.public_key);
  CHECK(transport::read_public_key(keypair.public_key) == keypair.public_key);
}

TEST_CASE("a keypair file is not overwritten unless asked", "[transport][curve]") {
  TempDir dir;
  const auto path = dir.path() / "node.key";
  REQUIRE(transport::write_keypair(path, transport::generate_keypair(), false));
  const auto again = transport::write_keypair(path, transport::generate_keypair(), false);
  REQUIRE_FALSE(again);
  CHECK(mentions(again.error().message, "exists; give --force"));
  const auto into_directory =
      transport::write_keypair(dir.path(), transport::generate_keypair(), true);
  REQUIRE_FALSE(into_directory);
  CHECK(mentions(into_directory.error().message,
                 "is a directory; give the path of a key file in it"));
  const transport::Keypair replacement = transport::generate_keypair();
  REQUIRE(transport::write_keypair(path, replacement, true));
  CHECK(transport::read_keypair(path)->secret_key == replacement.secret_key);
  CHECK(mode_of(path) == 0600);
}

TEST_CASE("a key file that is not a whole, matching keypair is refused, saying why",
          "[transport][curve]") {
  TempDir dir;
  const transport::Keypair a = transport::generate_keypair();
  const transport::Keypair b = transport::generate_keypair();
  const auto pub = dir.write("only.pub", "public-key = \"" + a.public_key + "\"\n");
  CHECK(mentions(transport::read_keypair(pub).error().message, "holds no secret-key"));
  const auto mixed = dir.write("mixed.key", "public-key = \"" + a.public_key +
                                                "\"\nsecret-key = \"" + b.secret_key + "\"\n");
  CHECK(
      mentions(transport::read_keypair(mixed).error().message, "is not the one of its secret-key"));
  const auto bad = dir.write("bad.key", "# a comment\nsecret-key = \"too short\"\n");
  CHECK(mentions(transport::read_keypair(bad).error().message,
                 "line 2: secret-key is not a Z85 key"));
  CHECK(
      mentions(transport::read_keypair(dir.path() / "missing.key").error().message, "cannot read"));
  const auto huge = dir.write("huge.key", std::string(100'000, 'x'));
  CHECK(mentions(transport::read_keypair(huge).error().message, "too large for a key file"));
  CHECK(mentions(transport::read_public_key("not a key").error().message,
                 "neither a Z85 public key"));
}

TEST_CASE("an allow list takes keys bare, commented or as public-key lines", "[transport][curve]") {
  TempDir dir;
  const transport::Keypair a = transport::generate_keypair();
  const transport::Keypair b = transport::generate_keypair();
  const transport::Keypair c = transport::generate_keypair();
  const auto workers =
      dir.write("workers.allow", "# the fleet\n\n" + a.public_key + "  worker-a\n" +
                                     "public-key = \"" + b.public_key + "\"\n");
  const auto clients = dir.write("clients.allow", c.public_key + "\n");
  transport::AllowList list;
  REQUIRE(transport::add_allow_list(list, workers, transport::Role::worker));
  REQUIRE(transport::add_allow_list(list, clients, transport::Role::client));
  CHECK(list.size() == 3);
  CHECK(list.at(a.public_key).role == transport::Role::worker);
  CHECK(list.at(a.public_key).worker_id.empty());  // "worker-a" is a comment
  CHECK(list.at(b.public_key).role == transport::Role::worker);
  CHECK(list.at(c.public_key).role == transport::Role::client);
  CHECK(transport::user_id_of(list.at(a.public_key), a.public_key) == "worker:" + a.public_key);
  // A client's messages carry its key; an administrator's say so.
  CHECK(transport::user_id_of(list.at(c.public_key), c.public_key) == "client:" + c.public_key);
  const transport::Keypair d = transport::generate_keypair();
  const auto admins = dir.write("admins.allow", c.public_key + "\n" + d.public_key + "\n");
  REQUIRE(transport::add_allow_list(list, admins, transport::Role::client, true));
  CHECK(list.at(c.public_key).admin);  // on both lists: an administrator
  CHECK(list.at(d.public_key) == transport::Admitted{transport::Role::client, "", true});
  CHECK(transport::user_id_of(list.at(d.public_key), d.public_key) ==
        "client:" + d.public_key + ":admin");
  CHECK_FALSE(list.at(a.public_key).admin);
}

TEST_CASE("a worker's key may be bound to one worker id", "[transport][curve]") {
  TempDir dir;
  const transport::Keypair a = transport::generate_keypair();
  const transport::Keypair b = transport::generate_keypair();
  transport::AllowList list;
  const auto bound = dir.write(
      "workers.allow", a.public_key + " worker-id=node-1  # rack 4\n" + b.public_key + "\n");
  REQUIRE(transport::add_allow_list(list, bound, transport::Role::worker));
  CHECK(list.at(a.public_key) == transport::Admitted{transport::Role::worker, "node-1", false});
  CHECK(transport::user_id_of(list.at(a.public_key), a.public_key) ==
        "worker:" + a.public_key + ":node-1");
  CHECK(transport::user_id_of(list.at(b.public_key), b.public_key) == "worker:" + b.public_key);
  CHECK(list.at(b.public_key).worker_id.empty());

  auto refused = [&](const std::string& text, transport::Role role) {
    transport::AllowList fresh = list;
    const auto file = dir.write("bad.allow", text);
    auto added = transport::add_allow_list(fresh, file, role);
    REQUIRE_FALSE(added);
    return added.error().message;
  };
  CHECK(mentions(refused(b.public_key + " worker-id=node-1\n", transport::Role::worker),
                 "worker id node-1 is bound to key " + a.public_key + " already"));
  CHECK(mentions(refused(b.public_key + " worker-id=\n", transport::Role::worker),
                 "worker-id= takes a plain id"));
  CHECK(mentions(refused(b.public_key + " worker-id=a/b\n", transport::Role::worker),
                 "worker-id= takes a plain id"));
  CHECK(mentions(refused(a.public_key + " worker-id=node-2\n", transport::Role::worker),
                 "listed again with another worker id"));
  const transport::Keypair c = transport::generate_keypair();
  CHECK(mentions(refused(c.public_key + " worker-id=x\n", transport::Role::client),
                 "worker-id= binds a worker's key"));
}

TEST_CASE("an allow list with a bad line, or a key in both roles, is refused",
          "[transport][curve]") {
  TempDir dir;
  const transport::Keypair a = transport::generate_keypair();
  transport::AllowList list;
  const auto bad = dir.write("bad.allow", a.public_key + "\n" + a.public_key + "x\n");
  const auto refused = transport::add_allow_list(list, bad, transport::Role::worker);
  REQUIRE_FALSE(refused);
  CHECK(mentions(refused.error().message, "line 2: not a public key"));

  transport::AllowList both;
  const auto listed = dir.write("a.allow", a.public_key + "\n");
  REQUIRE(transport::add_allow_list(both, listed, transport::Role::worker));
  const auto twice = transport::add_allow_list(both, listed, transport::Role::client);
  REQUIRE_FALSE(twice);
  CHECK(mentions(twice.error().message, "a worker's or a client's, not both"));
}

TEST_CASE("only endpoints this host alone can reach are local", "[transport][curve]") {
  for (const char* local : {"ipc:///run/ft.sock", "inproc://x", "tcp://127.0.0.1:7600",
                            "tcp://127.1.2.3:1", "tcp://localhost:7600", "tcp://[::1]:7600"}) {
    INFO(local);
    CHECK(transport::endpoint_is_local(local));
  }
  for (const char* open : {"tcp://0.0.0.0:7600", "tcp://*:7600", "tcp://10.0.0.5:7600",
                           "tcp://[::]:7600", "tcp://eth0:7600", "tcp://127.0.0.1;10.0.0.5:7600",
                           "udp://127.0.0.1:1", "tcp://localhost.example.com:7600"}) {
    INFO(open);
    CHECK_FALSE(transport::endpoint_is_local(open));
  }
}
