#include "client/launcher/launcher_options.h"

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <memory>
#include <sstream>
#include <system_error>
#include <tuple>

#include <wordexp.h>

#include <CLI/CLI.hpp>

#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "client/launcher/horovodrun_flags.h"
#include "client/launcher/host_discovery.h"
#include "collective/build_config.h"

namespace collective::launcher {
namespace {

constexpr int kMaxRanks = 1024;

constexpr char kDescription[] =
    "collectiverun: start the ranks of a job on this node (or on the hosts -H lists), each told\n"
    "where it stands and where its collectived listens, with private collectiveds for the job\n"
    "unless one is configured.\n";

constexpr char kFooter[] =
    R"(Without --socket or COLLECTIVE_SOCKET, a private collectived is started on a
socket in a fresh temporary directory and stopped when the job ends.

Each rank gets COLLECTIVE_SOCKET, COLLECTIVE_JOB_ID, COLLECTIVE_LOCAL_RANK and
COLLECTIVE_LOCAL_SIZE, and HOROVOD_RANK, HOROVOD_SIZE, HOROVOD_LOCAL_RANK,
HOROVOD_LOCAL_SIZE, RANK, WORLD_SIZE, LOCAL_RANK, LOCAL_WORLD_SIZE (one node:
rank = local rank). Its stdin is /dev/null; each line it writes appears as
"[RANK] line" on the same stream. SIGINT, SIGTERM and SIGHUP are forwarded to
the ranks. When a rank fails, the others are stopped (SIGTERM, then SIGKILL
after --grace-seconds).

With --elastic, or as in horovodrun --min-np or a discovery script
(collective.torch.elastic, collective.tensorflow.elastic), a
rank that fails is not fatal while --min-np ranks remain: the others re-form
the job without it, renumbered (docs/elastic.md); --restart-failed N starts a new worker in place
of each of the first N that fail, and SIGUSR1 to collectiverun adds one, up
to --max-np; --reset-limit N stops the job instead of re-forming it a
(N+1)-th time. --host-discovery-script PATH (Horovod's; implies --elastic)
runs PATH every second and grows or shrinks the job to the slots it lists,
lines "host[:slots]" (each host a node with a collectived of its own: a
stand-in node for this machine, another machine over ssh); a worker that
fails blacklists its host, as horovodrun does (for good, or for
--blacklist-cooldown-range MIN MAX), and the job stops once every host it
runs on is blacklisted. An elastic job on
-H's or --hostfile's hosts runs as on a script that always lists them. The
exit status is then 0 when every rank that
did not fail exited 0.

Exit status: 0 when every rank exited 0; else the first failed rank's exit
code (128+N for signal N), 128+N after forwarding signal N, 127 when the
command does not exist (126: cannot be executed), 1 when the daemon fails, 2
for a usage error.

Hosts: each host -H/--hosts or --hostfile names is a node with a
collectived of its own. Hosts of this machine (localhost, 127.0.0.2, its
name) are stand-in nodes. When some are other machines, collectiverun runs
the job as horovodrun does through mpirun: Open MPI's launcher (ssh, or
what OMPI_MCA_plm_rsh_agent says) starts a collectived on each host, then
the ranks, with the variables of this environment exported; collectived and
the command must be at the same paths there. An elastic job (and a host
discovery script) reaches other machines over ssh itself, starting each
worker there on its own (docs/elastic.md).

Example: collectiverun -np 4 python -u train.py --epochs 10)";

class UsageFormatter : public CLI::Formatter {
 public:
  std::string make_usage(const CLI::App*, std::string) const override {
    return "Usage: collectiverun -np N [OPTIONS] [--] COMMAND [ARGS...]\n";
  }
};

// CLI11 knows no single-dash long options: `-np` becomes `--np`, but only
// among the launcher's own arguments, never in the command.
void TranslateMpiStyleFlags(const CLI::App& app, std::vector<std::string>& args) {
  for (size_t i = 1; i < args.size(); ++i) {
    std::string& arg = args[i];
    if (arg == "--" || !absl::StartsWith(arg, "-") || arg == "-") return;  // the command
    if (arg == "-np" || absl::StartsWith(arg, "-np=") || arg == "-hostfile" ||
        absl::StartsWith(arg, "-hostfile=")) {
      arg.insert(0, "-");
    }
    // horovodrun's single-dash long options.
    if (arg == "-cb") arg = "--check-build";
    if (arg == "-prefix-timestamp") arg = "--prefix-output-with-timestamp";
    if (absl::StrContains(arg, '=') || (arg.size() > 2 && arg[1] != '-')) continue;  // -n4
    const CLI::Option* option = app.get_option_no_throw(arg);
    if (option != nullptr && option->get_items_expected_min() > 0) ++i;  // skip its value
  }
}

// `text` split into words as the shell splits them (quotes, backslashes),
// by wordexp(3) with command substitution refused.
absl::StatusOr<std::vector<std::string>> ShellWords(const std::string& text) {
  wordexp_t words{};
  const int error = ::wordexp(text.c_str(), &words, WRDE_NOCMD);
  if (error != 0) {
    if (error == WRDE_NOSPACE) ::wordfree(&words);
    return absl::InvalidArgumentError(
        absl::StrCat("cannot split '", text, "' into words",
                     error == WRDE_CMDSUB ? " (command substitution is not run)"
                     : error == WRDE_BADCHAR
                         ? " (a character such as | & ; < > ( ) { } or a newline is not quoted)"
                         : ""));
  }
  std::vector<std::string> split(words.we_wordv, words.we_wordv + words.we_wordc);
  ::wordfree(&words);
  return split;
}

// horovodrun's -H and --hostfile: hosts of this machine, with slots enough
// for -np, into options.hosts.
absl::Status CheckHostList(const std::string& hosts, const std::string& hostfile,
                           LauncherOptions& options) {
  if (hosts.empty() && hostfile.empty()) return absl::OkStatus();
  if (!hosts.empty() + !hostfile.empty() + !options.host_discovery_script.empty() > 1) {
    return absl::InvalidArgumentError(
        "-H, --hostfile and --host-discovery-script exclude each other, as in horovodrun");
  }
  absl::StatusOr<std::vector<DiscoveredHost>> listed;
  if (!hosts.empty()) {
    listed = ParseHostsOption(hosts);
  } else {
    std::ifstream file(hostfile);
    if (!file) {
      return absl::InvalidArgumentError(absl::StrCat("cannot read the hostfile ", hostfile));
    }
    std::stringstream text;
    text << file.rdbuf();
    listed = ParseHostfile(text.str());
  }
  if (!listed.ok()) return listed.status();
  options.hosts = MergeHosts(*listed);
  if (options.ranks > TotalSlots(options.hosts)) {
    return absl::InvalidArgumentError(absl::StrCat("-np ", options.ranks, " is more than the ",
                                                   TotalSlots(options.hosts),
                                                   " slots the hosts list"));
  }
  options.hosts_source = hosts.empty() ? "the hostfile" : "-H";
  return absl::OkStatus();
}

// horovodrun's set of interfaces: every one named by the flags, each once,
// in the order first given (horovodrun keeps a set), comma-separated.
std::string UnionOfInterfaces(const std::vector<std::string>& given) {
  std::vector<std::string> interfaces;
  for (const std::string& list : given) {
    for (absl::string_view name : absl::StrSplit(list, ',', absl::SkipEmpty())) {
      if (std::find(interfaces.begin(), interfaces.end(), name) == interfaces.end()) {
        interfaces.emplace_back(name);
      }
    }
  }
  return absl::StrJoin(interfaces, ",");
}

}  // namespace

