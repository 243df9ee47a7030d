#!/bin/sh
# One collectived per host with Open MPI, each serving its host's trainers on
# the usual socket. Usage: mpirun-daemons.sh host-a,host-b [collectived flags]
# The daemons wait for their trainers, form the job together, and stay until
# they are stopped (systemctl/kill on each host, or Ctrl-C here).
set -eu
hosts=$1
shift
nodes=$(echo "$hosts" | tr ',' '\n' | wc -l)
exec mpirun -np "$nodes" --map-by ppr:1:node -H "$hosts" \
  collectived --socket /run/collectived/collectived.sock "$@"
