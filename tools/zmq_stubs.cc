// The functions of Kerberos's GSSAPI and of OpenPGM that libzmq's static
// archive refers to, for the statically linked front end
// (docs/decisions/0085-a-lean-front-end-for-the-client-commands.md).
//
// Debian builds libzmq with the GSSAPI security mechanism and the pgm://
// and epgm:// transports. Kerberos has no static archive, so linked
// statically the front end would still load its shared library and the
// six it needs; OpenPGM's initialization, which libzmq runs with every
// context, looks up the "pgm" protocol through NSS, which searches some
// forty paths for a module a static program cannot use anyway. forktrial
// speaks NULL or CURVE over tcp:// and ipc:// only:
//  - libzmq calls the GSSAPI functions only for a socket given the
//    ZMQ_GSSAPI_* options, which forktrial never sets, and refuses a peer
//    of another mechanism before calling any; each here fails as GSSAPI
//    does when a mechanism is unavailable;
//  - pgm_init and pgm_shutdown succeed doing nothing; pgm_getaddrinfo, the
//    first call of a pgm:// or epgm:// endpoint, fails as for an unknown
//    interface, so libzmq refuses the endpoint (EINVAL); the others are
//    never reached and fail.
#include <gssapi/gssapi.h>
#include <pgm/pgm.h>

namespace {

OM_uint32 refuse(OM_uint32* minor) {
  if (minor != nullptr) *minor = 0;
  return GSS_S_UNAVAILABLE;
}

// What pgm_getaddrinfo reports; never freed (pgm_error_free ignores it).
pgm_error_t no_pgm = {PGM_ERROR_DOMAIN_IF, PGM_ERROR_NODEV,
                      const_cast<char*>("PGM is not built into forktrial")};

}  // namespace

extern "C" {

gss_OID GSS_C_NT_USER_NAME = GSS_C_NO_OID;
gss_OID GSS_C_NT_HOSTBASED_SERVICE = GSS_C_NO_OID;

OM_uint32 gss_acquire_cred(OM_uint32* minor, gss_name_t, OM_uint32, gss_OID_set, gss_cred_usage_t,
                           gss_cred_id_t*, gss_OID_set*, OM_uint32*) {
  return refuse(minor);
}
OM_uint32 gss_release_cred(OM_uint32* minor, gss_cred_id_t*) {
  return refuse(minor);
}
OM_uint32 gss_init_sec_context(OM_uint32* minor, gss_cred_id_t, gss_ctx_id_t*, gss_name_t, gss_OID,
                               OM_uint32, OM_uint32, gss_channel_bindings_t, gss_buffer_t, gss_OID*,
                               gss_buffer_t, OM_uint32*, OM_uint32*) {
  return refuse(minor);
}
OM_uint32 gss_accept_sec_context(OM_uint32* minor, gss_ctx_id_t*, gss_cred_id_t, gss_buffer_t,
                                 gss_channel_bindings_t, gss_name_t*, gss_OID*, gss_buffer_t,
                                 OM_uint32*, OM_uint32*, gss_cred_id_t*) {
  return refuse(minor);
}
OM_uint32 gss_delete_sec_context(OM_uint32* minor, gss_ctx_id_t*, gss_buffer_t) {
  return refuse(minor);
}
OM_uint32 gss_import_name(OM_uint32* minor, gss_buffer_t, gss_OID, gss_name_t*) {
  return refuse(minor);
}
OM_uint32 gss_display_name(OM_uint32* minor, gss_name_t, gss_buffer_t, gss_OID*) {
  return refuse(minor);
}
OM_uint32 gss_release_name(OM_uint32* minor, gss_name_t*) {
  return refuse(minor);
}
OM_uint32 gss_release_buffer(OM_uint32* minor, gss_buffer_t) {
  return refuse(minor);
}
OM_uint32 gss_wrap(OM_uint32* minor, gss_ctx_id_t, int, gss_qop_t, gss_buffer_t, int*,
                   gss_buffer_t) {
  return refuse(minor);
}
OM_uint32 gss_unwrap(OM_uint32* minor, gss_ctx_id_t, gss_buffer_t, gss_buffer_t, int*, gss_qop_t*) {
  return refuse(minor);
}

bool pgm_init(pgm_error_t**) {
  return true;
}
bool pgm_shutdown() {
  return true;
}
bool pgm_getaddrinfo(const char*, const pgm_addrinfo_t*, pgm_addrinfo_t**, pgm_error_t** error) {
  if (error != nullptr) *error = &no_pgm;
  return false;
}
void pgm_freeaddrinfo(pgm_addrinfo_t*) {}
void pgm_error_free(pgm_error_t*) {}
void pgm_free(void*) {}
bool pgm_socket(pgm_sock_t**, const sa_family_t, const int, const int, pgm_error_t** error) {
  if (error != nullptr) *error = &no_pgm;
  return false;
}
bool pgm_bind3(pgm_sock_t*, const pgm_sockaddr_t*, const socklen_t, const pgm_interface_req_t*,
               const socklen_t, const pgm_interface_req_t*, const socklen_t, pgm_error_t** error) {
  if (error != nullptr) *error = &no_pgm;
  return false;
}
bool pgm_connect(pgm_sock_t*, pgm_error_t** error) {
  if (error != nullptr) *error = &no_pgm;
  return false;
}
bool pgm_close(pgm_sock_t*, bool) {
  return false;
}
bool pgm_setsockopt(pgm_sock_t*, const int, const int, const void*, const socklen_t) {
  return false;
}
bool pgm_getsockopt(pgm_sock_t*, const int, const int, void*, socklen_t*) {
  return false;
}
int pgm_send(pgm_sock_t*, const void*, const size_t, size_t*) {
  return PGM_IO_STATUS_ERROR;
}
int pgm_recvmsgv(pgm_sock_t*, pgm_msgv_t*, const size_t, const int, size_t*, pgm_error_t** error) {
  if (error != nullptr) *error = &no_pgm;
  return PGM_IO_STATUS_ERROR;
}
bool pgm_gsi_create_from_data(pgm_gsi_t*, const uint8_t*, const size_t) {
  return false;
}

}  // extern "C"
