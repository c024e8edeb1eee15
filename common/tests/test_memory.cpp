#include <doctest/doctest.h>

#include "fa/memory.hpp"

TEST_CASE("the meter counts current and peak bytes of live buffers") {
  fa::MemoryMeter meter;
  {
    fa::HostBuffer<float> a(meter, 1000);
    CHECK(meter.current() == 4000);
    {
      fa::HostBuffer<double> b(meter, 10);
      CHECK(meter.current() == 4080);
    }
    CHECK(meter.current() == 4000);
    fa::HostBuffer<float> moved = std::move(a);
    CHECK(meter.current() == 4000);
  }
  CHECK(meter.current() == 0);
  CHECK(meter.peak() == 4080);
}

TEST_CASE("a limit turns an oversized allocation into OutOfMemory, not a crash") {
  fa::MemoryMeter meter(1 << 20);
  fa::HostBuffer<float> ok(meter, 1000);
  CHECK_THROWS_AS(fa::HostBuffer<float>(meter, 1 << 20), fa::OutOfMemory);
  CHECK(meter.current() == 4000);
}

TEST_CASE("bytes format for humans") {
  CHECK(fa::format_bytes(512) == "512 B");
  CHECK(fa::format_bytes(2 * 1024 * 1024) == "2.0 MiB");
}