std::variant<LauncherOptions, int> ParseLauncherOptions(std::vector<std::string> args,
                                                        std::ostream& out, std::ostream& err) {
  LauncherOptions options;
  CLI::App app{kDescription, "collectiverun"};
  app.formatter(std::make_shared<UsageFormatter>());
  app.footer(kFooter);
  // The first argument that is not ours starts the command; the rest is its.
  app.prefix_command();
  app.set_version_flag("-v,--version", COLLECTIVE_VERSION);  // horovodrun takes -v too
  CLI::Option* ranks =
      app.add_option("-n,--np,--num-proc", options.ranks,
                     "ranks to start on this node, 1 to 1024 (mpirun's -np N works too)")
          ->type_name("N")
          ->required()
          ->check(CLI::Range(1, kMaxRanks).description(""));
  app.add_flag("--check-build", options.check_build,
               "say which frameworks, controllers and tensor operations this installation "
               "offers, as horovodrun --check-build (-cb works too), and exit");
  app.add_option("--socket", options.socket,
                 "the collectived to use (default: $COLLECTIVE_SOCKET; none: start a private one)")
      ->type_name("PATH");
  app.add_option("--daemon", options.daemon,
                 "the collectived to start (default: next to collectiverun, else on PATH)")
      ->type_name("PATH");
  app.add_option("--daemon-arg", options.daemon_args,
                 "a flag for the private collectived, e.g. --daemon-arg=--log-level=debug")
      ->type_name("FLAG")
      ->allow_extra_args(false);
  app.add_option("--job-id", options.job_id,
                 "the job id (default: $COLLECTIVE_JOB_ID, else a fresh one per launch)")
      ->type_name("ID");
  bool no_prefix = false;
  app.add_flag("--no-prefix", no_prefix,
               "pass the ranks' output through, without \"[RANK] \" before each line");
  app.add_flag("--prefix-output-with-timestamp", options.prefix_timestamp,
               "start each line of the ranks' output with the time (horovodrun's; "
               "-prefix-timestamp works too)");
  app.add_option("--output-filename", options.output_directory,
                 "also write each rank's stdout and stderr to DIR/rank.<N>/stdout and stderr "
                 "(horovodrun's; N padded with zeros)")
      ->type_name("DIR");
  app.add_option("--grace-seconds", options.grace_seconds,
                 "seconds from SIGTERM to SIGKILL for ranks being stopped")
      ->type_name("S")
      ->capture_default_str()
      ->check(CLI::Range(0.0, 3600.0).description(""));
  app.add_flag("--verbose", options.verbose,
               "report the daemon, each rank's pid and exit; the private daemon logs at info");

  app.add_flag("--elastic", options.elastic,
               "elastic training: a failed rank is not fatal while --min-np remain; the job "
               "re-forms without it");
  app.add_option("--min-np,--min-num-proc", options.min_ranks,
                 "elastic training (as horovodrun, it implies --elastic): fewer ranks than this "
                 "stop the job (default: -np)")
      ->type_name("N")
      ->check(CLI::Range(1, kMaxRanks).description(""));
  app.add_option("--max-np,--max-num-proc", options.max_ranks,
                 "with --elastic: at most this many ranks at a time (default: -np)")
      ->type_name("N")
      ->check(CLI::Range(1, kMaxRanks).description(""));
  app.add_option("--restart-failed", options.restarts,
                 "with --elastic: replace each of the first N ranks that fail by a new one")
      ->type_name("N")
      ->check(CLI::Range(0, 1000000).description(""));
  app.add_option("--reset-limit", options.reset_limit,
                 "with --elastic: stop the job rather than re-form it more than N times "
                 "(Horovod's --reset-limit; default: no limit)")
      ->type_name("N")
      ->check(CLI::Range(0, 1000000).description(""));

  std::string hosts;
  std::string hostfile;
  app.add_option("-H,--hosts", hosts,
                 "horovodrun's host list, 'host:slots,...', with at least -np slots: each "
                 "host a node (of this machine: a stand-in node; others are reached through "
                 "mpirun)")
      ->type_name("HOSTS");
  app.add_option("--hostfile", hostfile,
                 "horovodrun's host file, lines '<hostname> slots=<slots>', as -H (-hostfile works "
                 "too)")
      ->type_name("PATH");
  app.add_option("--host-discovery-script", options.host_discovery_script,
                 "elastic training on the hosts and slots this script lists (lines "
                 "'host[:slots]', each host a node: this machine's stand-in, or another "
                 "machine over ssh), run every second; implies --elastic")
      ->type_name("PATH");
  app.add_option("--slots-per-host,--slots", options.slots_per_host,
                 "with --host-discovery-script: the slots of a host listed without ':slots' "
                 "(default: 1)")
      ->type_name("N")
      ->check(CLI::Range(1, kMaxRanks).description(""));
  app.add_option("--elastic-timeout", options.elastic_timeout_seconds,
                 "with --host-discovery-script: how long to wait for --min-np slots (default: "
                 "$HOROVOD_ELASTIC_TIMEOUT, else 600)")
      ->type_name("S")
      ->check(CLI::Range(1, 1000000).description(""));

  std::pair<int, int> cooldown;
  app.add_option("--blacklist-cooldown-range", cooldown,
                 "with listed hosts (--host-discovery-script, or -H/--hostfile in an elastic "
                 "job): a blacklisted host (one whose worker failed) comes back after a "
                 "cooldown of MIN to MAX seconds that doubles each time (horovodrun's; "
                 "default: it stays out)")
      ->type_name("MIN MAX");

  std::string mpi_args;
  const std::string machines = "Across machines (horovodrun's; for the mpirun commands)";
  app.add_option("-p,--ssh-port", options.ssh_port, "the hosts' ssh port")
      ->group(machines)
      ->type_name("PORT")
      ->check(CLI::Range(1, 65535).description(""));
  app.add_option("-i,--ssh-identity-file", options.ssh_identity_file,
                 "the private key ssh logs in with")
      ->group(machines)
      ->type_name("FILE");
  // As horovodrun's: either flag, given any number of times, each with one
  // interface or a comma-separated list; the union is used.
  std::vector<std::string> network_interfaces;
  app.add_option("--network-interfaces,--network-interface", network_interfaces,
                 "the interfaces the daemons talk over, e.g. eth0,eth1, or the flag once per "
                 "interface (MPI's TCP and NCCL's sockets)")
      ->group(machines)
      ->type_name("NICS")
      ->multi_option_policy(CLI::MultiOptionPolicy::TakeAll)
      ->allow_extra_args(false);  // one value a flag: the command may follow
  app.add_option("--start-timeout", options.start_timeout_seconds,
                 "how long a rank waits for its host's daemon (default: "
                 "$HOROVOD_START_TIMEOUT, else 60)")
      ->group(machines)
      ->type_name("S")
      ->check(CLI::Range(1, 86400).description(""));
  std::string binding_args;
  app.add_option("--binding-args", binding_args,
                 "mpirun's binding for the ranks, in place of --bind-to none, e.g. "
                 "--binding-args=\"--bind-to core --map-by core\"")
      ->group(machines)
      ->type_name("ARGS");
  app.add_option("--mpi-args", mpi_args,
                 "more arguments for mpirun, e.g. --mpi-args=\"--mca btl_tcp_links 2\"")
      ->group(machines)
      ->type_name("ARGS");

  HorovodrunFlags horovodrun;
  horovodrun.AddTo(app);

  TranslateMpiStyleFlags(app, args);
  // The report needs no job; whether the flag was collectiverun's (and not
  // the command's) is known after parsing.
  const bool asks_check_build = std::find(args.begin(), args.end(), "--check-build") != args.end();
  if (asks_check_build) ranks->required(false);
  std::vector<const char*> argv;
  for (const std::string& arg : args) argv.push_back(arg.c_str());
  try {
    app.parse(static_cast<int>(argv.size()), argv.data());
  } catch (const CLI::ParseError& error) {
    return app.exit(error, out, err) == 0 ? 0 : 2;
  }
  if (options.check_build) return options;
  if (asks_check_build && options.ranks == 0) {
    err << "--np is required\nRun with --help for more information.\n";
    return 2;
  }
  options.prefix_output = !no_prefix;
  for (auto [flag, text, words] :
       {std::tuple{"--mpi-args", &mpi_args, &options.mpi_args},
        std::tuple{"--binding-args", &binding_args, &options.binding_args}}) {
    if (text->empty()) continue;
    absl::StatusOr<std::vector<std::string>> split = ShellWords(*text);
    if (!split.ok()) {
      err << "collectiverun: " << flag << ": " << split.status().message() << "\n";
      return 2;
    }
    *words = std::move(*split);
  }
  if (absl::Status listed = CheckHostList(hosts, hostfile, options); !listed.ok()) {
    err << "collectiverun: " << listed.message() << "\n";
    return 2;
  }
  const bool discovery = !options.host_discovery_script.empty();
  // As horovodrun: a discovery script, or --min-np, makes the job elastic.
  if (discovery || options.min_ranks != 0) options.elastic = true;
  const bool listed_hosts = OnListedHosts(options);
  if (!discovery && app.count("--slots-per-host") > 0) {
    err << "collectiverun: --slots-per-host needs --host-discovery-script\n"
        << "Run with --help for more information.\n";
    return 2;
  }
  if (!listed_hosts && options.elastic_timeout_seconds != 0) {
    err << "collectiverun: --elastic-timeout needs --host-discovery-script, or --elastic with "
           "-H or --hostfile\n"
        << "Run with --help for more information.\n";
    return 2;
  }
  if (!listed_hosts && app.count("--blacklist-cooldown-range") > 0) {
    err << "collectiverun: --blacklist-cooldown-range needs --host-discovery-script, or "
           "--elastic with -H or --hostfile\n"
        << "Run with --help for more information.\n";
    return 2;
  }
  if (listed_hosts && options.restarts != 0) {
    // A worker that fails blacklists its host, as in horovodrun: the
    // other hosts take its slots, not a replacement on that host.
    err << "collectiverun: --restart-failed does not go with --host-discovery-script, -H or "
           "--hostfile: a failed worker's host is blacklisted, and the other hosts listed "
           "take its place\n"
        << "Run with --help for more information.\n";
    return 2;
  }
  if (app.count("--blacklist-cooldown-range") > 0) {
    options.blacklist_cooldown =
        CooldownRange{.min_seconds = cooldown.first, .max_seconds = cooldown.second};
    if (absl::Status range = CheckCooldownRange(*options.blacklist_cooldown); !range.ok()) {
      err << "collectiverun: --blacklist-cooldown-range: " << range.message() << "\n";
      return 2;
    }
  }
  absl::StatusOr<std::map<std::string, std::string>> variables = horovodrun.Variables();
  if (!variables.ok()) {
    err << "collectiverun: " << variables.status().message() << "\n";
    return 2;
  }
  options.horovod_variables = std::move(*variables);
  for (const std::string& note : horovodrun.Notes()) err << "collectiverun: " << note << "\n";
  options.network_interfaces = UnionOfInterfaces(network_interfaces);
  if (!options.elastic &&
      (options.max_ranks != 0 || options.restarts != 0 || options.reset_limit >= 0)) {
    err << "collectiverun: --max-np, --restart-failed and --reset-limit need --elastic (or "
           "--min-np, or a host discovery script)\n"
        << "Run with --help for more information.\n";
    return 2;
  }
  if (options.elastic) {
    // Horovod's defaults for --min-np; --max-np is bounded on one node.
    if (options.min_ranks == 0) options.min_ranks = options.ranks;
    // With listed hosts, as many as they offer (Horovod: unbounded).
    if (options.max_ranks == 0) options.max_ranks = listed_hosts ? kMaxRanks : options.ranks;
    if (options.min_ranks > options.ranks || options.ranks > options.max_ranks) {
      err << "collectiverun: --elastic needs --min-np <= -np <= --max-np, but they are "
          << options.min_ranks << ", " << options.ranks << " and " << options.max_ranks << "\n";
      return 2;
    }
  }
  options.command = app.remaining();
  const bool separated = !options.command.empty() && options.command.front() == "--";
  if (separated) options.command.erase(options.command.begin());
  if (options.command.empty()) {
    err << "collectiverun: no command given\nRun with --help for more information.\n";
    return 2;
  }
  if (!separated && absl::StartsWith(options.command.front(), "-")) {
    err << "collectiverun: unknown option " << options.command.front()
        << " (put -- before a command that starts with '-')\n"
        << "Run with --help for more information.\n";
    return 2;
  }
  return options;
}

