// Other machines for collectiverun's tests, reached as real ones are: a
// private sshd on a free loopback port, started for the test with a fresh
// host key and a fresh client key, and an ssh configuration that names each
// of a few host aliases (this machine, through that sshd). mpirun reaches
// them with OMPI_MCA_plm_rsh_agent="ssh -F <configuration>", exactly as it
// reaches a site's machines with plain ssh; nothing about collectiverun or
// Open MPI is faked.
#pragma once

#include <map>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "tests/common/subprocess.h"
#include "tests/common/temporary_directory.h"

namespace collective::testing {

class SshMachines {
 public:
  // Starts sshd (Debian's openssh-server) and waits, up to 20 s, until it
  // accepts connections. FAILED_PRECONDITION when sshd is not installed.
  static absl::StatusOr<std::unique_ptr<SshMachines>> Start(std::vector<std::string> hosts);
  ~SshMachines();

  const std::vector<std::string>& hosts() const { return hosts_; }
  // What makes mpirun (and so collectiverun) use this sshd.
  std::map<std::string, std::string> Environment() const;
  // The same with an ssh configuration that names the hosts but not the
  // port and the key, which must then come from the command line
  // (horovodrun's -p and -i).
  std::map<std::string, std::string> EnvironmentWithoutPortAndKey() const;
  int port() const { return port_; }
  const std::string& key() const { return key_; }
  // How many logins sshd has accepted so far.
  int Logins() const;

 private:
  SshMachines() = default;

  std::vector<std::string> hosts_;
  std::unique_ptr<TemporaryDirectory> directory_;
  std::string config_;
  std::string bare_config_;
  int port_ = 0;
  std::string key_;
  std::unique_ptr<Subprocess> sshd_;
};

}  // namespace collective::testing
