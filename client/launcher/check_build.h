// horovodrun --check-build (-cb): what this installation offers, in
// horovodrun's words and layout, so that a setup check written for Horovod
// reads it. The frameworks are those the Python on PATH (python3) can
// import through this package, as Horovod imports its extensions to tell;
// the rest is what collectived was built with.
#pragma once

#include <ostream>

#include "client/launcher/rank_environment.h"

namespace collective::launcher {

// Prints the report on `out`; returns the exit code (0, as horovodrun).
int PrintCheckBuild(std::ostream& out, const Environment& environment);

}  // namespace collective::launcher
