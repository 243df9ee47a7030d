// The deployment artefacts, checked with the tools operators use: the
// installed tree (cmake --install into a temporary prefix) with a systemd
// unit that `systemd-analyze verify` accepts and names the installed paths,
// a sysusers.d file that systemd-sysusers turns into the unit's user, man
// pages, and an uninstall that removes what was installed but the live
// configuration; the container image's runtime packages against `ldd` of
// the installed binaries; and the Kubernetes manifests' volumes, probes and
// limits.
#include <algorithm>
#include <filesystem>
#include <fstream>
#include <map>
#include <set>
#include <sstream>
#include <string>
#include <vector>

#include <sys/resource.h>
#include <sys/stat.h>

#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <yaml-cpp/yaml.h>

#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_replace.h"
#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"
#include "config/daemon_config.h"
#include "tests/common/temporary_directory.h"
#include "tests/integration/daemon_process.h"

namespace collective::testing {
namespace {

namespace fs = std::filesystem;
using ::testing::Contains;
using ::testing::HasSubstr;
using ::testing::IsEmpty;

const std::string kSource = COLLECTIVE_SOURCE_DIR;
const std::string kBuild = COLLECTIVE_BINARY_DIR;
const std::string kCmake = CMAKE_COMMAND_PATH;

std::string ReadFile(const std::string& path) {
  std::ifstream in(path);
  std::stringstream text;
  text << in.rdbuf();
  return text.str();
}

// Installs `components` of the build into `prefix`; "" when it worked, else
// what cmake said.
std::string Install(const std::string& prefix, const std::vector<std::string>& components) {
  for (const std::string& component : components) {
    const CommandResult run =
        RunCommand({kCmake, "--install", kBuild, "--prefix", prefix, "--component", component}, {},
                   absl::Seconds(60));
    if (run.exit_code != 0) return absl::StrCat(component, ": ", run.out, run.err);
  }
  return "";
}

// The unit's "Key=Value" lines, by key (keys may repeat).
std::multimap<std::string, std::string> UnitSettings(const std::string& text) {
  std::multimap<std::string, std::string> settings;
  for (absl::string_view line : absl::StrSplit(text, '\n')) {
    if (line.empty() || line[0] == '#' || line[0] == '[') continue;
    const size_t eq = line.find('=');
    if (eq != absl::string_view::npos) {
      settings.emplace(std::string(line.substr(0, eq)), std::string(line.substr(eq + 1)));
    }
  }
  return settings;
}

std::string Setting(const std::multimap<std::string, std::string>& settings,
                    const std::string& key) {
  const auto it = settings.find(key);
  return it == settings.end() ? "" : it->second;
}

TEST(InstallTest, UnitVerifiesAndRunsTheInstalledDaemon) {
  TemporaryDirectory temp("deploy");
  const std::string prefix = temp.path() + "/prefix";
  ASSERT_EQ(Install(prefix, {"daemon", "systemd"}), "");
  for (const char* file :
       {"bin/collectived", "bin/collectivectl", "lib/libcollective-proto.so.0",
        "etc/collectived/collectived.yaml", "share/collectived/collectived.yaml",
        "share/man/man8/collectived.8", "share/man/man1/collectivectl.1",
        "share/doc/collectived/README.md", "share/doc/collectived/docs/configuration.md",
        "share/bash-completion/completions/collectived",
        "share/bash-completion/completions/collectivectl", "lib/systemd/system/collectived.service",
        "lib/sysusers.d/collectived.conf"}) {
    EXPECT_TRUE(fs::exists(prefix + "/" + file)) << file;
  }

  // The unit names the installed daemon and configuration.
  const std::string unit = prefix + "/lib/systemd/system/collectived.service";
  const auto settings = UnitSettings(ReadFile(unit));
  EXPECT_EQ(Setting(settings, "ExecStart"),
            absl::StrCat(prefix, "/bin/collectived --config ", prefix,
                         "/etc/collectived/collectived.yaml"));
  EXPECT_EQ(Setting(settings, "Type"), "notify");
  EXPECT_EQ(Setting(settings, "RuntimeDirectory"), "collectived");
  EXPECT_EQ(Setting(settings, "Restart"), "on-failure");
  EXPECT_EQ(Setting(settings, "NoNewPrivileges"), "yes");
  EXPECT_EQ(Setting(settings, "ProtectSystem"), "strict");
  EXPECT_EQ(Setting(settings, "PrivateTmp"), "yes");
  EXPECT_EQ(Setting(settings, "LimitMEMLOCK"), "infinity");
  EXPECT_EQ(Setting(settings, "LimitNOFILE"), "65536");
  EXPECT_EQ(Setting(settings, "WatchdogSec"), "60");
  EXPECT_EQ(Setting(settings, "PrivateDevices"), "") << "the daemon needs the host's /dev/shm";
  const std::vector<std::string> writable =
      absl::StrSplit(Setting(settings, "ReadWritePaths"), ' ');
  EXPECT_THAT(writable, Contains("/dev/shm"));
  EXPECT_THAT(writable, Contains("/run/collectived"));

  // systemd accepts it: keys, values, the binary, and the man pages of
  // Documentation= (found through MANPATH in the temporary prefix).
  const CommandResult verify =
      RunCommand({"/usr/bin/systemd-analyze", "verify", unit},
                 {{"MANPATH", prefix + "/share/man"}, {"SYSTEMD_LOG_COLOR", "0"}});
  EXPECT_EQ(verify.exit_code, 0) << verify.out << verify.err;
  // Remarks on the unit name it (unknown keys are only warnings); lines
  // about the machine itself (a container without systemd running) do not.
  for (absl::string_view line : absl::StrSplit(verify.out + verify.err, '\n', absl::SkipEmpty())) {
    EXPECT_FALSE(absl::StrContains(line, "collectived")) << "systemd-analyze verify: " << line;
  }

  // The sysusers.d file creates the unit's user and group.
  const std::string root = temp.path() + "/root";
  fs::create_directories(root + "/etc");
  const CommandResult sysusers = RunCommand(
      {"/usr/bin/systemd-sysusers", "--root=" + root, prefix + "/lib/sysusers.d/collectived.conf"});
  ASSERT_EQ(sysusers.exit_code, 0) << sysusers.out << sysusers.err;
  EXPECT_TRUE(absl::StrContains("\n" + ReadFile(root + "/etc/passwd"),
                                absl::StrCat("\n", Setting(settings, "User"), ":x:")));
  EXPECT_TRUE(absl::StrContains("\n" + ReadFile(root + "/etc/group"),
                                absl::StrCat("\n", Setting(settings, "Group"), ":x:")));

  // The installed daemon finds its library and reads the installed
  // configuration.
  const CommandResult config =
      RunCommand({prefix + "/bin/collectived", "--config",
                  prefix + "/etc/collectived/collectived.yaml", "--print-config"});
  EXPECT_EQ(config.exit_code, 0) << config.err;
  EXPECT_THAT(config.out, HasSubstr("socket: \"/run/collectived/collectived.sock\""));
  // The man pages are the programs' --help.
  const std::string page = ReadFile(prefix + "/share/man/man8/collectived.8");
  EXPECT_THAT(page, HasSubstr(".TH COLLECTIVED 8"));
  EXPECT_THAT(page, HasSubstr("--metrics-listen"));
  EXPECT_THAT(ReadFile(prefix + "/share/man/man1/collectivectl.1"),
              HasSubstr("COLLECTIVECTL METRICS"));
}

// The (soft, hard) "Max open files" of process `pid`, from /proc.
std::pair<std::string, std::string> DescriptorLimits(pid_t pid) {
  for (absl::string_view line :
       absl::StrSplit(ReadFile(absl::StrCat("/proc/", pid, "/limits")), '\n')) {
    if (!absl::ConsumePrefix(&line, "Max open files")) continue;
    const std::vector<std::string> words = absl::StrSplit(line, ' ', absl::SkipEmpty());
    if (words.size() >= 2) return {words[0], words[1]};
  }
  return {};
}

// LimitNOFILE= sets the hard limit; services start with a soft one of 1024
// whatever it is: the daemon raises its own.
TEST(DescriptorLimitTest, DaemonRaisesItsSoftLimitToTheHardOne) {
  rlimit original{};
  ASSERT_EQ(::getrlimit(RLIMIT_NOFILE, &original), 0);
  if (original.rlim_max <= 256) GTEST_SKIP() << "the hard descriptor limit is too low to lower";
  rlimit lowered = original;
  lowered.rlim_cur = 256;  // inherited by the daemon
  ASSERT_EQ(::setrlimit(RLIMIT_NOFILE, &lowered), 0);
  auto daemon = DaemonProcess::Start({.flags = SmallMemoryFlags()});
  ASSERT_EQ(::setrlimit(RLIMIT_NOFILE, &original), 0);
  ASSERT_TRUE(daemon.ok()) << daemon.status();
  const auto [soft, hard] = DescriptorLimits((*daemon)->process().pid());
  EXPECT_FALSE(hard.empty());
  EXPECT_EQ(soft, hard);
  EXPECT_TRUE(ExitedCleanly((*daemon)->Stop())) << (*daemon)->process().Stderr();
}

// Under systemd (JOURNAL_STREAM, or log_priority_prefix: always) every
// line starts with its syslog priority, which journald stores as PRIORITY.
TEST(JournalTest, DaemonLinesCarryTheirPriority) {
  auto daemon =
      DaemonProcess::Start({.flags = SmallMemoryFlags(),
                            .environment = {{"COLLECTIVED_LOG_PRIORITY_PREFIX", "always"}}});
  ASSERT_TRUE(daemon.ok()) << daemon.status();
  EXPECT_TRUE(ExitedCleanly((*daemon)->Stop())) << (*daemon)->process().Stderr();
  const std::string log = (*daemon)->process().Stderr();
  const std::vector<std::string> lines = absl::StrSplit(log, '\n', absl::SkipEmpty());
  ASSERT_FALSE(lines.empty());
  for (const std::string& line : lines) {
    EXPECT_TRUE(absl::StartsWith(line, "<6>") || absl::StartsWith(line, "<4>") ||
                absl::StartsWith(line, "<3>"))
        << line;
  }
  EXPECT_THAT(log, HasSubstr("<6>"));
}

TEST(InstallTest, UpgradeKeepsTheLiveConfigAndUninstallRemovesTheRest) {
  TemporaryDirectory temp("deploy");
  const std::string prefix = temp.path() + "/prefix";
  ASSERT_EQ(Install(prefix, {"daemon", "systemd"}), "");
  const std::string live = prefix + "/etc/collectived/collectived.yaml";
  std::ofstream(live) << "log_level: debug\n";
  ASSERT_EQ(Install(prefix, {"daemon", "systemd"}), "");
  EXPECT_EQ(ReadFile(live), "log_level: debug\n");

  const CommandResult uninstall =
      RunCommand({kCmake, "-DPREFIX=" + prefix, "-P", kSource + "/cmake/Uninstall.cmake"});
  ASSERT_EQ(uninstall.exit_code, 0) << uninstall.out << uninstall.err;
  std::vector<std::string> left;
  for (const auto& entry : fs::recursive_directory_iterator(prefix)) {
    if (!entry.is_directory()) left.push_back(fs::relative(entry.path(), prefix).string());
  }
  EXPECT_EQ(left, std::vector<std::string>{"etc/collectived/collectived.yaml"});
  EXPECT_FALSE(fs::exists(prefix + "/share/collectived"));
  EXPECT_FALSE(fs::exists(prefix + "/share/doc/collectived"));
}

// --- The container image ---------------------------------------------------

// The lines of the Dockerfile stage named `stage`.
std::vector<std::string> Stage(const std::string& dockerfile, absl::string_view stage) {
  std::vector<std::string> lines;
  bool in = false;
  for (absl::string_view line : absl::StrSplit(dockerfile, '\n')) {
    if (absl::StartsWith(line, "FROM ")) in = absl::EndsWith(line, absl::StrCat(" AS ", stage));
    if (in) lines.emplace_back(line);
  }
  return lines;
}

// The instructions of `stage`, with their continuation lines joined.
std::vector<std::string> Instructions(const std::vector<std::string>& stage) {
  std::vector<std::string> instructions;
  bool continued = false;
  for (const std::string& line : stage) {
    absl::string_view text = absl::StripAsciiWhitespace(line);
    const bool continues = absl::ConsumeSuffix(&text, "\\");
    if (continued) {
      absl::StrAppend(&instructions.back(), " ", text);
    } else {
      instructions.emplace_back(text);
    }
    continued = continues;
  }
  return instructions;
}

// The packages the `apt-get install` commands of `stage` name.
std::set<std::string> AptInstalled(const std::vector<std::string>& stage) {
  std::set<std::string> packages;
  for (const std::string& instruction : Instructions(stage)) {
    if (!absl::StartsWith(instruction, "RUN ")) continue;
    for (absl::string_view command : absl::StrSplit(instruction.substr(4), "&&")) {
      const std::vector<absl::string_view> words = absl::StrSplit(command, ' ', absl::SkipEmpty());
      if (words.size() < 2 || words[0] != "apt-get" || words[1] != "install") continue;
      for (size_t i = 2; i < words.size(); ++i) {
        if (!absl::StartsWith(words[i], "-")) packages.emplace(words[i]);
      }
    }
  }
  return packages;
}

// Every ELF file under `dir`.
std::vector<std::string> ElfFiles(const std::string& dir) {
  std::vector<std::string> files;
  for (const auto& entry : fs::recursive_directory_iterator(dir)) {
    if (!entry.is_regular_file()) continue;
    std::ifstream in(entry.path(), std::ios::binary);
    char magic[4] = {};
    in.read(magic, 4);
    if (in && std::string(magic, 4) ==
                  "\x7f"
                  "ELF")
      files.push_back(entry.path().string());
  }
  return files;
}

// Debian packages that own `paths` (dpkg -S), trying the other side of the
// merged /usr where dpkg registered a library under /usr/lib or /lib.
std::set<std::string> OwningPackages(const std::set<std::string>& paths,
                                     std::set<std::string>& unowned) {
  std::set<std::string> packages;
  std::set<std::string> pending = paths;
  for (int attempt = 0; attempt < 2 && !pending.empty(); ++attempt) {
    std::vector<std::string> argv = {"/usr/bin/dpkg", "-S"};
    for (const std::string& path : pending) {
      argv.push_back(attempt == 0                      ? path
                     : absl::StartsWith(path, "/usr/") ? path.substr(4)
                                                       : "/usr" + path);
    }
    const CommandResult run = RunCommand(argv);
    std::set<std::string> found;
    for (absl::string_view line : absl::StrSplit(run.out, '\n', absl::SkipEmpty())) {
      const size_t separator = line.find(": /");
      if (separator == absl::string_view::npos) continue;
      for (absl::string_view owner : absl::StrSplit(line.substr(0, separator), ", ")) {
        packages.emplace(owner.substr(0, owner.find(':')));
      }
      std::string path(line.substr(separator + 2));
      if (attempt == 1) path = absl::StartsWith(path, "/usr/") ? path.substr(4) : "/usr" + path;
      found.insert(path);
    }
    for (const std::string& path : found) pending.erase(path);
  }
  unowned = pending;
  return packages;
}

struct PackageInfo {
  bool base = false;  // Essential, or Priority required: in every Debian image
  std::vector<std::string> depends;
};

std::map<std::string, PackageInfo> InstalledPackages() {
  const CommandResult run =
      RunCommand({"/usr/bin/dpkg-query", "-W",
                  "-f=${Package}\t${Essential}\t${Priority}\t${Depends}, ${Pre-Depends}\n"});
  std::map<std::string, PackageInfo> packages;
  for (absl::string_view line : absl::StrSplit(run.out, '\n', absl::SkipEmpty())) {
    const std::vector<absl::string_view> fields = absl::StrSplit(line, '\t');
    if (fields.size() != 4) continue;
    PackageInfo& info = packages[std::string(fields[0])];
    info.base = fields[1] == "yes" || fields[2] == "required";
    for (absl::string_view dependency : absl::StrSplit(fields[3], absl::ByAnyChar(",|"))) {
      dependency = absl::StripAsciiWhitespace(dependency);
      dependency = dependency.substr(0, dependency.find_first_of(" :("));
      if (!dependency.empty()) info.depends.emplace_back(dependency);
    }
  }
  return packages;
}

// `roots` and everything they depend on.
std::set<std::string> Closure(std::set<std::string> roots,
                              const std::map<std::string, PackageInfo>& packages) {
  std::vector<std::string> todo(roots.begin(), roots.end());
  while (!todo.empty()) {
    const std::string name = todo.back();
    todo.pop_back();
    const auto it = packages.find(name);
    if (it == packages.end()) continue;
    for (const std::string& dependency : it->second.depends) {
      if (roots.insert(dependency).second) todo.push_back(dependency);
    }
  }
  return roots;
}

// Whether `path` is the NCCL library this tree was built against.
bool IsNccl(absl::string_view path) {
  const std::string nccl = COLLECTIVE_NCCL_LIBRARY;
  if (nccl.empty()) return false;
  std::error_code error;
  const std::filesystem::path loaded = std::filesystem::canonical(std::string(path), error);
  if (error) return false;
  return loaded == std::filesystem::canonical(nccl, error) && !error;
}

TEST(ContainerTest, RuntimeStageInstallsExactlyWhatTheBinariesLoad) {
  const std::string dockerfile = ReadFile(kSource + "/deploy/container/Dockerfile");
  const std::vector<std::string> build = Stage(dockerfile, "build");
  const std::vector<std::string> runtime = Stage(dockerfile, "runtime");
  ASSERT_FALSE(build.empty());
  ASSERT_FALSE(runtime.empty());
  EXPECT_EQ(build.front(), "FROM debian:12 AS build");
  EXPECT_EQ(runtime.front(), "FROM debian:12-slim AS runtime");
  EXPECT_THAT(absl::StrJoin(build, "\n"),
              HasSubstr("cmake --install build --prefix /opt/collectived --component daemon"));
  // A CPU image: its build stage has no CUDA, and says so.
  EXPECT_THAT(absl::StrJoin(build, "\n"), HasSubstr("-DCOLLECTIVE_GPU=OFF"));
  EXPECT_THAT(runtime, Contains("COPY --from=build /opt/collectived /opt/collectived"));
  EXPECT_THAT(runtime, Contains("USER collectived:collectived"));
  const std::set<std::string> listed = AptInstalled(runtime);
  ASSERT_FALSE(listed.empty());

  // What the image's tree loads: the same component, installed here.
  TemporaryDirectory temp("deploy");
  const std::string prefix = temp.path() + "/opt";
  ASSERT_EQ(Install(prefix, {"daemon"}), "");
  std::set<std::string> libraries;
  const std::vector<std::string> elves = ElfFiles(prefix);
  ASSERT_GE(elves.size(), 3u);
  for (const std::string& file : elves) {
    const CommandResult ldd = RunCommand({"/usr/bin/ldd", file});
    ASSERT_EQ(ldd.exit_code, 0) << file << ": " << ldd.err;
    EXPECT_THAT(ldd.out, ::testing::Not(HasSubstr("not found"))) << file;
    for (absl::string_view line : absl::StrSplit(ldd.out, '\n', absl::SkipEmpty())) {
      const size_t arrow = line.find("=> /");
      if (arrow == absl::string_view::npos) continue;
      const absl::string_view path = line.substr(arrow + 3, line.find(" (") - arrow - 3);
      // The project's own libraries come with the tree; NCCL is what a GPU
      // build here adds, which the CPU image's build leaves out.
      if (absl::StartsWith(path, prefix) || IsNccl(path)) continue;
      libraries.emplace(path);
    }
  }
  std::set<std::string> unowned;
  const std::set<std::string> needed = OwningPackages(libraries, unowned);
  EXPECT_THAT(unowned, IsEmpty()) << "libraries of no Debian package";

  // Every package listed provides a library the binaries load...
  for (const std::string& package : listed) {
    EXPECT_THAT(needed, Contains(package)) << package << " is installed but nothing loads it";
  }
  // ...and every library comes with a listed package, its dependencies, or
  // the base image.
  const std::map<std::string, PackageInfo> packages = InstalledPackages();
  std::set<std::string> base;
  for (const auto& [name, info] : packages) {
    if (info.base) base.insert(name);
  }
  const std::set<std::string> image = Closure(base, packages);
  const std::set<std::string> provided = Closure(listed, packages);
  for (const std::string& package : needed) {
    EXPECT_TRUE(provided.contains(package) || image.contains(package))
        << package << " provides a library the binaries load, but the runtime stage lacks it";
  }
}

// The GPU image: NVIDIA's CUDA images, the GPU path on, and a runtime stage
// whose packages the build stage derives from ldd of the installed tree.
// That derivation, run here on this build's installed tree, finds the
// packages the CPU image's checked list names, and nothing the CPU image
// lacks.
TEST(ContainerTest, GpuImageBuildsTheGpuPathOnACudaBaseAndInstallsWhatItLoads) {
  const std::string dockerfile = ReadFile(kSource + "/deploy/container/Dockerfile.gpu");
  const std::vector<std::string> build = Stage(dockerfile, "build");
  const std::vector<std::string> runtime = Stage(dockerfile, "runtime");
  ASSERT_FALSE(build.empty());
  ASSERT_FALSE(runtime.empty());
  EXPECT_TRUE(absl::StartsWith(build.front(), "FROM nvidia/cuda:")) << build.front();
  EXPECT_TRUE(absl::EndsWith(build.front(), "-devel-ubuntu24.04 AS build")) << build.front();
  EXPECT_TRUE(absl::StartsWith(runtime.front(), "FROM nvidia/cuda:")) << runtime.front();
  EXPECT_TRUE(absl::EndsWith(runtime.front(), "-runtime-ubuntu24.04 AS runtime"))
      << runtime.front();
  const std::vector<std::string> steps = Instructions(build);
  const std::string joined = absl::StrJoin(steps, "\n");
  EXPECT_THAT(joined, HasSubstr("-DCOLLECTIVE_GPU=ON"));
  EXPECT_THAT(joined, HasSubstr("grep -q 'GPU path: CUDA'"));
  EXPECT_THAT(joined,
              HasSubstr("cmake --install build --prefix /opt/collectived --component daemon"));
  EXPECT_THAT(runtime, Contains("COPY --from=build /opt/collectived /opt/collectived"));
  EXPECT_THAT(runtime, Contains("USER collectived:collectived"));

  // The derivation of the runtime packages, less its check for NCCL, which
  // a CPU build does not load.
  const auto derive = std::find_if(steps.begin(), steps.end(), [](const std::string& step) {
    return absl::StartsWith(step, "RUN find /opt/collectived");
  });
  ASSERT_NE(derive, steps.end());
  std::string script = derive->substr(4);
  script = script.substr(0, script.find(" && grep -q '^libnccl2$'"));
  TemporaryDirectory temp("deploy");
  const std::string prefix = temp.path() + "/opt";
  ASSERT_EQ(Install(prefix, {"daemon"}), "");
  fs::create_directories(prefix + "/share/collectived");
  script = absl::StrReplaceAll(script, {{"/opt/collectived", prefix}});
  const CommandResult run = RunCommand({"/bin/sh", "-c", script});
  ASSERT_EQ(run.exit_code, 0) << run.err;
  const std::vector<std::string> lines = absl::StrSplit(
      ReadFile(prefix + "/share/collectived/runtime-packages"), '\n', absl::SkipEmpty());
  const std::set<std::string> derived(lines.begin(), lines.end());
  const std::set<std::string> listed =
      AptInstalled(Stage(ReadFile(kSource + "/deploy/container/Dockerfile"), "runtime"));
  for (const std::string& package : listed) EXPECT_THAT(derived, Contains(package));
  const std::map<std::string, PackageInfo> packages = InstalledPackages();
  std::set<std::string> base;
  for (const auto& [name, info] : packages) {
    if (info.base) base.insert(name);
  }
  const std::set<std::string> image = Closure(base, packages);
  const std::set<std::string> provided = Closure(listed, packages);
  for (const std::string& package : derived) {
    EXPECT_TRUE(provided.contains(package) || image.contains(package) ||
                absl::StartsWith(package, "libnccl"))
        << package << " is derived but the CPU image, checked by hand, has no need of it";
  }
}

// The build context leaves out local build trees and caches.
TEST(ContainerTest, DockerignoreLeavesOutBuildTrees) {
  const std::string ignore = ReadFile(kSource + "/.dockerignore");
  for (const char* entry : {"\nbuild/\n", "\nbuild-*/\n", "\n.git\n", "\n**/__pycache__/\n"}) {
    EXPECT_THAT("\n" + ignore, HasSubstr(entry));
  }
}

// --- Kubernetes -------------------------------------------------------------

std::vector<YAML::Node> Documents(const std::string& file) {
  return YAML::LoadAllFromFile(kSource + "/deploy/" + file);
}

// The container of `pod` (a PodSpec) named `name`, in containers or
// initContainers.
YAML::Node ContainerNamed(const YAML::Node& pod, const std::string& name) {
  for (const char* list : {"initContainers", "containers"}) {
    for (const YAML::Node& container : pod[list]) {
      if (container["name"].as<std::string>() == name) return container;
    }
  }
  return YAML::Node();
}

YAML::Node VolumeNamed(const YAML::Node& pod, const std::string& name) {
  for (const YAML::Node& volume : pod["volumes"]) {
    if (volume["name"].as<std::string>() == name) return volume;
  }
  return YAML::Node();
}

// The volume `container` mounts at `path`.
std::string MountedAt(const YAML::Node& container, const std::string& path) {
  for (const YAML::Node& mount : container["volumeMounts"]) {
    if (mount["mountPath"].as<std::string>() == path) return mount["name"].as<std::string>();
  }
  return "";
}

std::string SocketArgument(const YAML::Node& container) {
  for (const YAML::Node& arg : container["args"]) {
    const std::string text = arg.as<std::string>();
    if (absl::StartsWith(text, "--socket=")) return text.substr(9);
  }
  return "";
}

std::string EnvValue(const YAML::Node& container, const std::string& name) {
  for (const YAML::Node& variable : container["env"]) {
    if (variable["name"].as<std::string>() == name) return variable["value"].as<std::string>();
  }
  return "";
}

// The daemon's probes run `collectivectl --socket SOCKET ... health`.
void ExpectHealthProbes(const YAML::Node& daemon, const std::string& socket) {
  for (const char* probe : {"startupProbe", "readinessProbe", "livenessProbe"}) {
    SCOPED_TRACE(probe);
    ASSERT_TRUE(daemon[probe].IsMap());
    const std::vector<std::string> command =
        daemon[probe]["exec"]["command"].as<std::vector<std::string>>();
    ASSERT_GE(command.size(), 4u);
    EXPECT_EQ(command.front(), "collectivectl");
    EXPECT_EQ(command.back(), "health");
    const auto flag = std::find(command.begin(), command.end(), "--socket");
    ASSERT_NE(flag, command.end());
    ASSERT_NE(flag + 1, command.end());
    EXPECT_EQ(*(flag + 1), socket);
  }
}

// The daemon and the trainer of `pod` share /dev/shm (one memory-backed
// emptyDir with a size limit) and the socket's directory: a directory of a
// shared emptyDir, below its (world-writable) mount point, where the trainer
// looks.
void ExpectSharedSocketAndShm(const YAML::Node& pod, const YAML::Node& daemon,
                              const YAML::Node& trainer, const std::string& socket) {
  const std::string shm = MountedAt(daemon, "/dev/shm");
  EXPECT_EQ(MountedAt(trainer, "/dev/shm"), shm);
  const YAML::Node shm_volume = VolumeNamed(pod, shm);
  ASSERT_TRUE(shm_volume.IsMap()) << shm;
  EXPECT_EQ(shm_volume["emptyDir"]["medium"].as<std::string>(), "Memory");
  EXPECT_TRUE(shm_volume["emptyDir"]["sizeLimit"].IsDefined());

  const std::string mount = fs::path(socket).parent_path().parent_path().string();
  const std::string socket_volume = MountedAt(daemon, mount);
  ASSERT_FALSE(socket_volume.empty()) << "no volume holds " << socket;
  EXPECT_TRUE(VolumeNamed(pod, socket_volume)["emptyDir"].IsDefined());
  EXPECT_EQ(MountedAt(trainer, mount), socket_volume);
  EXPECT_EQ(EnvValue(trainer, "COLLECTIVE_SOCKET"), socket);
}

void ExpectLimits(const YAML::Node& container) {
  EXPECT_TRUE(container["resources"]["limits"]["cpu"].IsDefined());
  EXPECT_TRUE(container["resources"]["limits"]["memory"].IsDefined());
}

TEST(KubernetesTest, SidecarSharesSocketAndShmAndIsProbedWithCollectivectl) {
  const std::vector<YAML::Node> documents = Documents("kubernetes/trainer-with-sidecar.yaml");
  ASSERT_EQ(documents.size(), 1u);
  ASSERT_EQ(documents[0]["kind"].as<std::string>(), "Pod");
  const YAML::Node pod = documents[0]["spec"];
  EXPECT_TRUE(pod["securityContext"]["runAsNonRoot"].as<bool>());
  const YAML::Node daemon = ContainerNamed(pod, "collectived");
  const YAML::Node trainer = ContainerNamed(pod, "trainer");
  ASSERT_TRUE(daemon.IsMap());
  ASSERT_TRUE(trainer.IsMap());
  // A native sidecar: an init container that keeps running.
  EXPECT_EQ(daemon["restartPolicy"].as<std::string>(), "Always");

  const std::string socket = SocketArgument(daemon);
  ASSERT_FALSE(socket.empty());
  ExpectSharedSocketAndShm(pod, daemon, trainer, socket);

  ExpectHealthProbes(daemon, socket);
  ExpectLimits(daemon);
  ExpectLimits(trainer);
}

// The document of `kind` in `documents` (the first), or an undefined node.
YAML::Node OfKind(const std::vector<YAML::Node>& documents, const std::string& kind) {
  for (const YAML::Node& document : documents) {
    if (document["kind"].as<std::string>() == kind) return document;
  }
  return YAML::Node();
}

TEST(KubernetesTest, DaemonSetServesTheNodeThroughHostPaths) {
  const std::vector<YAML::Node> documents = Documents("kubernetes/collectived-daemonset.yaml");
  ASSERT_EQ(documents.size(), 4u);
  ASSERT_EQ(documents[0]["kind"].as<std::string>(), "DaemonSet");
  const YAML::Node pod = documents[0]["spec"]["template"]["spec"];
  const YAML::Node daemon = ContainerNamed(pod, "collectived");
  ASSERT_TRUE(daemon.IsMap());
  const std::string socket = SocketArgument(daemon);
  const std::string directory = fs::path(socket).parent_path().string();
  const YAML::Node socket_volume = VolumeNamed(pod, MountedAt(daemon, directory));
  EXPECT_EQ(socket_volume["hostPath"]["path"].as<std::string>(), directory);
  EXPECT_EQ(VolumeNamed(pod, MountedAt(daemon, "/dev/shm"))["hostPath"]["path"].as<std::string>(),
            "/dev/shm");
  ExpectHealthProbes(daemon, socket);
  ExpectLimits(daemon);
  // Root without root's powers: only what handing segments to trainers needs.
  const YAML::Node capabilities = daemon["securityContext"]["capabilities"];
  EXPECT_EQ(capabilities["drop"].as<std::vector<std::string>>(), std::vector<std::string>{"ALL"});
  EXPECT_EQ(capabilities["add"].as<std::vector<std::string>>(),
            (std::vector<std::string>{"CHOWN", "FOWNER"}));
  EXPECT_FALSE(daemon["securityContext"]["allowPrivilegeEscalation"].as<bool>());

  // The example trainer reaches the same socket and /dev/shm.
  const YAML::Node trainer_pod = OfKind(documents, "Pod")["spec"];
  ASSERT_TRUE(trainer_pod.IsMap());
  const YAML::Node trainer = ContainerNamed(trainer_pod, "trainer");
  EXPECT_EQ(EnvValue(trainer, "COLLECTIVE_SOCKET"), socket);
  EXPECT_EQ(
      VolumeNamed(trainer_pod, MountedAt(trainer, directory))["hostPath"]["path"].as<std::string>(),
      directory);
  EXPECT_EQ(VolumeNamed(trainer_pod, MountedAt(trainer, "/dev/shm"))["hostPath"]["path"]
                .as<std::string>(),
            "/dev/shm");
}

// "7Gi", "512Mi", "1GiB", "256MiB", "1024": bytes (0 if not understood).
uint64_t Bytes(const std::string& quantity) {
  absl::string_view text = quantity;
  uint64_t scale = 1;
  for (const auto& [suffix, factor] : std::vector<std::pair<const char*, uint64_t>>{
           {"GiB", 1ull << 30}, {"MiB", 1ull << 20}, {"Gi", 1ull << 30}, {"Mi", 1ull << 20}}) {
    if (absl::ConsumeSuffix(&text, suffix)) {
      scale = factor;
      break;
    }
  }
  uint64_t value = 0;
  return absl::SimpleAtoi(text, &value) ? value * scale : 0;
}

// The value of `--name=VALUE` among `container`'s args, or "".
std::string Argument(const YAML::Node& container, const std::string& name) {
  for (const YAML::Node& arg : container["args"]) {
    const std::string word = arg.as<std::string>();
    absl::string_view text = word;
    if (absl::ConsumePrefix(&text, name + "=")) return std::string(text);
  }
  return "";
}

// The trainer's local ranks: torchrun's --nproc-per-node.
int LocalRanks(const YAML::Node& trainer) {
  for (const YAML::Node& node : trainer["command"]) {
    const std::string word = node.as<std::string>();
    absl::string_view text = word;
    int ranks = 0;
    if (absl::ConsumePrefix(&text, "--nproc-per-node=") && absl::SimpleAtoi(text, &ranks)) {
      return ranks;
    }
  }
  return 0;
}

// What the daemon itself needs besides the segments (its request in the
// DaemonSet, where the segments are the jobs').
constexpr uint64_t kDaemonOwnBytes = 512ull << 20;

// The segments the daemon reserves in /dev/shm for one job of
// `local_ranks`: an arena per rank and the result segment (the doorbell is
// a page), with the arena sizes of its arguments or the defaults.
uint64_t JobSegmentBytes(const YAML::Node& daemon, int local_ranks) {
  const config::DaemonConfig defaults;
  const std::string arena = Argument(daemon, "--default-arena-bytes");
  const std::string result = Argument(daemon, "--result-arena-bytes");
  return static_cast<uint64_t>(local_ranks) *
             (arena.empty() ? defaults.default_arena_bytes : Bytes(arena)) +
         (result.empty() ? defaults.result_arena_bytes : Bytes(result)) + (1ull << 20);
}

// The daemon reserves the segments (posix_fallocate), so they are charged to
// its container: its memory limit (and, in a sidecar, its request: it is
// all taken when the job forms) holds them and the daemon; the shared
// /dev/shm emptyDir holds the segments.
TEST(KubernetesTest, MemoryLimitsHoldWhatTheDaemonIsConfiguredToReserve) {
  for (const char* file :
       {"kubernetes/trainer-with-sidecar.yaml", "kubernetes/trainer-gpu-with-sidecar.yaml"}) {
    SCOPED_TRACE(file);
    const YAML::Node pod = Documents(file)[0]["spec"];
    const YAML::Node daemon = ContainerNamed(pod, "collectived");
    const YAML::Node trainer = ContainerNamed(pod, "trainer");
    const int ranks = LocalRanks(trainer);
    ASSERT_GT(ranks, 0);
    const uint64_t segments = JobSegmentBytes(daemon, ranks);
    const uint64_t limit = Bytes(daemon["resources"]["limits"]["memory"].as<std::string>());
    const uint64_t request = Bytes(daemon["resources"]["requests"]["memory"].as<std::string>());
    EXPECT_GE(limit, segments + kDaemonOwnBytes) << ranks << " ranks reserve " << segments;
    EXPECT_GE(request, segments + kDaemonOwnBytes) << ranks << " ranks reserve " << segments;
    const YAML::Node shm = VolumeNamed(pod, MountedAt(daemon, "/dev/shm"));
    EXPECT_GE(Bytes(shm["emptyDir"]["sizeLimit"].as<std::string>()), segments);
  }
  // The node's daemon holds at least the example trainer pod's job.
  const std::vector<YAML::Node> node = Documents("kubernetes/collectived-daemonset.yaml");
  const YAML::Node daemon = ContainerNamed(node[0]["spec"]["template"]["spec"], "collectived");
  const int ranks = LocalRanks(ContainerNamed(OfKind(node, "Pod")["spec"], "trainer"));
  ASSERT_GT(ranks, 0);
  EXPECT_GE(Bytes(daemon["resources"]["limits"]["memory"].as<std::string>()),
            JobSegmentBytes(daemon, ranks) + kDaemonOwnBytes);
}

// Metrics on the loopback, or on the pod's own IP where Prometheus scrapes
// the pod (its annotations, or a Service that selects it), never 0.0.0.0.
TEST(KubernetesTest, MetricsAreBoundWhereTheyAreScraped) {
  struct Case {
    const char* file;
    YAML::Node (*pod_template)(const std::vector<YAML::Node>&);
  };
  const auto pod_itself = [](const std::vector<YAML::Node>& documents) {
    return OfKind(documents, "Pod");
  };
  const auto daemon_set = [](const std::vector<YAML::Node>& documents) {
    return YAML::Node(OfKind(documents, "DaemonSet")["spec"]["template"]);
  };
  for (const Case& c : std::vector<Case>{{"kubernetes/trainer-with-sidecar.yaml", pod_itself},
                                         {"kubernetes/trainer-gpu-with-sidecar.yaml", pod_itself},
                                         {"kubernetes/collectived-daemonset.yaml", daemon_set}}) {
    SCOPED_TRACE(c.file);
    const std::vector<YAML::Node> documents = Documents(c.file);
    const YAML::Node pod = c.pod_template(documents);
    const YAML::Node daemon = ContainerNamed(pod["spec"], "collectived");
    const std::string listen = Argument(daemon, "--metrics-listen");
    ASSERT_FALSE(listen.empty());
    EXPECT_FALSE(absl::StartsWith(listen, "0.0.0.0:")) << listen;
    if (absl::StartsWith(listen, "127.0.0.1:")) continue;
    ASSERT_TRUE(absl::StartsWith(listen, "$(POD_IP):")) << listen;
    bool from_pod_ip = false;
    for (const YAML::Node& variable : daemon["env"]) {
      if (variable["name"].as<std::string>() == "POD_IP") {
        from_pod_ip =
            variable["valueFrom"]["fieldRef"]["fieldPath"].as<std::string>() == "status.podIP";
      }
    }
    EXPECT_TRUE(from_pod_ip);
    const YAML::Node annotations = pod["metadata"]["annotations"];
    const bool annotated =
        annotations["prometheus.io/scrape"].IsDefined() &&
        annotations["prometheus.io/scrape"].as<std::string>() == "true" &&
        annotations["prometheus.io/port"].as<std::string>() == listen.substr(listen.find(':') + 1);
    const YAML::Node service = OfKind(documents, "Service");
    EXPECT_TRUE(annotated || service.IsDefined()) << "nothing scrapes " << listen;
  }
}

// Where the GPU path is used: GPUs requested, the GPU taint tolerated, MPS
// run before the daemon and reached by every container through one pipe
// directory, all as one uid (MPS serves one), and the GPU image.
TEST(KubernetesTest, GpuSidecarRequestsGpusAndRunsMps) {
  const std::vector<YAML::Node> documents = Documents("kubernetes/trainer-gpu-with-sidecar.yaml");
  ASSERT_EQ(documents.size(), 1u);
  const YAML::Node pod = documents[0]["spec"];
  const YAML::Node mps = ContainerNamed(pod, "mps");
  const YAML::Node daemon = ContainerNamed(pod, "collectived");
  const YAML::Node trainer = ContainerNamed(pod, "trainer");
  ASSERT_TRUE(mps.IsMap());
  ASSERT_TRUE(daemon.IsMap());
  ASSERT_TRUE(trainer.IsMap());
  EXPECT_GT(trainer["resources"]["limits"]["nvidia.com/gpu"].as<int>(), 0);
  bool tolerates = false;
  for (const YAML::Node& toleration : pod["tolerations"]) {
    tolerates = tolerates || toleration["key"].as<std::string>() == "nvidia.com/gpu";
  }
  EXPECT_TRUE(tolerates);
  EXPECT_TRUE(pod["shareProcessNamespace"].as<bool>());
  EXPECT_TRUE(pod["securityContext"]["runAsUser"].IsDefined());

  // MPS first (init containers start in order), then the daemon.
  EXPECT_EQ(pod["initContainers"][0]["name"].as<std::string>(), "mps");
  EXPECT_EQ(mps["restartPolicy"].as<std::string>(), "Always");
  EXPECT_EQ(mps["command"][0].as<std::string>(), "nvidia-cuda-mps-control");
  const std::string pipe = EnvValue(mps, "CUDA_MPS_PIPE_DIRECTORY");
  ASSERT_FALSE(pipe.empty());
  const std::string mps_volume = MountedAt(mps, fs::path(pipe).parent_path().string());
  ASSERT_FALSE(mps_volume.empty());
  for (const YAML::Node& container : {daemon, trainer}) {
    EXPECT_EQ(EnvValue(container, "CUDA_MPS_PIPE_DIRECTORY"), pipe);
    EXPECT_EQ(MountedAt(container, fs::path(pipe).parent_path().string()), mps_volume);
  }
  EXPECT_EQ(daemon["image"].as<std::string>(), "collectived:gpu");
  EXPECT_EQ(EnvValue(daemon, "NVIDIA_VISIBLE_DEVICES"), "all");
  ExpectSharedSocketAndShm(pod, daemon, trainer, SocketArgument(daemon));
  ExpectHealthProbes(daemon, SocketArgument(daemon));

  // The node daemon runs on GPU nodes too.
  bool node_daemon_tolerates = false;
  for (const YAML::Node& toleration : Documents(
           "kubernetes/collectived-daemonset.yaml")[0]["spec"]["template"]["spec"]["tolerations"]) {
    node_daemon_tolerates =
        node_daemon_tolerates || toleration["key"].as<std::string>() == "nvidia.com/gpu";
  }
  EXPECT_TRUE(node_daemon_tolerates);
}

TEST(KubernetesTest, MpiJobStartsOneDaemonPerWorkerBesideItsTrainer) {
  const std::vector<YAML::Node> documents = Documents("multinode/mpijob-sidecar.yaml");
  ASSERT_EQ(documents.size(), 1u);
  ASSERT_EQ(documents[0]["kind"].as<std::string>(), "MPIJob");
  const YAML::Node spec = documents[0]["spec"];
  const YAML::Node launcher_pod = spec["mpiReplicaSpecs"]["Launcher"]["template"]["spec"];
  const YAML::Node worker_pod = spec["mpiReplicaSpecs"]["Worker"]["template"]["spec"];
  const int workers = spec["mpiReplicaSpecs"]["Worker"]["replicas"].as<int>();

  // mpirun: one daemon per worker, survivors left to report a death.
  const std::vector<std::string> mpirun =
      ContainerNamed(launcher_pod, "launcher")["command"].as<std::vector<std::string>>();
  ASSERT_FALSE(mpirun.empty());
  EXPECT_EQ(mpirun.front(), "mpirun");
  const auto np = std::find(mpirun.begin(), mpirun.end(), "-np");
  ASSERT_NE(np, mpirun.end());
  ASSERT_NE(np + 1, mpirun.end());
  EXPECT_EQ(*(np + 1), std::to_string(workers));
  EXPECT_THAT(mpirun, Contains("ppr:1:node"));
  EXPECT_THAT(mpirun, Contains("--enable-recovery"));
  const auto socket_flag = std::find(mpirun.begin(), mpirun.end(), "--socket");
  ASSERT_NE(socket_flag, mpirun.end());
  ASSERT_NE(socket_flag + 1, mpirun.end());
  const std::string socket = *(socket_flag + 1);
  // ssh sessions have sshd's PATH: the daemon is named by its path.
  EXPECT_THAT(mpirun, Contains("/opt/collectived/bin/collectived"));
  EXPECT_EQ(spec["sshAuthMountPath"].as<std::string>(), "/home/collectived/.ssh");

  // The worker pod: daemon and trainer share the socket's directory and
  // /dev/shm, as in the sidecar example.
  EXPECT_TRUE(worker_pod["securityContext"]["runAsNonRoot"].as<bool>());
  EXPECT_EQ(worker_pod["securityContext"]["runAsUser"].as<int>(), 999);  // the image's user
  const YAML::Node daemon = ContainerNamed(worker_pod, "collectived");
  const YAML::Node trainer = ContainerNamed(worker_pod, "trainer");
  ASSERT_TRUE(daemon.IsMap());
  ASSERT_TRUE(trainer.IsMap());
  ExpectSharedSocketAndShm(worker_pod, daemon, trainer, socket);
}

TEST(KubernetesTest, EveryManifestParses) {
  for (const char* file :
       {"kubernetes/trainer-with-sidecar.yaml", "kubernetes/trainer-gpu-with-sidecar.yaml",
        "kubernetes/collectived-daemonset.yaml", "multinode/mpijob-sidecar.yaml"}) {
    SCOPED_TRACE(file);
    std::vector<YAML::Node> documents;
    EXPECT_NO_THROW(documents = Documents(file));
    for (const YAML::Node& document : documents) {
      EXPECT_TRUE(document["apiVersion"].IsDefined());
      EXPECT_TRUE(document["kind"].IsDefined());
    }
  }
}

}  // namespace
}  // namespace collective::testing
