#include "worker/grpc_link.h"

#include <utility>

#include "absl/status/status.h"
#include "worker/conversions.h"

namespace tandem::worker {
namespace {

// One Session call: a RouterLink carried by gRPC's reactor, which holds the link's first
// reference until OnDone.
class GrpcLinkReactor : public grpc::ServerBidiReactor<proto::SessionUp, proto::SessionDown>,
                        public RouterLink {
 public:
  GrpcLinkReactor(LinkServer* server, LegHandler* legs) : RouterLink(server, legs) {
    StartRead(&up_);
  }

  void OnReadDone(bool ok) override {
    if (!ok) {  // the router half-closed the stream or it broke: the link is over
      End(absl::OkStatus());
      return;
    }
    Handle(up_);
    up_.Clear();
    if (!ended()) StartRead(&up_);
  }
  void OnWriteDone(bool ok) override { Written(ok); }
  void OnCancel() override { End(absl::CancelledError("the router cancelled the session")); }
  void OnDone() override {
    Forget();
    Unref();
  }

 protected:
  void WriteBatch(const proto::SessionDown* batch) override { StartWrite(batch); }
  // The one place the link's status becomes a gRPC one.
  void Close(const absl::Status& status) override { Finish(ToGrpcStatus(status)); }

 private:
  proto::SessionUp up_;  // the read in flight (gRPC's reactions are serialized)
};

class RefusedGrpcLink : public grpc::ServerBidiReactor<proto::SessionUp, proto::SessionDown> {
 public:
  explicit RefusedGrpcLink(grpc::Status status) { Finish(std::move(status)); }
  void OnDone() override { delete this; }
};

}  // namespace

grpc::ServerBidiReactor<proto::SessionUp, proto::SessionDown>* ServeGrpcLink(LinkServer* server,
                                                                             LegHandler* legs) {
  auto* link = new GrpcLinkReactor(server, legs);
  server->Add(link);
  return link;
}

grpc::ServerBidiReactor<proto::SessionUp, proto::SessionDown>* RefuseGrpcLink(grpc::Status status) {
  return new RefusedGrpcLink(std::move(status));
}

}  // namespace tandem::worker
