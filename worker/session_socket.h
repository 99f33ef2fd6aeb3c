// LinkSocketServer: the worker's session socket (proto/worker.proto): the router's
// SessionUp / SessionDown messages framed by length on plain TCP connections, served by the
// same RouterLink as rpc Session, without gRPC's HTTP/2 framing and callback threads.
//
//   ASSIGN_OR_RETURN(auto sockets, LinkSocketServer::Start("0.0.0.0", 0, &legs, secret,
//                                                            instance_id, "--session-port: "));
//   health.set_session_port(sockets->port());   // the router learns the port from Health
//   ...
//   sockets->CloseAll();                        // open links end, their legs are cancelled
//
// A connection starts with the worker's challenge ("tandem-session-v1 <random nonce>"); the
// router's first message must carry a cluster token for that challenge and this worker's
// instance id (`audience`; common/cluster_token.h) when the worker has a secret, so a token read
// off the wire, or relayed by another worker, opens no other connection. A
// refused token, a frame above 64 MiB (above 4 KiB before the first message authenticated the
// connection), bytes that are not a SessionUp, or no first message within 10 s end the link
// with a SessionDown naming the reason (`ended`) and close the connection. Connections that have
// not authenticated are capped (64 in all, 16 per source address; worker/session_preauth.h): one
// beyond the caps is closed at accept, before the challenge. Refusals are logged at most once a
// second, with the count of those left out.
// A router that closes its end, or a connection that breaks, ends the link: its live legs are
// cancelled.
//
// Threads: one I/O thread accepts, reads, and finishes writes the socket did not take at once;
// replies are written from the thread that produced them when the socket takes them whole.
// Thread-safe. `legs` must outlive the server.
#ifndef TANDEM_WORKER_SESSION_SOCKET_H_
#define TANDEM_WORKER_SESSION_SOCKET_H_

#include <memory>
#include <string>

#include "absl/status/statusor.h"
#include "common/frames.h"
#include "worker/session_server.h"

namespace tandem::worker {

class LinkSocketServer {
 public:
  // Listens on host:port (0: ephemeral). A port in use is UNAVAILABLE naming `port_flag`.
  // `audience` is the worker's instance id, which every token must name (ignored without a
  // secret).
  static absl::StatusOr<std::unique_ptr<LinkSocketServer>> Start(const std::string& host, int port,
                                                                 LegHandler* legs,
                                                                 std::string cluster_secret,
                                                                 std::string audience,
                                                                 const std::string& port_flag);
  // CloseAll(), then waits (at most 5 s) for the connections to close.
  ~LinkSocketServer();
  LinkSocketServer(const LinkSocketServer&) = delete;
  LinkSocketServer& operator=(const LinkSocketServer&) = delete;

  int port() const;
  // Connections accepted so far.
  int accepted() const;
  // Stops accepting and ends every open link ("the worker is stopping"). Idempotent.
  void CloseAll();

  struct Impl;  // the listening socket, its I/O thread and the connections (session_socket.cc)

 private:
  explicit LinkSocketServer(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

}  // namespace tandem::worker

#endif  // TANDEM_WORKER_SESSION_SOCKET_H_