bool OnOtherMachines(const LauncherOptions& options) {
  return std::any_of(options.hosts.begin(), options.hosts.end(),
                     [](const DiscoveredHost& host) { return !IsThisMachine(host.name); });
}

bool OnListedHosts(const LauncherOptions& options) {
  return !options.host_discovery_script.empty() || (options.elastic && !options.hosts.empty());
}

absl::Status ApplyEnvironment(const Environment& environment, LauncherOptions& options) {
  const auto value = [&](const char* name) -> std::string {
    const auto it = environment.find(name);
    return it == environment.end() ? "" : it->second;
  };
  for (const char* mpi : {"OMPI_COMM_WORLD_SIZE", "PMIX_RANK", "PMI_SIZE"}) {
    if (!value(mpi).empty()) {
      return absl::FailedPreconditionError(absl::StrCat(
          mpi,
          " is set: collectiverun is not itself started by mpirun or srun. For a job across "
          "machines, give collectiverun their hosts (-H or --hostfile), or start one "
          "collectived per node and the ranks with mpirun or srun (docs/launching.md)."));
    }
  }
  if (options.socket.empty()) options.socket = value("COLLECTIVE_SOCKET");
  if (!options.socket.empty() && OnOtherMachines(options)) {
    return absl::InvalidArgumentError(absl::StrCat(
        "the job uses the collectived on ", options.socket,
        " (--socket or COLLECTIVE_SOCKET), a daemon of this machine, but ", options.hosts_source,
        " lists hosts on other machines, where collectiverun starts a collectived of its own "
        "on each"));
  }
  if (!options.socket.empty()) {
    if (!options.daemon.empty() || !options.daemon_args.empty()) {
      return absl::InvalidArgumentError(absl::StrCat(
          "--daemon and --daemon-arg are for a private daemon, but the job uses the collectived "
          "on ",
          options.socket, " (--socket or COLLECTIVE_SOCKET)"));
    }
    if (!options.horovod_variables.empty()) {
      std::vector<std::string> names;
      for (const auto& variable : options.horovod_variables) names.push_back(variable.first);
      return absl::InvalidArgumentError(absl::StrCat(
          "horovodrun's tuning flags set the private daemon's ", absl::StrJoin(names, ", "),
          ", but the job uses the collectived on ", options.socket,
          " (--socket or COLLECTIVE_SOCKET), which keeps its own configuration"));
    }
    // The ranks may change directory; the socket must not move with them.
    std::error_code error;
    const std::filesystem::path absolute = std::filesystem::absolute(options.socket, error);
    if (error) {
      return absl::InvalidArgumentError(
          absl::StrCat("cannot make ", options.socket, " absolute: ", error.message()));
    }
    options.socket = absolute.string();
  }
  for (const std::string& arg : options.daemon_args) {
    if (arg == "--socket" || absl::StartsWith(arg, "--socket=")) {
      return absl::InvalidArgumentError(
          "--daemon-arg cannot move the private daemon's socket; use --socket PATH to run the "
          "job on a collectived of your own");
    }
  }
  if (options.job_id.empty()) options.job_id = value("COLLECTIVE_JOB_ID");
  if (options.start_timeout_seconds == 0) {
    if (const std::string timeout = value("HOROVOD_START_TIMEOUT"); !timeout.empty()) {
      if (!absl::SimpleAtoi(timeout, &options.start_timeout_seconds) ||
          options.start_timeout_seconds < 1) {
        return absl::InvalidArgumentError(absl::StrCat("HOROVOD_START_TIMEOUT is '", timeout,
                                                       "', not a positive number of seconds"));
      }
    }
  }
  if (OnListedHosts(options) && options.elastic_timeout_seconds == 0) {
    options.elastic_timeout_seconds = 600;
    if (const std::string timeout = value("HOROVOD_ELASTIC_TIMEOUT"); !timeout.empty()) {
      if (!absl::SimpleAtoi(timeout, &options.elastic_timeout_seconds) ||
          options.elastic_timeout_seconds < 1) {
        return absl::InvalidArgumentError(absl::StrCat("HOROVOD_ELASTIC_TIMEOUT is '", timeout,
                                                       "', not a positive number of seconds"));
      }
    }
  }
  return absl::OkStatus();
}

Environment JobEnvironment(const LauncherOptions& options, Environment environment) {
  for (const auto& [name, value] : options.horovod_variables) environment[name] = value;
  return environment;
}

}  // namespace collective::launcher
