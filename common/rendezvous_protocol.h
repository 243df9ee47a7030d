// The HTTP key-value rendezvous of `horovodrun --gloo`, which collectiverun
// serves too (client/launcher/rendezvous_server.h) and through which the
// daemons form a job's Gloo contexts (daemon/gloo/http_store.h). Written
// once here so that the two sides cannot drift apart.
//
//   PUT    /<scope>/<key>  body = the value's bytes  -> 200
//   GET    /<scope>/<key>                            -> 200 + value, or 404
//   DELETE /<scope>/<key>                            -> 200 (see below)
//   a target that is not /<scope>/<key>              -> 400
//
// There is no long poll: a reader that needs a key not yet there asks again.
// DELETE is horovod's "finalize": in a scope whose size the server was told
// (horovod's host allocation plan: "global", "local_<host>",
// "cross_<local rank>"), the key names a rank that is done with the scope,
// and once every rank is done the scope's keys are dropped; in any other
// scope it deletes the key.
//
// Checked against horovod (github.com/horovod/horovod, master of 2026-06):
// horovod/runner/http/http_server.py (KVStoreHandler.do_GET and do_PUT,
// RendezvousHandler.do_DELETE, RendezvousHTTPServer._extract_scope_size),
// horovod/common/gloo/http_store.cc (HTTPStore::set, get, wait, CheckKeys,
// PerformHTTP, Finalize) and horovod/common/gloo/gloo_context.cc
// (Rendezvous, GlooContext::Initialize). horovod's server answers HTTP/1.0,
// one request per connection, with no body on errors, and needs a
// Content-Length on PUT; horovod's workers retry a failed request 3 times,
// 500 ms apart, and poll for missing keys every 10 ms.
//
// Our additions, which horovod's server neither needs nor checks:
// - a per-job secret: collectiverun's server, when given one, answers 403 to
//   any request whose kSecretHeader does not carry it;
// - keys and scopes travel percent-encoded (RFC 3986) so that any bytes are a
//   key; the server never decodes them, as horovod's does not, so clients
//   that encode alike meet on the same keys (Gloo's own keys need no
//   encoding and are sent as they are).
#pragma once

namespace collective::rendezvous {

// The request header that carries the job's secret.
inline constexpr char kSecretHeader[] = "X-Collective-Rendezvous-Secret";

}  // namespace collective::rendezvous
