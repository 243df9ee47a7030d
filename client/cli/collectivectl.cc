// collectivectl: ask a collectived what it is doing.
//
//   collectivectl status [--job ID] [--json]  version, jobs, clients, pending tensors, totals
//   collectivectl health [--wait]     exit 0 only if the daemon answers and serves
//   collectivectl timeline start [--job ID] FILE [--mark-cycles] | stop [--job ID]
//                                     record the daemon's work (or one job's) as a
//                                     Chrome trace
//   collectivectl metrics             counters, histograms and gauges (Prometheus text)
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <iostream>
#include <memory>
#include <string>
#include <system_error>

#include <CLI/CLI.hpp>
#include <google/protobuf/util/json_util.h>
#include <grpcpp/grpcpp.h>

#include "client/cli/status_format.h"
#include "client/socket_access.h"
#include "collective/build_config.h"
#include "collective/v1/collective.grpc.pb.h"

namespace {

std::string DefaultSocket() {
  const char* socket = std::getenv("COLLECTIVE_SOCKET");
  return socket != nullptr && *socket != '\0' ? socket : "/run/collectived/collectived.sock";
}

// A refusal by the daemon's policy (PERMISSION_DENIED) carries its own
// advice: who was refused, why, and how to be admitted.
int Report(const grpc::Status& status, const std::string& socket) {
  const char* hint = status.error_code() == grpc::StatusCode::UNAVAILABLE
                         ? " (is collectived running? --socket or COLLECTIVE_SOCKET selects it)"
                         : "";
  std::fprintf(stderr, "collectivectl: %s: %s%s\n", socket.c_str(), status.error_message().c_str(),
               hint);
  return 1;
}

// The daemon resolves the path in its own working directory, which means
// nothing here; so it only takes absolute paths, made here from ours.
bool MakeAbsolute(std::string& path) {
  std::error_code error;
  const std::filesystem::path absolute = std::filesystem::absolute(path, error);
  if (error) {
    std::fprintf(stderr, "collectivectl: cannot make %s absolute: %s\n", path.c_str(),
                 error.message().c_str());
    return false;
  }
  path = absolute.string();
  return true;
}

// `job`: the job whose own timeline it is; empty: the daemon's.
void PrintTimeline(const collective::v1::TimelineResponse& response, const std::string& job) {
  const std::string whose = job.empty() ? "timeline" : "timeline of job '" + job + "'";
  if (response.active()) {
    std::cout << whose << " recording to " << response.path() << " (" << response.events_written()
              << " events written so far)\n";
  } else if (!response.path().empty()) {
    std::cout << whose << " stopped: " << response.events_written() << " events written to "
              << response.path() << "\n";
  } else {
    std::cout << whose << " not recording\n";
  }
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
  std::string job_id;
  status_command->add_option("--job", job_id, "only this job (its id, COLLECTIVE_JOB_ID)");
  CLI::App* health_command = app.add_subcommand("health", "exit 0 only if the daemon answers");
  bool wait = false;
  health_command->add_flag("--wait", wait,
                           "wait (up to --timeout) for the daemon to come up instead of failing "
                           "at once");
  CLI::App* timeline_command =
      app.add_subcommand("timeline", "record what the daemon does as a Chrome trace (JSON)");
  timeline_command->require_subcommand(1);
  CLI::App* timeline_start = timeline_command->add_subcommand(
      "start", "start recording into FILE (created or truncated with your own permissions)");
  std::string timeline_file;
  bool mark_cycles = false;
  timeline_start->add_option("FILE", timeline_file, "the trace file to write")->required();
  timeline_start->add_flag("--mark-cycles", mark_cycles, "also mark every cycle of the engine");
  std::string timeline_job;
  timeline_start->add_option("--job", timeline_job,
                             "record this job alone (its id, COLLECTIVE_JOB_ID) in a timeline of "
                             "its own, which ends with the job");
  CLI::App* timeline_stop =
      timeline_command->add_subcommand("stop", "stop recording and complete the file");
  timeline_stop->add_option("--job", timeline_job,
                            "stop the timeline of this job (started with start --job)");
  CLI::App* metrics_command = app.add_subcommand(
      "metrics",
      "print the daemon's counters, histograms and gauges in Prometheus' text format (what "
      "metrics_listen serves over HTTP)");
  CLI11_PARSE(app, argc, argv);

  // A socket closed to this user would read as "Permission denied" from
  // gRPC, or (health --wait) as a timeout: say which group to join instead.
  if (const absl::Status access = collective::internal::CheckSocketAccess(socket); !access.ok()) {
    std::fprintf(stderr, "collectivectl: %s\n", std::string(access.message()).c_str());
    return 1;
  }
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
  if (*timeline_command) {
    collective::v1::TimelineRequest request;
    request.set_job_id(timeline_job);
    if (*timeline_start) {
      if (!MakeAbsolute(timeline_file)) return 1;
      request.set_action(collective::v1::TimelineRequest::ACTION_START);
      request.set_path(timeline_file);
      request.set_mark_cycles(mark_cycles);
    } else if (*timeline_stop) {
      request.set_action(collective::v1::TimelineRequest::ACTION_STOP);
    }
    collective::v1::TimelineResponse response;
    const grpc::Status status = stub->Timeline(&context, request, &response);
    if (!status.ok()) return Report(status, socket);
    PrintTimeline(response, timeline_job);
    return 0;
  }
  if (*metrics_command) {
    collective::v1::MetricsResponse response;
    const grpc::Status status = stub->Metrics(&context, {}, &response);
    if (!status.ok()) return Report(status, socket);
    std::cout << response.text();
    return 0;
  }
  if (*status_command) {
    collective::v1::StatusResponse response;
    collective::v1::StatusRequest request;
    request.set_job_id(job_id);
    const grpc::Status status = stub->Status(&context, request, &response);
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
