// CurveZMQ keys: keypairs and their files, public keys, allow lists.
//
// A keypair file holds both keys, Z85-encoded (40 characters each), and is
// written with mode 0600:
//
//     # forktrial CurveZMQ keypair: keep this file secret
//     public-key = "<40 characters>"
//     secret-key = "<40 characters>"
//
// Its public half, written beside it as `<file>.pub`, has the public-key line
// alone. An allow list holds one public key a line: the 40 characters
// (anything after them and whitespace is a comment) or a `public-key = "…"`
// line, so `cat *.pub > workers.allow` makes one. Blank lines and lines
// starting with '#' are skipped.
#pragma once

#include <expected>
#include <filesystem>
#include <map>
#include <string>

#include "base/error.h"

namespace zmq {
class socket_t;
}

namespace forktrial::transport {

// What a key may do at the coordinator: the ZAP handler hands it to the
// coordinator as the connection's User-Id.
enum class Role { worker, client };
std::string_view role_name(Role role);

struct Keypair {
  std::string public_key;  // Z85, 40 characters
  std::string secret_key;  // Z85, 40 characters
};

// A fresh keypair (libsodium through libzmq). Throws forktrial::Error when
// this libzmq has no CURVE support.
Keypair generate_keypair();

// Writes `path` (the keypair, mode 0600, created new: an existing file is an
// error unless `replace`) and `path.pub` (the public key). Errors say which
// file and why.
std::expected<void, Status> write_keypair(const std::filesystem::path& path, const Keypair& keypair,
                                          bool replace);

// Reads a keypair file; the error names the file and the line at fault.
std::expected<Keypair, Status> read_keypair(const std::filesystem::path& path);

// A public key given on the command line: 40 Z85 characters, or the path of a
// file holding one (a `.pub` file, or a keypair file, whose public half is
// taken).
std::expected<std::string, Status> read_public_key(const std::string& key_or_path);

// Whether `text` is a Z85-encoded 32-byte key (40 characters of Z85's
// alphabet, decoding to 32 bytes).
bool is_z85_key(std::string_view text);

// A worker's or client's CURVE credentials: its own keypair and the
// coordinator's public key.
struct ClientKeys {
  Keypair own;
  std::string server_public;
};

// What an admitted key may do: its role and, for a worker's key listed with
// `worker-id=NAME`, the one worker id it may join under (empty: any id not
// bound to another key).
struct Admitted {
  Role role = Role::client;
  std::string worker_id;
  // A client's key listed as an administrator's (--admin-clients): it may
  // cancel and read every job, not only those it submitted.
  bool admin = false;
  friend bool operator==(const Admitted&, const Admitted&) = default;
};

// The public keys admitted.
using AllowList = std::map<std::string, Admitted>;

// The ZAP user id of the admitted key `key` ("worker:<key>",
// "worker:<key>:NAME", "client:<key>", "client:<key>:admin"), which ZeroMQ
// attaches to every message of its connection: a client's messages carry
// its key, which owns the jobs it submits; a worker's, the key the
// coordinator holds to account for its hellos.
std::string user_id_of(const Admitted& admitted, std::string_view key);

// Adds the keys of the allow-list file `path` with `role` to `list`: one key
// a line (or `public-key = "..."`, as a .pub file holds it), then, for a
// worker's key, optionally `worker-id=NAME`; other words after the key are
// comments. A key listed with both roles, a worker id bound to two keys, or
// a worker-id= on a client's list is an error. With `admin` (a list of
// administrators' keys, Role::client), each key is a client's that may act
// on every job; a key on the clients' list too is an administrator.
std::expected<void, Status> add_allow_list(AllowList& list, const std::filesystem::path& path,
                                           Role role, bool admin = false);

// Socket options, set before bind/connect: the coordinator's socket serves
// CURVE with `own` and asks the ZAP handler about every peer (domain
// "forktrial"); a worker's or client's socket authenticates as `own` to the
// server whose public key is `server_public`.
void make_curve_server(zmq::socket_t& socket, const Keypair& own);
void make_curve_client(zmq::socket_t& socket, const ClientKeys& keys);

// Whether a ZeroMQ endpoint can be reached from this host only: ipc://,
// inproc://, and tcp:// on a loopback address (127.0.0.0/8, ::1, localhost).
bool endpoint_is_local(std::string_view endpoint);

}  // namespace forktrial::transport
