// host_device.hpp — FA_HOST_DEVICE marks a function that both the CPU and the GPU run: plain C++
// that a CPU exercise checks and a CUDA kernel calls (stage 11's split merge, stage 13's ring merge).
#pragma once

#if defined(__CUDACC__)
#define FA_HOST_DEVICE __host__ __device__
#else
#define FA_HOST_DEVICE
#endif
