#!/bin/sh
# One collectived per host with Open MPI, each serving its host's trainers on
# the usual socket. Usage: mpirun-daemons.sh host-a,host-b [collectived flags]
# The daemons wait for their trainers, form the job together, and stay until
# they are stopped: SIGUSR2 to this mpirun, which forwards it, stops each
# cleanly (as SIGTERM on its host would); Ctrl-C here makes mpirun kill them.
# --enable-recovery: when one daemon dies, mpirun leaves the others running,
# so that they fail the job on their trainers with an error naming the dead
# node and its ranks (they then exit with code 3) instead of being killed.
set -eu
hosts=$1
shift
nodes=$(echo "$hosts" | tr ',' '\n' | wc -l)
exec mpirun -np "$nodes" --map-by ppr:1:node -H "$hosts" --enable-recovery \
  collectived --socket /run/collectived/collectived.sock "$@"
