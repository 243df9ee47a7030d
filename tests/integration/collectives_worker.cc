// collective-collectives-worker: one rank of an integration test job for the
// collectives beyond allreduce. A real client process that connects to a
// real daemon (COLLECTIVE_SOCKET, LOCAL_RANK, LOCAL_SIZE from the test) and
// plays one scenario. It checks results itself, bitwise, against what every
// rank's deterministic data must produce, and reports through its exit code,
// stdout (facts the test asserts on: error texts, join results) and stderr
// (why it failed). Ranks that must wait for each other's state ask the
// daemon's Status; nothing sleeps to synchronise.
//
//   allgather-matrix [--big-bytes N]   every dtype x size, rows differing by rank
//   broadcast-matrix [--big-bytes N]   every dtype x size x placement, every root
//   alltoall-matrix [--big-bytes N]    every dtype x size, even and uneven splits
//   reducescatter-matrix [--big-bytes N]  numeric dtypes x sum/average x size
//   grouped                            grouped allreduce, allgather, reducescatter
//   mixed                              many mixed collectives outstanding at once
//   static-sets --static-sets "A;B" [--connect-fails]  sets given at registration,
//                                      then reuse of id 1 (or: Connect must fail)
//   dynamic-sets                       sets added and removed at run time
//   set-errors                         process-set calls refused at the call
//   barrier                            barriers, each rank entering last once
//   join [--early E] [--last L]        E joins first, L last; the others go on
//   mismatch --collective C --kind K   the last rank deviates in K
//   call-errors                        arguments refused by the client library
//   stall                              the last rank never submits a tensor
//   timeline [--start FILE [--mark-cycles]]  named collectives for a timeline
//   repeat [--steps S] [--tensors T] [--change-at K]  the same allreduces, step
//                                      after step (tensor 0 reshaped from step K)
//   loop [--elements N] [--name NAME]  allreduces until one fails
//   lead [--steps S]                   rank 0 submits each step's allreduce
//                                      first, and tells the others to follow
//   workload --ops "KIND:DTYPE:COUNT:TIMES,..."  a known workload, to be counted
//   rooted-matrix [--only C]           reduce (every op), gather, scatter, every root
//   rooted-mismatch --kind K           the last rank's root, dtype or scatter rows differ
//   p2p-ring, p2p-order, p2p-self, p2p-mismatch, p2p-dead-peer, p2p-pending,
//   p2p-beside-allreduce               point-to-point messages (see
//                                      collectives_worker_p2p.cc)
//
// Every scenario connects with --static-sets "0,1;2" when given (see
// ConnectOrDie).
#include "tests/integration/collectives_worker.h"

#include <functional>
#include <map>
#include <string>

int main(int argc, char** argv) {
  using namespace collective::testing;  // NOLINT(build/namespaces): the scenario table
  const Args args(argv + 1, argv + argc);
  if (args.empty()) Die("no scenario given");
  const std::map<std::string, std::function<int(const Args&)>> scenarios = {
      {"allgather-matrix", AllgatherMatrix},
      {"broadcast-matrix", BroadcastMatrix},
      {"alltoall-matrix", AlltoallMatrix},
      {"reducescatter-matrix", ReducescatterMatrix},
      {"grouped", Grouped},
      {"mixed", MixedAsync},
      {"static-sets", StaticSets},
      {"dynamic-sets", DynamicSets},
      {"set-errors", SetErrors},
      {"barrier", BarrierScenario},
      {"join", JoinScenario},
      {"mismatch", MismatchScenario},
      {"call-errors", CallErrors},
      {"stall", StallScenario},
      {"timeline", TimelineScenario},
      {"repeat", RepeatScenario},
      {"loop", LoopScenario},
      {"lead", LeadScenario},
      {"workload", WorkloadScenario},
      {"rooted-matrix", RootedMatrix},
      {"rooted-mismatch", RootedMismatch},
      {"p2p-ring", P2pRing},
      {"p2p-order", P2pOrder},
      {"p2p-self", P2pSelf},
      {"p2p-mismatch", P2pMismatch},
      {"p2p-dead-peer", P2pDeadPeer},
      {"p2p-pending", P2pPending},
      {"p2p-beside-allreduce", P2pBesideAllreduce},
  };
  const auto it = scenarios.find(args[0]);
  if (it == scenarios.end()) Die("unknown scenario " + args[0]);
  return it->second(args);
}
