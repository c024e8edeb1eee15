// stage_cli.cuh — what the stage 08 executable says about itself (main.cu): its name, summary,
// defaults, variants (the ladder's rungs among them) and the notes of --help.
#pragma once

#include "fa/cli.hpp"

namespace fa::step08 {

CliSpec stage_cli_spec();

}  // namespace fa::step08
