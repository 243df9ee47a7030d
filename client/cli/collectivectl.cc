// collectivectl: ask a collectived what it is doing.
//
//   collectivectl status [--json]     version, job, clients, pending tensors, totals
//   collectivectl health [--wait]     exit 0 only if the daemon answers and serves
#include <cstdio>
#include <cstdlib>
#include <iostream>
#include <memory>
#include <string>

#include <CLI/CLI.hpp>
#include <google/protobuf/util/json_util.h>
#include <grpcpp/grpcpp.h>

#include "client/cli/status_format.h"
#include "collective/build_config.h"
#include "collective/v1/collective.grpc.pb.h"

namespace {

std::string DefaultSocket() {
  const char* socket = std::getenv("COLLECTIVE_SOCKET");
  return socket != nullptr && *socket != '\0' ? socket : "/run/collectived/collectived.sock";
}

int Report(const grpc::Status& status, const std::string& socket) {
  const char* hint = status.error_code() == grpc::StatusCode::UNAVAILABLE
                         ? " (is collectived running? --socket or COLLECTIVE_SOCKET selects it)"
                         : "";
  std::fprintf(stderr, "collectivectl: %s: %s%s\n", socket.c_str(), status.error_message().c_str(),
               hint);
  return 1;
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"collectivectl: inspect a running collectived"};
  app.set_version_flag("--version", COLLECTIVE_VERSION);
  app.require_subcommand(1);
  std::string socket = DefaultSocket();
  double timeout_seconds = 5;
  app.add_option("--socket", socket,
                 "the daemon's socket (default: $COLLECTIVE_SOCKET or "
                 "/run/collectived/collectived.sock)");
  app.add_option("--timeout", timeout_seconds, "seconds to wait for an answer")
      ->check(CLI::PositiveNumber);
  bool json = false;
  CLI::App* status_command = app.add_subcommand("status", "what the daemon is doing");
  status_command->add_flag("--json", json, "print one JSON object instead of tables");
  CLI::App* health_command = app.add_subcommand("health", "exit 0 only if the daemon answers");
  bool wait = false;
  health_command->add_flag("--wait", wait,
                           "wait (up to --timeout) for the daemon to come up instead of failing "
                           "at once");
  CLI11_PARSE(app, argc, argv);

  auto channel = grpc::CreateChannel("unix:" + socket, grpc::InsecureChannelCredentials());
  auto stub = collective::v1::CollectiveService::NewStub(channel);
  grpc::ClientContext context;
  context.set_deadline(std::chrono::system_clock::now() +
                       std::chrono::milliseconds(static_cast<int64_t>(timeout_seconds * 1000)));

  if (*health_command) {
    context.set_wait_for_ready(wait);
    collective::v1::HealthResponse response;
    const grpc::Status status = stub->Health(&context, {}, &response);
    if (!status.ok()) return Report(status, socket);
    std::cout << (response.serving() ? "serving" : "not serving") << " (collectived "
              << response.version() << ")\n";
    return response.serving() ? 0 : 1;
  }
  if (*status_command) {
    collective::v1::StatusResponse response;
    const grpc::Status status = stub->Status(&context, {}, &response);
    if (!status.ok()) return Report(status, socket);
    if (json) {
      google::protobuf::util::JsonPrintOptions options;
      options.always_print_primitive_fields = true;
      options.preserve_proto_field_names = true;
      std::string text;
      if (!google::protobuf::util::MessageToJsonString(response, &text, options).ok()) {
        std::fprintf(stderr, "collectivectl: cannot print the status as JSON\n");
        return 1;
      }
      std::cout << text << "\n";
    } else {
      std::cout << collective::cli::FormatStatus(response);
    }
    return 0;
  }
  return 2;
}
