// The precompiled header of libvpmm's objects: the C++ standard headers most
// of its files include, parsed once per build instead of once per file
// (-Db_pch=true; the project's default is false, so that a file that forgets
// an include still fails to compile in the builds CI runs). scripts/demo.sh
// and `pip install .` turn it on: the library's compile time falls by about
// a seventh (the README, "Quick start").
// Standard C++ headers only: what this brings into every file is no driver
// or system header, so core's rule (tests/check_layering.sh) holds.
#include <algorithm>
#include <atomic>
#include <chrono>
#include <cinttypes>
#include <condition_variable>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <deque>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <set>
#include <string>
#include <unordered_map>
#include <unordered_set>
#include <utility>
#include <vector>
