// The one doctest main of the project. GPU test executables return 77 themselves when there is
// no device (see fa/cuda/device.cuh), before doctest runs.
#define DOCTEST_CONFIG_IMPLEMENT_WITH_MAIN
#include <doctest/doctest.h>
